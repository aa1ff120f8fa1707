r"""Read a transformer's FFN as a key-value memory (Geva et al. 2021, 2022).

For one token vector ``x`` (the FFN's input, after the block's LayerNorm) a
dense FFN computes

    m = φ(K x + b1)            memory coefficients, one per neuron   (d_ff,)
    FFN(x) = Σ_i m_i v_i + b2  a weighted sum of value vectors        (d_model,)

with key ``k_i`` = row i of ``W1`` (``ffn.w1.weight[i]``, shape ``(d_model,)``)
and value ``v_i`` = column i of ``W2`` (``ffn.w2.weight[:, i]``). This module
finds, for any model that exposes its FFNs:

* the memory coefficients of every neuron at every position (``collect``);
* the prefixes that trigger a neuron most (``top_triggers``) and how often a
  neuron's triggers share a label (``pattern_share``);
* what a value writes, read through the final LayerNorm and the unembedding
  (``value_logits``), and the **agreement rate** between a neuron's value and
  the next token of its top trigger (``agreement``);
* the per-neuron sub-updates ``m_i v_i`` of one forward pass (``sub_updates``);
* the effect of switching neurons off (``knock_out``, ``answer_probability``);
* a neuron explorer (``NeuronExplorer``) and notebook 03's shipped model (``load_fact_model``,
  ``python -m helpers.memory --make-checkpoint``).

Supported models (``find_ffns``): the course's ``TinyGPT`` (or anything with
``model.blocks[l].ffn`` being a ``helpers.ffn.FFN``, plus ``model.ln_f`` and
``model.lm_head``) and Hugging Face GPT-2 (``model.transformer.h[l].mlp``,
whose ``Conv1D`` weights are stored transposed).

The memory coefficients are read as the *input of the contracting map*
(``w2`` / ``c_proj``) with a forward hook, so gated FFNs work too: there
``m = φ(W1 x + b1) ⊙ (W3 x + b3)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from helpers import validate
from helpers.ffn import FFN
from helpers.transformer import GPTConfig, TinyGPT, train_lm

# ---------------------------------------------------------------------------------------------
# Finding the FFNs of a model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FFNLayer:
    """One layer's FFN seen as a memory.

    Attributes:
        index: the layer number.
        module: the FFN module (hooks on it see the FFN's input and output).
        value_module: the contracting map; its input is ``m`` ``(..., d_ff)``, its output ``W2 m + b2``.
        transposed: True when the weights are stored ``(in, out)`` (GPT-2's ``Conv1D``), False for ``nn.Linear``.
    """

    index: int
    module: nn.Module
    expand_module: nn.Module
    value_module: nn.Module
    transposed: bool

    @property
    def keys(self) -> torch.Tensor:
        """``(d_ff, d_model)``: row i is key i (a view of the weights)."""
        w = self.expand_module.weight
        return w.T if self.transposed else w

    @property
    def values(self) -> torch.Tensor:
        """``(d_ff, d_model)``: row i is value i, i.e. column i of ``W2`` (a view of the weights)."""
        w = self.value_module.weight
        return w if self.transposed else w.T

    @property
    def value_matrix(self) -> torch.Tensor:
        """``W2`` in math layout ``(d_model, d_ff)``, so that the FFN output is ``W2 @ m + b2`` (a view)."""
        return self.values.T

    @property
    def value_bias(self) -> torch.Tensor | None:
        """``b2``, shape ``(d_model,)``, or ``None``."""
        return self.value_module.bias

    @property
    def d_ff(self) -> int:
        return self.values.shape[0]


@dataclass(frozen=True)
class FFNMemories:
    """Where a model keeps its FFNs, its final norm and its unembedding.

    Attributes:
        layers: one ``FFNLayer`` per block, in order.
        final_norm: the LayerNorm applied before the unembedding (``ln_f``).
        unembed: the unembedding module; ``unembed(final_norm(h))`` gives logits ``(..., vocab)``.
    """

    model: nn.Module
    layers: list[FFNLayer]
    final_norm: nn.Module
    unembed: nn.Module

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def layer(self, layer: int) -> FFNLayer:
        """The ``FFNLayer`` of block ``layer`` (checked: an int in ``[0, n_layers - 1]``)."""
        validate.int_in_range("layer", layer, 0, self.n_layers - 1)
        return self.layers[layer]


def _expected_ffn_message(model: object) -> str:
    return ("model must expose its FFNs as model.blocks[l].ffn (a helpers.ffn.FFN, with model.ln_f and "
            "model.lm_head, like helpers.transformer.TinyGPT) or be a Hugging Face GPT-2 "
            f"(model.transformer.h[l].mlp); got {type(model).__name__}")


def find_ffns(model: nn.Module) -> FFNMemories:
    """Locate the FFNs of ``model``; raise ``TypeError`` naming what is missing.

    Works for ``TinyGPT`` (and any module with ``blocks[l].ffn`` = ``helpers.ffn.FFN``,
    ``ln_f`` and ``lm_head``) and for Hugging Face ``GPT2LMHeadModel``.
    """
    if isinstance(model, FFNMemories):
        return model
    if not isinstance(model, nn.Module):
        raise TypeError(_expected_ffn_message(model))
    blocks = getattr(model, "blocks", None)
    if blocks is not None:
        layers = []
        for i, block in enumerate(blocks):
            ffn = getattr(block, "ffn", None)
            if not isinstance(ffn, FFN):
                raise TypeError(f"model.blocks[{i}].ffn must be a helpers.ffn.FFN, got {type(ffn).__name__}; "
                                + _expected_ffn_message(model))
            layers.append(FFNLayer(i, ffn, ffn.w1, ffn.w2, transposed=False))
        if not layers or not hasattr(model, "ln_f") or not hasattr(model, "lm_head"):
            raise TypeError("model.blocks is empty or model lacks ln_f / lm_head; " + _expected_ffn_message(model))
        return FFNMemories(model, layers, model.ln_f, model.lm_head)
    transformer = getattr(model, "transformer", None)
    h = getattr(transformer, "h", None)
    if h is not None and hasattr(model, "lm_head") and hasattr(transformer, "ln_f"):
        layers = []
        for i, block in enumerate(h):
            mlp = getattr(block, "mlp", None)
            if mlp is None or not hasattr(mlp, "c_fc") or not hasattr(mlp, "c_proj"):
                raise TypeError(f"model.transformer.h[{i}].mlp lacks c_fc / c_proj; " + _expected_ffn_message(model))
            layers.append(FFNLayer(i, mlp, mlp.c_fc, mlp.c_proj, transposed=True))
        return FFNMemories(model, layers, transformer.ln_f, model.lm_head)
    raise TypeError(_expected_ffn_message(model))


def _ids(ids: object, name: str = "ids") -> torch.Tensor:
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 2:
        raise TypeError(f"{name} must be a (N, T) torch.long tensor of token ids, got "
                        f"{getattr(ids, 'dtype', type(ids).__name__)} of shape {tuple(getattr(ids, 'shape', ()))}")
    return ids


def logits_of(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Next-token logits ``(N, T, vocab)`` of ``model`` (a TinyGPT or a Hugging Face model)."""
    out = model(ids)
    return out if isinstance(out, torch.Tensor) else out.logits


# ---------------------------------------------------------------------------------------------
# Memory coefficients
# ---------------------------------------------------------------------------------------------


@dataclass
class Trace:
    """One forward pass, recorded.

    Attributes:
        logits: ``(N, T, vocab)``.
        coefficients: one ``(N, T, d_ff)`` tensor per layer: the memory coefficients ``m``.
        outputs: one ``(N, T, d_model)`` tensor per layer: the FFN outputs ``Σ m_i v_i + b2``.
    """

    logits: torch.Tensor
    coefficients: list[torch.Tensor]
    outputs: list[torch.Tensor]


@torch.no_grad()
def collect(model: nn.Module, ids: torch.Tensor) -> Trace:
    """Run ``model`` on ``ids`` ``(N, T)`` and record every layer's memory coefficients and FFN output."""
    memories = find_ffns(model)
    ids = _ids(ids)
    coefficients: list[torch.Tensor | None] = [None] * memories.n_layers
    outputs: list[torch.Tensor | None] = [None] * memories.n_layers

    def make_hook(i: int):
        def hook(module, inputs, output):
            coefficients[i] = inputs[0].detach()
            outputs[i] = output.detach()
        return hook

    handles = [layer.value_module.register_forward_hook(make_hook(layer.index)) for layer in memories.layers]
    try:
        was_training = memories.model.training
        memories.model.eval()
        device = next(memories.model.parameters()).device
        logits = logits_of(memories.model, ids.to(device)).detach()
        memories.model.train(was_training)
    finally:
        for handle in handles:
            handle.remove()
    return Trace(logits, list(coefficients), list(outputs))


def memory_coefficients(model: nn.Module, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """The memory coefficients of one layer: ``(N, T, d_ff)`` for ``ids`` ``(N, T)``."""
    memories = find_ffns(model)
    memories.layer(layer)
    return collect(memories.model, ids).coefficients[layer]


def prefix_mask(ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """``(N, T)`` bool: True at position t when a real next token ``ids[n, t+1]`` exists.

    These are the prefixes ``ids[n, :t+1]`` that have a continuation in the data.
    """
    ids = _ids(ids)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, :-1] = (ids[:, 1:] != pad_id) & (ids[:, :-1] != pad_id)
    return mask


# ---------------------------------------------------------------------------------------------
# Keys: what triggers a neuron
# ---------------------------------------------------------------------------------------------


@dataclass
class Triggers:
    """The top-k trigger prefixes of neurons, one per example (where the neuron fires most).

    With ``neuron`` given the tensors are ``(k,)``; otherwise ``(d_ff, k)``.

    Attributes:
        examples: row of each trigger in the data.
        positions: the prefix ends at this position (it is ``ids[example, :position + 1]``).
        coefficients: the memory coefficient there, in decreasing order.
    """

    examples: torch.Tensor
    positions: torch.Tensor
    coefficients: torch.Tensor



def _mask_invalid(coefficients: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Set the coefficients (N, T, n) at positions where ``valid`` (N, T) is False to −∞ (not 0), so a row
    whose valid coefficients are all negative keeps its negative peak; ``None`` leaves them as they are."""
    if valid is None:
        return coefficients
    N, T = coefficients.shape[:2]
    if not isinstance(valid, torch.Tensor) or valid.dtype != torch.bool or valid.shape != (N, T):
        raise ValueError(f"valid must be a bool tensor of shape {(N, T)}, got "
                         f"{getattr(valid, 'dtype', type(valid).__name__)} {tuple(getattr(valid, 'shape', ()))}")
    if not valid.any(dim=1).all():
        raise ValueError("valid has a row with no True position: every example needs at least one prefix")
    return coefficients.masked_fill(~valid.unsqueeze(-1), float("-inf"))

def _check_coefficients(coefficients: object) -> torch.Tensor:
    validate.float_tensor("coefficients", coefficients, min_dims=3)
    if coefficients.dim() != 3:
        raise ValueError(f"coefficients must be (N, T, d_ff), got shape {tuple(coefficients.shape)}")
    return coefficients


def top_triggers(coefficients: torch.Tensor, k: int, valid: torch.Tensor | None = None,
                 neuron: int | None = None) -> Triggers:
    """Top-k trigger prefixes per neuron, as in Geva et al. (2021).

    For every example (row) keep the position where the neuron's coefficient is largest
    (among ``valid`` positions), then rank the examples by that value.

    Args:
        coefficients: ``(N, T, d_ff)`` memory coefficients of one layer.
        k: how many examples, at most ``N``.
        valid: ``(N, T)`` bool, the positions that count as prefix ends (default: all).
        neuron: one neuron index, or ``None`` for all neurons.
    """
    coefficients = _check_coefficients(coefficients)
    N, T, d_ff = coefficients.shape
    validate.int_in_range("k", k, 1, N)
    if neuron is not None:
        validate.int_in_range("neuron", neuron, 0, d_ff - 1)
        coefficients = coefficients[..., neuron:neuron + 1]
    coefficients = _mask_invalid(coefficients, valid)
    best, best_pos = coefficients.max(dim=1)                  # (N, n): best position of every example
    # (n, k): best examples per neuron; a stable sort keeps exact ties (saturated neurons) in row order
    values, examples = (t[:, :k] for t in best.T.sort(dim=1, descending=True, stable=True))
    positions = best_pos.T.gather(1, examples)
    if neuron is not None:
        return Triggers(examples[0], positions[0], values[0])
    return Triggers(examples, positions, values)


def prefix_words(ids: torch.Tensor, example: int, position: int, decode) -> str:
    """The prefix ``ids[example, :position + 1]`` as text, without padding or ``<bos>``; ``decode``: ids -> words."""
    words = [w for w in decode(ids[example, : position + 1].tolist()) if w not in ("<bos>", "<pad>")]
    return " ".join(words)


def pattern_share(examples: torch.Tensor, labels: Sequence[object]) -> torch.Tensor:
    """For each neuron, the share of its top-k trigger examples that carry its most common label.

    Args:
        examples: ``(d_ff, k)`` example indices (``Triggers.examples``).
        labels: one label per example (e.g. each fact's relation or answer).
    Returns:
        ``(d_ff,)`` float in ``[1/k, 1]``; 1 means all k triggers share a label.
    """
    if not isinstance(examples, torch.Tensor) or examples.dim() != 2:
        raise TypeError(f"examples must be a (d_ff, k) tensor, got {type(examples).__name__}")
    codes = {label: i for i, label in enumerate(dict.fromkeys(labels))}
    coded = torch.tensor([codes[label] for label in labels])
    if int(examples.max()) >= len(coded):
        raise ValueError(f"examples refers to row {int(examples.max())}, but labels has only {len(coded)} entries")
    picked = coded[examples]                                   # (d_ff, k)
    counts = torch.nn.functional.one_hot(picked, len(codes)).sum(dim=1)  # (d_ff, n_labels)
    return counts.max(dim=1).values.float() / examples.shape[1]


def peak_coefficients(coefficients: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Each example's peak: ``(N, d_ff)``, the largest coefficient over the ``valid`` positions of its row.

    This is the number ``top_triggers`` ranks examples by. Invalid positions are masked with ``-inf``
    (not 0), so a row whose valid coefficients are all negative keeps its (negative) peak.
    """
    coefficients = _mask_invalid(_check_coefficients(coefficients), valid)
    return coefficients.max(dim=1).values


def group_profile(peaks: torch.Tensor, groups: Sequence[object]) -> tuple[torch.Tensor, list[object]]:
    """Mean peak per group: ``(d_ff, G)`` from ``peaks`` ``(N, d_ff)`` and one label per example.

    Returns the profile and the group labels in order of first appearance (column g is ``names[g]``).
    E.g. ``groups`` = each fact's relation gives a neuron's activation per relation.
    """
    validate.float_tensor("peaks", peaks, min_dims=2)
    if peaks.dim() != 2 or len(groups) != peaks.shape[0]:
        raise ValueError(f"peaks must be (N, d_ff) with one label per row in groups, got shape "
                         f"{tuple(peaks.shape)} and {len(groups)} labels")
    names = list(dict.fromkeys(groups))
    code = torch.tensor([names.index(g) for g in groups])
    one_hot = torch.nn.functional.one_hot(code, len(names)).to(peaks.dtype)     # (N, G)
    return (peaks.T @ one_hot) / one_hot.sum(0), names


# ---------------------------------------------------------------------------------------------
# Values: what a neuron writes
# ---------------------------------------------------------------------------------------------


def _check_neurons(neurons: int | Sequence[int] | torch.Tensor | None, d_ff: int) -> torch.Tensor:
    if neurons is None:
        return torch.arange(d_ff)
    if isinstance(neurons, int):
        validate.int_in_range("neuron", neurons, 0, d_ff - 1)
        return torch.tensor([neurons])
    index = torch.as_tensor(neurons, dtype=torch.long).reshape(-1)
    if index.numel() and (index.min() < 0 or index.max() >= d_ff):
        bad = int(index[(index < 0) | (index >= d_ff)][0])
        raise ValueError(f"neurons must be in [0, {d_ff - 1}] (d_ff={d_ff}), got {bad}")
    return index


@torch.no_grad()
def project_to_vocab(model: nn.Module, vectors: torch.Tensor, *, biases: bool = True) -> torch.Tensor:
    """Read residual-stream vectors ``(..., d_model)`` as logits ``(..., vocab)``.

    ``biases=True``: ``unembed(final_norm(v))``, the model's own read-out applied to ``v`` alone.
    ``biases=False``: only the part that depends on ``v``, ``W_U (γ ⊙ (v − mean(v)) / σ(v))``: the final
    norm's shift β and the unembedding's bias (if any) are left out, because they add the same vector to
    every read-out, whatever ``v`` is.
    """
    memories = find_ffns(model)
    if biases:
        return memories.unembed(memories.final_norm(vectors))
    norm, unembed = memories.final_norm, memories.unembed
    if not isinstance(norm, nn.LayerNorm) or not hasattr(unembed, "weight"):
        raise TypeError(f"biases=False needs an nn.LayerNorm final norm and an unembedding with a weight, got "
                        f"{type(norm).__name__} and {type(unembed).__name__}")
    normed = torch.nn.functional.layer_norm(vectors, norm.normalized_shape, norm.weight, None, norm.eps)
    return normed @ unembed.weight.T


@torch.no_grad()
def value_logits(model: nn.Module, layer: int, neurons: int | Sequence[int] | None = None, *,
                 biases: bool = True) -> torch.Tensor:
    """What value vectors say about the next token: ``(n, vocab)`` logits, ``project_to_vocab(v_i)``.

    ``neurons``: one index, a list, or ``None`` for all ``d_ff`` neurons of ``layer``.
    ``biases``: see ``project_to_vocab`` (``True``: ``lm_head(ln_f(v_i))``; ``False``: without ln_f's β
    and lm_head's bias, which are the same for every neuron).
    """
    ffn = find_ffns(model).layer(layer)
    index = _check_neurons(neurons, ffn.d_ff)
    return project_to_vocab(model, ffn.values[index].detach(), biases=biases)


@dataclass
class Agreement:
    """Geva et al.'s agreement between a layer's values and its keys' top triggers.

    Attributes:
        rate: share of neurons whose value's top token is the next token after their top trigger prefix.
        median_rank: median rank (1 = top) of that next token in the values' logits.
        chance: the rate a random top token would reach, ``1 / vocab``.
        ranks: ``(d_ff,)`` the rank for every neuron.
        next_tokens: ``(d_ff,)`` the next token after each neuron's top trigger.
        top_tokens: ``(d_ff,)`` each value's top token.
    """

    rate: float
    median_rank: float
    chance: float
    ranks: torch.Tensor
    next_tokens: torch.Tensor
    top_tokens: torch.Tensor


def agreement(model: nn.Module, ids: torch.Tensor, layer: int, valid: torch.Tensor | None = None,
              coefficients: torch.Tensor | None = None, *, biases: bool = True) -> Agreement:
    """Agreement rate and median rank for one layer (Geva et al. 2021, section 4).

    For each neuron: its top trigger prefix ``ids[n, :t+1]`` (``top_triggers`` with k=1), the
    token that follows it, ``ids[n, t+1]``, and the rank of that token in ``value_logits``.

    Args:
        ids: ``(N, T)`` the data set. valid: ``(N, T)`` prefix ends that have a next token
            (default ``prefix_mask(ids)``). coefficients: precomputed ``(N, T, d_ff)`` for ``layer``.
        biases: how values are read, see ``project_to_vocab``.
    """
    ids = _ids(ids)
    find_ffns(model).layer(layer)
    if valid is None:
        valid = prefix_mask(ids)
    if coefficients is None:
        coefficients = memory_coefficients(model, ids, layer)
    trig = top_triggers(coefficients, 1, valid)
    examples, positions = trig.examples[:, 0], trig.positions[:, 0]
    if int(positions.max()) + 1 >= ids.shape[1]:
        raise ValueError("a top trigger ends at the last position, which has no next token: pass valid")
    next_tokens = ids[examples, positions + 1]
    logits = value_logits(model, layer, biases=biases)
    target = logits.gather(1, next_tokens.unsqueeze(1).to(logits.device))
    ranks = (logits > target).sum(dim=1).cpu() + 1
    return Agreement(rate=(ranks == 1).float().mean().item(), median_rank=ranks.float().median().item(),
                     chance=1.0 / logits.shape[1], ranks=ranks, next_tokens=next_tokens,
                     top_tokens=logits.argmax(dim=1).cpu())


# ---------------------------------------------------------------------------------------------
# Sub-updates and knock-outs
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


@contextmanager
def knock_out(model: nn.Module, layer: int, neurons: int | Sequence[int] | torch.Tensor) -> Iterator[None]:
    """Inside the ``with`` block, chosen neurons of ``layer`` have memory coefficient 0 at every position.

    ``neurons``: an index or a list/1-D tensor of indices (silenced in every row), or a bool
    tensor ``(N, d_ff)`` choosing different neurons for each of the N rows of the next forward
    pass. Silenced neurons write nothing. Nest two blocks to silence neurons in two layers.
    """
    ffn = find_ffns(model).layer(layer)
    if isinstance(neurons, torch.Tensor) and neurons.dtype == torch.bool:
        if neurons.dim() != 2 or neurons.shape[1] != ffn.d_ff:
            raise ValueError(f"a bool neurons mask must have shape (N, d_ff={ffn.d_ff}), got {tuple(neurons.shape)}")
        keep = (~neurons).float().unsqueeze(1)                     # (N, 1, d_ff)
    else:
        keep = torch.ones(ffn.d_ff)
        keep[_check_neurons(neurons, ffn.d_ff)] = 0.0

    def pre_hook(module, inputs):
        m = inputs[0]
        if keep.dim() == 3 and (m.dim() != 3 or m.shape[0] != keep.shape[0]):
            raise ValueError(f"the neurons mask has {keep.shape[0]} rows but the batch has shape {tuple(m.shape)}")
        return (m * keep.to(m.device), *inputs[1:])

    handle = ffn.value_module.register_forward_pre_hook(pre_hook)
    try:
        yield
    finally:
        handle.remove()


class NeuronExplorer:
    """Everything notebook 03's neuron explorer shows, computed once so that a redraw is instant.

    For any layer and neuron: its top trigger prefixes, its mean peak activation per group of examples
    (e.g. per relation), the tokens its value promotes and suppresses most, and what switching it off does
    to the answers of the facts it fires on most.

    Args:
        model: a model ``find_ffns`` understands. ids: ``(N, T)`` examples. valid: ``(N, T)`` bool prefix ends.
        answer_pos, answer_id: ``(N,)`` where each example's answer is predicted, and the answer.
        tokens: the vocabulary's words (``tokens[i]`` is token ``i``). groups: one label per example.
        row_labels: a short text per example (for the knock-out panel).
        k: how many triggers to list. n_tokens: promoted and suppressed tokens shown. n_facts: facts knocked out.
        biases: how values are read (see ``project_to_vocab``).
    """

    def __init__(self, model: nn.Module, ids: torch.Tensor, valid: torch.Tensor, answer_pos: torch.Tensor,
                 answer_id: torch.Tensor, tokens: Sequence[str], groups: Sequence[object],
                 row_labels: Sequence[str], *, k: int = 8, n_tokens: int = 6, n_facts: int = 8,
                 biases: bool = False) -> None:
        self.model, self.memories = model, find_ffns(model)
        self.ids, self.valid = _ids(ids), valid
        self.answer_pos, self.answer_id = answer_pos, answer_id
        self.tokens, self.row_labels = list(tokens), list(row_labels)
        self.n_tokens, self.n_facts, self.biases = n_tokens, n_facts, biases
        trace = collect(model, ids)
        rows = torch.arange(ids.shape[0])
        self.triggers = [top_triggers(c, k, valid) for c in trace.coefficients]          # (d_ff, k) each
        self.profiles, self.group_names = [], []
        for c in trace.coefficients:
            profile, names = group_profile(peak_coefficients(c, valid), groups)
            self.profiles.append(profile)                                                 # (d_ff, G)
            self.group_names = names
        self.at_answer = [c[rows, answer_pos] for c in trace.coefficients]                # (N, d_ff) each
        self.values = [value_logits(model, layer, biases=biases) for layer in range(self.memories.n_layers)]
        self.p_before = answer_probability(model, ids, answer_pos, answer_id)              # (N,)
        # every neuron's knock-out, precomputed: one batched forward pass per layer, each row of the batch
        # silencing one neuron at one of the n_facts facts it fires on most (so a redraw runs no model)
        self.ko_rows, self.ko_after = [], []
        for layer, at in enumerate(self.at_answer):
            d_ff = at.shape[1]
            top_rows = at.topk(min(n_facts, at.shape[0]), dim=0).indices.T                  # (d_ff, n_facts)
            flat = top_rows.reshape(-1)                                                      # (d_ff·n_facts,)
            mask = torch.zeros(flat.shape[0], d_ff, dtype=torch.bool)
            mask[torch.arange(flat.shape[0]), torch.arange(d_ff).repeat_interleave(top_rows.shape[1])] = True
            with knock_out(model, layer, mask):
                after = answer_probability(model, self.ids[flat], answer_pos[flat], answer_id[flat])
            self.ko_rows.append(top_rows)
            self.ko_after.append(after.view(d_ff, -1))                                      # (d_ff, n_facts)

    @property
    def n_layers(self) -> int:
        return self.memories.n_layers

    def knock_out_effect(self, layer: int, neuron: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ``n_facts`` examples where ``neuron`` fires most at the answer position, and P(answer) for
        each before and after switching that one neuron off: ``(rows, p_before, p_after)``."""
        ffn = self.memories.layer(layer)
        validate.int_in_range("neuron", neuron, 0, ffn.d_ff - 1)
        rows = self.ko_rows[layer][neuron]
        return rows, self.p_before[rows], self.ko_after[layer][neuron]

    def figure(self, layer: int, neuron: int):
        """A 2×2 matplotlib figure about one neuron (triggers, groups, value, knock-out)."""
        import matplotlib.pyplot as plt

        ffn = self.memories.layer(layer)
        validate.int_in_range("neuron", neuron, 0, ffn.d_ff - 1)
        fig, axes = plt.subplots(2, 2, figsize=(12.5, 7.4), gridspec_kw={"width_ratios": [1.25, 1]})
        fig.subplots_adjust(left=0.1, right=0.98, top=0.9, bottom=0.08, wspace=0.5, hspace=0.38)
        (text_ax, group_ax), (value_ax, ko_ax) = axes
        tr = self.triggers[layer]
        text_ax.axis("off")
        lines = []
        for e, p, v in zip(tr.examples[neuron].tolist(), tr.positions[neuron].tolist(),
                           tr.coefficients[neuron].tolist()):
            words = [w for w in (self.tokens[i] for i in self.ids[e, :p + 1].tolist()) if w not in ("<bos>", "<pad>")]
            prefix = " ".join(words)
            prefix = prefix if len(prefix) <= 46 else "…" + prefix[-45:]
            lines.append(f"m = {v:5.2f}  {prefix}  → {self.tokens[int(self.ids[e, p + 1])]}")
        text_ax.text(0, 1, "\n".join(lines), va="top", ha="left", family="monospace", fontsize=9,
                     transform=text_ax.transAxes)
        text_ax.set_title(f"Top {len(lines)} trigger prefixes → next token", loc="left")

        profile = self.profiles[layer][neuron]
        names = [str(n) for n in self.group_names]
        group_ax.bar(names, profile.tolist(), color=["#0072B2" if v >= 0 else "#D55E00" for v in profile.tolist()])
        group_ax.axhline(0, color="0.4", lw=0.8)
        group_ax.set(ylabel="mean peak m", title="Mean peak activation per group")

        logits = self.values[layer][neuron]
        top, bottom = logits.topk(self.n_tokens), logits.topk(self.n_tokens, largest=False)
        order = torch.cat([top.indices, bottom.indices.flip(0)])
        heights = logits[order]
        ys = list(range(len(order)))
        value_ax.barh(ys, heights.tolist(), color=["#009E73" if v > 0 else "#D55E00" for v in heights.tolist()])
        value_ax.set_yticks(ys, [self.tokens[i] for i in order.tolist()], fontsize=9)
        value_ax.invert_yaxis()
        value_ax.axvline(0, color="0.4", lw=0.8)
        read = "lm_head(ln_f(v))" if self.biases else "W_U(γ⊙norm(v)), no biases"
        value_ax.set(xlabel=f"logit, {read}", title="Its value: most promoted / suppressed")

        rows, before, after = self.knock_out_effect(layer, neuron)
        ys = torch.arange(len(rows))
        ko_ax.barh(ys - 0.2, before.tolist(), 0.4, color="0.7", label="intact")
        ko_ax.barh(ys + 0.2, after.tolist(), 0.4, color="#CC79A7", label="this neuron off")
        labels = [self.row_labels[r] if len(self.row_labels[r]) <= 24 else self.row_labels[r][:23] + "…"
                  for r in rows.tolist()]
        ko_ax.set_yticks(ys.tolist(), labels, fontsize=8)
        ko_ax.invert_yaxis()
        ko_ax.set(xlim=(0, 1.02), xlabel="P(right answer): grey intact, pink this neuron off",
                  title=f"Switched off: the {len(rows)} facts it fires on most")
        fig.suptitle(f"Layer {layer}, neuron {neuron}", fontsize=13, x=0.01, ha="left")
        return fig


def token_positions(ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``(N,)`` the first position of ``tokens[n]`` in row ``ids[n]`` (e.g. where each fact's subject sits)."""
    ids = _ids(ids)
    if not isinstance(tokens, torch.Tensor) or tokens.shape != (ids.shape[0],):
        raise ValueError(f"tokens must be a tensor of shape ({ids.shape[0]},), one token id per row")
    hits = ids == tokens.unsqueeze(1)
    if not hits.any(dim=1).all():
        row = int((~hits.any(dim=1)).nonzero()[0])
        raise ValueError(f"row {row} of ids does not contain token {int(tokens[row])}")
    return hits.float().argmax(dim=1)


@torch.no_grad()
def answer_probability(model: nn.Module, ids: torch.Tensor, answer_pos: torch.Tensor,
                       answer_id: torch.Tensor) -> torch.Tensor:
    """``(N,)`` the probability the model gives ``answer_id[n]`` after ``ids[n, :answer_pos[n] + 1]``."""
    ids = _ids(ids)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    logits = logits_of(model, ids.to(device))
    model.train(was_training)
    rows = torch.arange(ids.shape[0], device=device)
    probs = logits[rows, answer_pos.to(device)].softmax(-1)
    return probs[rows, answer_id.to(device)].cpu()


# ---------------------------------------------------------------------------------------------
# The course's fact model: trained once, shipped, loaded everywhere the same
# ---------------------------------------------------------------------------------------------

DATA_DIR = Path(__file__).resolve().parent / "data"

#: how notebook 03's model is trained; ``python -m helpers.memory --make-checkpoint`` uses exactly this
FACT_MODEL = {"d_model": 48, "n_layers": 2, "n_heads": 4, "steps": 150, "lr": 1.5e-2}


def fact_model_path(seed: int = 0) -> Path:
    """Where the shipped checkpoint for ``seed`` lives: ``helpers/data/fact_model.pt`` (seed 0), else
    ``helpers/data/fact_model_seed<seed>.pt``."""
    validate.non_negative_int("seed", seed)
    return DATA_DIR / ("fact_model.pt" if seed == 0 else f"fact_model_seed{seed}.pt")


def fact_model_config(data) -> GPTConfig:
    """The ``GPTConfig`` of notebook 03's model for a ``helpers.facts.FactDataset`` ``data``."""
    return GPTConfig(vocab_size=len(data.vocab), d_model=FACT_MODEL["d_model"], n_layers=FACT_MODEL["n_layers"],
                     n_heads=FACT_MODEL["n_heads"], max_len=data.ids.shape[1])


def untrained_fact_model(data, seed: int = 0) -> TinyGPT:
    """Notebook 03's model as initialised by ``torch.manual_seed(seed)``, before any training (eval mode).

    Initialisation is not chaotic: these weights are the same on every machine and torch version.
    """
    validate.non_negative_int("seed", seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyGPT(fact_model_config(data))
    return model.eval()


def train_fact_model(data, seed: int = 0, *, progress: bool = True) -> tuple[TinyGPT, list[float]]:
    """Train notebook 03's model on every next token of ``data`` (full batch, AdamW, ``FACT_MODEL``).

    Returns the model (eval mode) and the loss of every step. Deterministic on one machine; on another CPU
    or torch version the weights differ by a few per cent (training is chaotic), which is why the notebook
    analyses the shipped checkpoint (``load_fact_model``).
    """
    model = untrained_fact_model(data, seed).train()
    losses = train_lm(model, data.ids, data.targets, steps=FACT_MODEL["steps"], lr=FACT_MODEL["lr"], seed=seed,
                      progress=progress, desc=f"learning {len(data)} facts")
    return model.eval(), losses


def save_fact_model(model: TinyGPT, losses: Sequence[float], data, path: str | Path, seed: int) -> Path:
    """Write ``model``'s float32 weights, its loss history and what it was trained on to ``path``."""
    import platform

    path = Path(path)
    checkpoint = {
        "state_dict": {k: v.detach().float().cpu().clone() for k, v in model.state_dict().items()},
        "losses": [float(x) for x in losses],
        "vocab": list(data.vocab.tokens),
        "seed": int(seed),
        "recipe": dict(FACT_MODEL),
        "made_with": f"torch {torch.__version__}, {platform.machine()}, "
                     f"CPU capability {torch.backends.cpu.get_cpu_capability()}",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, path)
    return path


def load_fact_model(data, seed: int = 0, path: str | Path | None = None) -> tuple[TinyGPT, list[float]]:
    """Load the shipped model trained with ``seed`` (``fact_model_path(seed)``, or ``path``).

    Returns the model (eval mode, on the CPU) and its training loss history. Raises ``ValueError`` when
    the checkpoint was made for another vocabulary or recipe than ``data`` and ``FACT_MODEL``.
    """
    path = fact_model_path(seed) if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path={str(path)!r}: no checkpoint there; make it with "
                                f"python -m helpers.memory --make-checkpoint --seed {seed}")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if checkpoint["vocab"] != list(data.vocab.tokens):
        raise ValueError(f"the checkpoint {path.name} was trained on another vocabulary "
                         f"({len(checkpoint['vocab'])} tokens) than data ({len(data.vocab)} tokens)")
    if checkpoint["recipe"] != FACT_MODEL:
        raise ValueError(f"the checkpoint {path.name} was made with {checkpoint['recipe']}, not {FACT_MODEL}")
    model = TinyGPT(fact_model_config(data))
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval(), list(checkpoint["losses"])


def _make_checkpoints(seeds: Sequence[int]) -> None:
    """Train and write the shipped checkpoints; print what each one knows."""
    from helpers.facts import load_facts, make_dataset
    from helpers.transformer import answer_accuracy

    torch.set_num_threads(1)        # as in the notebooks (helpers.env.setup)
    data = make_dataset(load_facts())
    for seed in seeds:
        model, losses = train_fact_model(data, seed)
        path = save_fact_model(model, losses, data, fact_model_path(seed), seed)
        accuracy = answer_accuracy(model, data.ids, data.answer_pos, data.answer_id)
        print(f"seed {seed}: loss {losses[0]:.3f} -> {losses[-1]:.3f}, answer accuracy {accuracy:.2%}; "
              f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")


# ---------------------------------------------------------------------------------------------
# Optional: a real model
# ---------------------------------------------------------------------------------------------


def load_gpt2(name: str = "gpt2", *, download: bool | None = None):
    """Load a pretrained Hugging Face GPT-2 and its tokenizer, or say why not.

    Returns ``(model, tokenizer, None)`` on success and ``(None, None, reason)`` when the
    ``transformers`` package or the weights are unavailable. ``download=None`` downloads
    only in Google Colab or when the environment variable ``FFN_COURSE_GPT2=1`` is set;
    elsewhere only weights already in the local Hugging Face cache are used, so that a
    machine without internet (or CI) skips quickly instead of waiting for a download.
    """
    import importlib.util
    import os
    import sys
    import warnings

    if importlib.util.find_spec("transformers") is None:
        return None, None, "the `transformers` package is not installed (pip install transformers)"
    if download is None:
        download = "google.colab" in sys.modules or os.environ.get("FFN_COURSE_GPT2") == "1"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import transformers

            transformers.logging.set_verbosity_error()
            tokenizer = transformers.AutoTokenizer.from_pretrained(name, local_files_only=not download)
            model = transformers.GPT2LMHeadModel.from_pretrained(name, local_files_only=not download)
    except Exception as err:  # no cache, no network, or a broken install: all mean "skip"
        where = ("downloading them failed" if download else
                 "they are not in the local cache (set FFN_COURSE_GPT2=1 to download ~500 MB)")
        return None, None, f"GPT-2's weights ({name!r}) are unavailable: {where} [{type(err).__name__}]"
    return model.eval(), tokenizer, None


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Train and write notebook 03's shipped fact model(s).")
    parser.add_argument("--make-checkpoint", action="store_true", required=True,
                        help="train with FACT_MODEL and write helpers/data/fact_model*.pt")
    parser.add_argument("--seed", type=int, nargs="+", default=[0, 1],
                        help="training seeds (default: 0 1; seed 0 is the model the notebook analyses)")
    _make_checkpoints(parser.parse_args().seed)
