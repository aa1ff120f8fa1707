r"""Take an FFN's memory apart and change it: sub-updates, knock-outs, activation patching.

Reading a key or a value (``helpers.memory``) says what a neuron *could* do. These tools measure what it
*does* in a forward pass:

* ``sub_updates``: the FFN output at one position split into its terms ``m_i v_i`` (Geva et al. 2022),
  and ``direct_logit_shifts``: what each term does to the next-token logits when it enters the final
  LayerNorm directly (exact for the last block, with the norm's scale held at its actual value);
* ``knock_out``: chosen memory coefficients set to 0, at every position or at one position per row, and
  ``knockout_sets``: the neuron sets a knock-out is compared across (a fact's own most active neurons,
  another fact's, the fact's own matched to the activity the other set removes, random);
* ``patched_ffn_output`` and ``patching_effect``: activation patching, i.e. one layer's FFN output at one
  position replaced by what it was on another prompt, which locates where a prediction is read.

All of them work on any model ``helpers.memory.find_ffns`` understands; nothing changes the weights.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from helpers import validate
from helpers.memory import _check_neurons, _ids, answer_probability, collect, find_ffns, logits_of

# ---------------------------------------------------------------------------------------------
# Sub-updates: one FFN output, neuron by neuron
# ---------------------------------------------------------------------------------------------


@dataclass
class SubUpdates:
    """The FFN output of one layer at one position, split into neurons (Geva et al. 2022).

    Attributes:
        coefficients: ``(d_ff,)`` the memory coefficients ``m_i``.
        vectors: ``(d_ff, d_model)`` the sub-updates ``m_i v_i``.
        bias: ``(d_model,)`` ``b2`` (zeros without bias); ``vectors.sum(0) + bias`` is the FFN output.
        output: ``(d_model,)`` the FFN output recorded in the forward pass.
        order: ``(d_ff,)`` neurons by decreasing ``|m_i| · ||v_i||``.
    """

    coefficients: torch.Tensor
    vectors: torch.Tensor
    bias: torch.Tensor
    output: torch.Tensor
    order: torch.Tensor

    @property
    def scores(self) -> torch.Tensor:
        """``(d_ff,)`` the size ``|m_i| · ||v_i||`` of each sub-update."""
        return self.vectors.norm(dim=1)


def sub_updates(model: nn.Module, ids: torch.Tensor, layer: int, position: int, example: int = 0) -> SubUpdates:
    """Split the FFN output of ``layer`` at ``ids[example, position]`` into the terms ``m_i v_i``."""
    ids = _ids(ids)
    memories = find_ffns(model)
    ffn = memories.layer(layer)
    validate.int_in_range("example", example, 0, ids.shape[0] - 1)
    validate.int_in_range("position", position, 0, ids.shape[1] - 1)
    trace = collect(memories.model, ids[example:example + 1])
    m = trace.coefficients[layer][0, position]
    vectors = m.unsqueeze(1) * ffn.values.detach()
    bias = ffn.value_bias.detach() if ffn.value_bias is not None else torch.zeros(vectors.shape[1])
    order = vectors.norm(dim=1).argsort(descending=True)
    return SubUpdates(m, vectors, bias, trace.outputs[layer][0, position], order)


@torch.no_grad()
def final_residual(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """``(N, T, d_model)``: the residual stream as it enters the final LayerNorm."""
    memories = find_ffns(model)
    captured = {}
    handle = memories.final_norm.register_forward_hook(lambda module, inputs, output: captured.update(h=inputs[0]))
    try:
        was_training = memories.model.training
        memories.model.eval()
        logits_of(memories.model, _ids(ids))
        memories.model.train(was_training)
    finally:
        handle.remove()
    return captured["h"].detach()


@torch.no_grad()
def direct_logit_shifts(model: nn.Module, vectors: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    r"""How much each vector ``s`` in ``vectors`` ``(..., d_model)`` moves the next-token logits ``(..., vocab)``
    when it is part of ``residual`` ``(d_model,)`` (or broadcastable), the stream entering the final norm:

    .. math:: \Delta\ell = W_U\,\big(\gamma \odot (s - \bar s)\big) / \sigma(\text{residual})

    The final LayerNorm is linear once its scale ``σ`` is fixed, so the shifts of all terms add up to the
    shift of their sum. Exact for the output of the last block (it enters the norm directly); for an earlier
    block it is only the *direct* path, ignoring what later blocks do with it. ``β`` and the unembedding's
    bias are left out: they do not depend on ``s``. Only differences between logits matter to the softmax.
    """
    memories = find_ffns(model)
    norm, unembed = memories.final_norm, memories.unembed
    if not isinstance(norm, nn.LayerNorm) or not hasattr(unembed, "weight"):
        raise TypeError(f"direct_logit_shifts needs an nn.LayerNorm final norm and an unembedding with a weight, "
                        f"got {type(norm).__name__} and {type(unembed).__name__}")
    sigma = torch.sqrt(residual.var(dim=-1, unbiased=False, keepdim=True) + norm.eps)
    centred = vectors - vectors.mean(dim=-1, keepdim=True)
    return (centred * norm.weight / sigma) @ unembed.weight.T


# ---------------------------------------------------------------------------------------------
# Knock-outs
# ---------------------------------------------------------------------------------------------


@contextmanager
def knock_out(model: nn.Module, layer: int, neurons: int | Sequence[int] | torch.Tensor,
              positions: torch.Tensor | None = None) -> Iterator[None]:
    """Inside the ``with`` block, chosen neurons of ``layer`` have memory coefficient 0 (they write nothing).

    ``neurons``: an index or a list/1-D tensor of indices (silenced in every row), or a bool tensor
    ``(N, d_ff)`` choosing different neurons for each of the N rows of the next forward pass.
    ``positions``: ``None`` silences them at every position; a long tensor ``(N,)`` only at position
    ``positions[n]`` of row ``n`` (a knock-out where one fact is read, e.g. at its subject).
    Nest two blocks to silence neurons in two layers.
    """
    ffn = find_ffns(model).layer(layer)
    if isinstance(neurons, torch.Tensor) and neurons.dtype == torch.bool:
        if neurons.dim() != 2 or neurons.shape[1] != ffn.d_ff:
            raise ValueError(f"a bool neurons mask must have shape (N, d_ff={ffn.d_ff}), got {tuple(neurons.shape)}")
        off = neurons
    else:
        off = torch.zeros(1, ffn.d_ff, dtype=torch.bool)
        off[0, _check_neurons(neurons, ffn.d_ff)] = True
    if positions is not None:
        if not isinstance(positions, torch.Tensor) or positions.dtype != torch.long or positions.dim() != 1:
            raise TypeError("positions must be a (N,) torch.long tensor, one position per row")
        if off.shape[0] not in (1, positions.shape[0]):
            raise ValueError(f"the neurons mask has {off.shape[0]} rows but positions has {positions.shape[0]}")

    def pre_hook(module, inputs):
        m = inputs[0]
        rows = positions.shape[0] if positions is not None else off.shape[0]
        if m.dim() != 3 or (rows > 1 and m.shape[0] != rows):
            raise ValueError(f"knock_out was set up for {rows} rows, but the batch has shape {tuple(m.shape)}")
        keep = (~off).to(m.dtype).to(m.device).unsqueeze(1).expand(m.shape[0], m.shape[1], -1)    # (N, T, d_ff)
        if positions is not None:
            at = torch.zeros(m.shape[:2], dtype=torch.bool, device=m.device)
            at[torch.arange(m.shape[0], device=m.device), positions.to(m.device)] = True
            keep = torch.where(at.unsqueeze(-1), keep, torch.ones_like(keep))
        return (m * keep, *inputs[1:])

    handle = ffn.value_module.register_forward_pre_hook(pre_hook)
    try:
        yield
    finally:
        handle.remove()


def knockout_sets(activity: torch.Tensor, donor: torch.Tensor, n_off: int,
                  generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """The neuron sets a knock-out is judged against, one row per fact: ``{name: (N, d_ff) bool}``.

    Args:
        activity: ``(N, d_ff)`` each fact's memory coefficients where it is read (one position per fact).
        donor: ``(N,)`` long, for each fact another fact whose top neurons serve as the control
            (e.g. another subject, same relation).
        n_off: how many neurons the "own", "other" and "random" sets switch off.
    Returns:
        ``"own"``: the fact's ``n_off`` most active neurons; ``"other"``: the donor's ``n_off`` most active;
        ``"matched"``: the fact's own most active neurons, as few as it takes to remove at least the activity
        ``Σ m`` (at this fact) that the "other" set removes; ``"random"``: ``n_off`` random neurons.
        The own set removes the most activity by construction, so "own" against "other" alone cannot
        separate fact-specific storage from activity; "matched" against "other" can.
    """
    validate.float_tensor("activity", activity, min_dims=2)
    N, d_ff = activity.shape
    validate.int_in_range("n_off", n_off, 1, d_ff)
    if not isinstance(donor, torch.Tensor) or donor.shape != (N,):
        raise ValueError(f"donor must be a long tensor of shape ({N},), one other fact per fact")

    def top(scores: torch.Tensor) -> torch.Tensor:
        return torch.zeros(N, d_ff, dtype=torch.bool).scatter_(1, scores.topk(n_off, dim=1).indices, True)

    own, other = top(activity), top(activity[donor])
    removed = (activity * other).sum(dim=1, keepdim=True)                          # (N, 1): Σm the other set removes
    ranked, order = activity.sort(dim=1, descending=True)
    reached = ranked.cumsum(dim=1) >= removed                                       # (N, d_ff)
    n_matched = torch.where(reached.any(dim=1), reached.float().argmax(dim=1) + 1, torch.full((N,), d_ff))
    keep_first = torch.arange(d_ff)[None, :] < n_matched[:, None]
    matched = torch.zeros(N, d_ff, dtype=torch.bool).scatter_(1, order, keep_first)
    noise = torch.rand(N, d_ff, generator=generator)
    return {"own": own, "other": other, "matched": matched, "random": top(noise)}


# ---------------------------------------------------------------------------------------------
# Activation patching
# ---------------------------------------------------------------------------------------------


@contextmanager
def patched_ffn_output(model: nn.Module, layer: int, positions: torch.Tensor,
                       replacement: torch.Tensor) -> Iterator[None]:
    """Inside the ``with`` block, the FFN output of ``layer`` at position ``positions[n]`` of row ``n`` is
    ``replacement[n]`` (``(N, d_model)``), e.g. what it was on another prompt; other positions are untouched."""
    ffn = find_ffns(model).layer(layer)
    if not isinstance(positions, torch.Tensor) or positions.dtype != torch.long or positions.dim() != 1:
        raise TypeError("positions must be a (N,) torch.long tensor, one position per row")
    if replacement.dim() != 2 or replacement.shape[0] != positions.shape[0]:
        raise ValueError(f"replacement must be (N={positions.shape[0]}, d_model), got {tuple(replacement.shape)}")

    def hook(module, inputs, output):
        if output.shape[0] != positions.shape[0]:
            raise ValueError(f"patched_ffn_output was set up for {positions.shape[0]} rows, the batch has "
                             f"{output.shape[0]}")
        output = output.clone()
        output[torch.arange(output.shape[0]), positions] = replacement.to(output.dtype)
        return output

    handle = ffn.module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@torch.no_grad()
def patching_effect(model: nn.Module, ids: torch.Tensor, answer_pos: torch.Tensor, answer_id: torch.Tensor,
                    donor_ids: torch.Tensor, positions: Sequence[int] | None = None) -> torch.Tensor:
    """A small causal trace: ``(n_layers, T)``, the mean probability of each row's own answer when the FFN
    output of one layer at one position is replaced by what it was on the donor row (``donor_ids[n]``, a
    prompt of the same shape about another subject). Rows must be aligned (same template, same positions).

    ``positions``: the columns to compute (default: every position up to the last ``answer_pos``); the
    others are ``nan``. A position where the answer collapses is where that layer's FFN output carries what
    the answer needs; ``answer_probability`` without patching is the baseline.
    """
    memories = find_ffns(model)
    ids, donor_ids = _ids(ids), _ids(donor_ids, "donor_ids")
    if donor_ids.shape != ids.shape:
        raise ValueError(f"donor_ids must have the shape of ids, {tuple(ids.shape)}, got {tuple(donor_ids.shape)}")
    donor = collect(memories.model, donor_ids).outputs                           # per layer (N, T, d_model)
    N, T = ids.shape
    if positions is None:
        positions = range(int(answer_pos.max()) + 1)
    for t in positions:
        validate.int_in_range("position", t, 0, T - 1)
    effect = torch.full((memories.n_layers, T), float("nan"))
    for layer in range(memories.n_layers):
        for t in positions:
            at = torch.full((N,), t, dtype=torch.long)
            with patched_ffn_output(memories.model, layer, at, donor[layer][:, t]):
                effect[layer, t] = answer_probability(memories.model, ids, answer_pos, answer_id).mean()
    return effect
