r"""Take an FFN's memory apart and change it: sub-updates, knock-outs, activation patching.

Reading a key or a value (``helpers.memory``) says what a neuron *could* do. These tools measure what it
*does* in a forward pass:

* ``sub_updates``: the FFN output at one position split into its terms ``m_i v_i`` (Geva et al. 2022),
  ``direct_logit_shifts``: what each term does to the next-token logits when it enters the final LayerNorm
  directly (exact for the last block, with the norm's scale held at its actual value), and
  ``answer_and_rival_shifts``: that shift for each prompt's answer and for its rivals (promotion, elimination)
  against a reference word (``shifts_by_reference``: several references from one pass; ``seed_means`` and
  ``promotion_by_group``: their means over seeds, and the verdict's family split by relation, printed by
  ``promotion_grid``); ``margin_split``: how much of each answer's lead over its rivals a layer's attention and
  its FFN write directly;
* ``knock_out``: chosen memory coefficients set to 0 (or scaled down by a share), at every position or at one
  position per row; ``knockout_sets``: the neuron sets a knock-out is compared across (a fact's own most active
  neurons, another fact's, the fact's own matched *exactly* to the activity the other set silences or to the
  size of the vector it removes, random), with ``same_group_donors``, ``removed_activity``, ``removed_write``
  and ``knockout_drops``; ``random_direction_drops``: the control that removes a random vector as long instead;
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
from helpers.stats import PairedDifference, holm, paired_difference

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


@torch.no_grad()
def margin_split(model: nn.Module, layer: int, ids: torch.Tensor, answer_pos: torch.Tensor, answer_id: torch.Tensor,
                 candidates: torch.Tensor) -> dict[str, torch.Tensor]:
    """Who writes each row's lead at ``answer_pos``: the answer's logit minus the mean of its rivals' (the other
    ``candidates``, e.g. the other capitals), ``(N,)`` per entry. ``"model"``: the model's own logits;
    ``"attention"``: the direct path of ``layer``'s attention output; ``"ffn"``: the direct path of ``layer``'s
    ``Σ_i m_i v_i`` (``b2`` left out), both through ``direct_logit_shifts`` with the final norm's scale held at
    its actual value (exact for the last block). Needs a model with ``blocks[layer].attn`` (``TinyGPT``)."""
    memories = find_ffns(model)
    ids = _ids(ids)
    net = memories.model
    if not hasattr(net, "blocks") or not hasattr(net.blocks[layer], "attn"):
        raise TypeError(f"margin_split needs a model with blocks[{layer}].attn (a TinyGPT), got {type(net).__name__}")
    captured = {}
    handle = net.blocks[layer].attn.register_forward_hook(lambda module, inputs, output: captured.update(a=output))
    try:
        was_training = net.training
        net.eval()
        logits = logits_of(net, ids)
        net.train(was_training)
    finally:
        handle.remove()
    rows = torch.arange(ids.shape[0])
    at = lambda x: x[rows, answer_pos]                                            # (N, ...) at each row's answer
    ffn = memories.layer(layer)
    written = collect(net, ids).outputs[layer]
    if ffn.value_bias is not None:
        written = written - ffn.value_bias.detach()
    residual = at(final_residual(net, ids))
    rival = candidates[None, :] != answer_id[:, None]                             # (N, R)

    def lead(scores):                                                             # (N, vocab) -> (N,)
        chosen = scores[:, candidates]
        return scores[rows, answer_id] - (chosen * rival).sum(1) / rival.sum(1)

    return {"model": lead(at(logits.detach())),
            "attention": lead(direct_logit_shifts(net, at(captured["a"].detach()), residual)),
            "ffn": lead(direct_logit_shifts(net, at(written), residual))}


@torch.no_grad()
def answer_and_rival_shifts(model: nn.Module, layer: int, ids: torch.Tensor, answer_pos: torch.Tensor,
                            answer_id: torch.Tensor, groups: torch.Tensor,
                            reference: str = "vocabulary") -> tuple[torch.Tensor, torch.Tensor]:
    """What ``layer``'s ``Σ_i m_i v_i`` (``b2`` left out) does, by its direct path, to each row's answer and to
    its rivals (the other answers of rows in the same group, e.g. the other capitals), at ``answer_pos``.

    Returns two ``(N,)`` tensors of ``direct_logit_shifts`` measured against a reference word: the answer's
    shift, and the rivals' mean shift. Positive: promoted above the reference; negative: pushed below it.
    A softmax ignores a shift common to every logit, so "promotion" and "elimination" exist only against a
    reference. ``reference``: ``"vocabulary"`` the mean shift of every word; ``"outside"`` the mean shift of
    the words that are neither the answer nor a rival (outside the contest, so pushing the rivals down does
    not move it); ``"median"`` the median word's shift. Exact for the last block; for an earlier one only
    its direct path. ``shifts_by_reference`` gives several references from one pass.
    """
    return shifts_by_reference(model, layer, ids, answer_pos, answer_id, groups, (reference,))[reference]


@torch.no_grad()
def shifts_by_reference(model: nn.Module, layer: int, ids: torch.Tensor, answer_pos: torch.Tensor,
                        answer_id: torch.Tensor, groups: torch.Tensor,
                        references: Sequence[str] = ("outside", "vocabulary", "median"),
                        ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{reference: (answer, rivals)}``, ``answer_and_rival_shifts`` for each reference word, one pass."""
    for reference in references:
        if reference not in ("vocabulary", "outside", "median"):
            raise ValueError(f"reference must be 'vocabulary', 'outside' or 'median', got {reference!r}")
    ffn = find_ffns(model).layer(layer)
    rows = torch.arange(ids.shape[0])
    trace = collect(model, ids)
    written = trace.outputs[layer][rows, answer_pos]
    if ffn.value_bias is not None:
        written = written - ffn.value_bias.detach()
    raw = direct_logit_shifts(model, written, final_residual(model, ids)[rows, answer_pos])          # (N, vocab)
    out = {}
    for reference in references:
        if reference == "median":
            shifts = raw - raw.median(dim=1, keepdim=True).values
        else:
            shifts = raw - raw.mean(dim=1, keepdim=True)
        rivals = torch.empty(ids.shape[0])
        for g in groups.unique().tolist():
            mine = torch.nonzero(groups == g)[:, 0]
            candidates = answer_id[mine].unique()                                   # the group's answers
            if reference == "outside":
                outside = torch.ones(raw.shape[1], dtype=torch.bool)
                outside[candidates] = False
                shifts[mine] = raw[mine] - raw[mine][:, outside].mean(dim=1, keepdim=True)
            is_own = candidates[None, :] == answer_id[mine, None]                   # (n, C)
            rivals[mine] = (shifts[mine][:, candidates] * ~is_own).sum(1) / (~is_own).sum(1).clamp_min(1)
        out[reference] = (shifts[rows, answer_id], rivals)
    return out


def seed_means(by_seed: Sequence[dict[str, tuple[torch.Tensor, torch.Tensor]]], reference: str = "outside",
               rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(answer, rivals)``, two ``(n_seeds,)`` tensors: the mean over ``rows`` (a bool mask ``(N,)``; ``None``:
    every row) of each seed's answer and rival shifts against ``reference``. ``by_seed``: one
    ``shifts_by_reference`` result per seed."""
    if rows is None:
        rows = torch.ones_like(by_seed[0][reference][0], dtype=torch.bool)
    answer = torch.stack([shifts[reference][0][rows].mean() for shifts in by_seed])
    rivals = torch.stack([shifts[reference][1][rows].mean() for shifts in by_seed])
    return answer, rivals


def promotion_by_group(by_seed: Sequence[dict[str, tuple[torch.Tensor, torch.Tensor]]], groups: torch.Tensor,
                       names: Sequence[str], reference: str = "outside",
                       with_gap: bool = True) -> dict[str, PairedDifference]:
    """Promotion and elimination split by group (e.g. relation), as a family for ``helpers.stats.holm``.

    A mean over every row is the groups' means weighted by their sizes, so one group can carry it. For group
    ``g`` (rows with ``groups == g``, named ``names[g]``), three paired differences over the seeds of
    ``by_seed`` (one ``shifts_by_reference`` result per seed): ``"<name>: answer"`` and ``"<name>: rivals"``
    (their mean shift against ``reference``, each against 0) and ``"<name>: |answer| − |rivals|"`` (positive:
    the answer moves more than its rivals, in either direction: a pushed-down answer counts too; left out
    when ``with_gap`` is False).
    """
    if groups.shape != by_seed[0][reference][0].shape:
        raise ValueError(f"groups must have one entry per row, shape {tuple(by_seed[0][reference][0].shape)}, "
                         f"got {tuple(groups.shape)}")
    if groups.min() < 0 or groups.max() >= len(names):
        raise ValueError(f"groups must hold indices into names, 0..{len(names) - 1}, got {groups.min()}..{groups.max()}")
    family = {}
    for g, name in enumerate(names):
        answer, rivals = seed_means(by_seed, reference, groups == g)
        zero = torch.zeros_like(answer)
        family |= {f"{name}: answer": paired_difference(answer, zero),
                   f"{name}: rivals": paired_difference(rivals, zero)}
        if with_gap:
            family[f"{name}: |answer| − |rivals|"] = paired_difference(answer.abs(), rivals.abs())
    return family


def promotion_grid(family: dict[str, PairedDifference], names: Sequence[str], unit: str = " logits") -> str:
    """``promotion_by_group(..., with_gap=False)``'s family judged by ``helpers.stats.holm``, printed as a grid:
    one line per group, an answer and a rivals cell each (mean shift, seeds up of n, paired t, ▲/▼ resolved,
    · not), then where the step-down stopped (every later rank is unresolved whatever its t)."""
    verdicts = {v.name: v for v in holm(family)}
    if set(verdicts) != {f"{n}: {part}" for n in names for part in ("answer", "rivals")}:
        raise ValueError(f"family must hold '<name>: answer' and '<name>: rivals' for each of names {list(names)}")
    mark = {"higher": "▲", "lower": "▼", "not resolved": "·"}
    width = max(len(n) for n in names)

    def cell(v) -> str:
        c = v.comparison
        return f"{c.mean:+6.2f}{unit} {mark[v.verdict]} (up in {c.higher:>2}/{c.n}, t {c.t:+5.2f})"

    cells = {n: [cell(verdicts[f"{n}: {part}"]) for part in ("answer", "rivals")] for n in names}
    cw = max(len(c) for row in cells.values() for c in row)
    lines = [f"Holm's step-down over {len(verdicts)} comparisons (5 % two-sided): "
             f"{sum(v.resolved for v in verdicts.values())} resolved (▲ ▼), · not resolved",
             f"  {'':{width}}  {'answer':{cw}}  rivals"]
    lines += [f"  {n:{width}}  {a:{cw}}  {r}" for n, (a, r) in cells.items()]
    failed = sorted((v for v in verdicts.values() if not v.resolved), key=lambda v: v.rank)
    if failed:
        v = failed[0]
        lines.append(f"  the step-down stops at rank {v.rank} of {len(verdicts)} ({v.name}: |t| "
                     f"{abs(v.comparison.t):.2f} below its threshold {v.threshold:.2f})")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Knock-outs
# ---------------------------------------------------------------------------------------------


@contextmanager
def knock_out(model: nn.Module, layer: int, neurons: int | Sequence[int] | torch.Tensor,
              positions: torch.Tensor | None = None, toward: torch.Tensor | None = None) -> Iterator[None]:
    """Inside the ``with`` block, chosen neurons of ``layer`` have memory coefficient 0 (they write nothing).

    ``neurons``: an index or a list/1-D tensor of indices (silenced in every row); a bool tensor ``(N, d_ff)``
    choosing different neurons for each of the N rows of the next forward pass; or a float tensor
    ``(N, d_ff)`` in ``[0, 1]``, the *share* of each coefficient removed (``m ← (1 − share)·m``; 1 silences the
    neuron, 0 leaves it, 0.3 removes 30 % of it), as ``knockout_sets`` returns.
    ``positions``: ``None`` acts at every position; a long tensor ``(N,)`` only at position ``positions[n]`` of
    row ``n`` (a knock-out where one fact is read, e.g. at its subject).
    Nest two blocks to silence neurons in two layers.
    ``toward``: ``None`` (zero ablation) or a ``(d_ff,)`` tensor, e.g. each neuron's mean coefficient over the data
    (*mean ablation*): a removed share moves the coefficient toward it instead, ``m ← m − share·(m − toward)``.
    """
    ffn = find_ffns(model).layer(layer)
    if isinstance(neurons, torch.Tensor) and (neurons.dtype == torch.bool or neurons.is_floating_point()):
        if neurons.dim() != 2 or neurons.shape[1] != ffn.d_ff:
            kind = "bool" if neurons.dtype == torch.bool else "float"
            raise ValueError(f"a {kind} neurons mask must have shape (N, d_ff={ffn.d_ff}), got {tuple(neurons.shape)}")
        if neurons.is_floating_point() and not ((neurons >= 0) & (neurons <= 1)).all():
            raise ValueError("a float neurons mask holds the share of each coefficient removed, in [0, 1]")
        removed = neurons.float()
    else:
        removed = torch.zeros(1, ffn.d_ff)
        removed[0, _check_neurons(neurons, ffn.d_ff)] = 1.0
    if toward is not None and (not isinstance(toward, torch.Tensor) or tuple(toward.shape) != (ffn.d_ff,)):
        raise ValueError(f"toward must be a ({ffn.d_ff},) tensor (one value per neuron) or None, got "
                         f"{tuple(toward.shape) if isinstance(toward, torch.Tensor) else type(toward).__name__}")
    if positions is not None:
        if not isinstance(positions, torch.Tensor) or positions.dtype != torch.long or positions.dim() != 1:
            raise TypeError("positions must be a (N,) torch.long tensor, one position per row")
        if removed.shape[0] not in (1, positions.shape[0]):
            raise ValueError(f"the neurons mask has {removed.shape[0]} rows but positions has {positions.shape[0]}")

    def pre_hook(module, inputs):
        m = inputs[0]
        rows = positions.shape[0] if positions is not None else removed.shape[0]
        if m.dim() != 3 or (rows > 1 and m.shape[0] != rows):
            raise ValueError(f"knock_out was set up for {rows} rows, but the batch has shape {tuple(m.shape)}")
        keep = (1 - removed).to(m.dtype).to(m.device).unsqueeze(1).expand(m.shape[0], m.shape[1], -1)  # (N, T, d_ff)
        if positions is not None:
            at = torch.zeros(m.shape[:2], dtype=torch.bool, device=m.device)
            at[torch.arange(m.shape[0], device=m.device), positions.to(m.device)] = True
            keep = torch.where(at.unsqueeze(-1), keep, torch.ones_like(keep))
        if toward is None:
            return (m * keep, *inputs[1:])
        target = toward.to(m.dtype).to(m.device)                       # (d_ff,) broadcast over rows and positions
        return (m * keep + target * (1 - keep), *inputs[1:])

    handle = ffn.value_module.register_forward_pre_hook(pre_hook)
    try:
        yield
    finally:
        handle.remove()


def removed_activity(activity: torch.Tensor, removed: torch.Tensor) -> torch.Tensor:
    """``(N,)`` the activity a knock-out silences: ``Σ_i removed[n, i] · max(activity[n, i], 0)``.

    Only firing counts: a coefficient at GELU's small negative dip (≥ −0.17) is a silent neuron, and silencing
    it removes no firing. ``activity``, ``removed``: ``(N, d_ff)`` (``removed`` as ``knockout_sets`` returns).
    """
    return (activity.clamp_min(0) * removed).sum(dim=1)


def removed_write(activity: torch.Tensor, removed: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``(N,)`` the size of the vector a knock-out takes out of the stream: ``‖Σ_i removed[n, i] · activity[n, i] ·
    v_i‖``, with ``values`` ``(d_ff, d_model)`` (row i is value i, ``W2.T``); ``activity``, ``removed``:
    ``(N, d_ff)``. Two sets that silence the same activity can remove writes of different sizes."""
    validate.float_tensor("values", values, min_dims=2)
    return ((activity * removed).double() @ values.double()).norm(dim=1)


def _size_matched(activity: torch.Tensor, values: torch.Tensor, target: torch.Tensor, first: int = 64,
                  priority: torch.Tensor | None = None) -> torch.Tensor:
    """The own neurons in order of activity, the last in part, until ``‖Σ share_i m_i v_i‖`` reaches ``target``.

    ``priority``: optional ``(N, d_ff)``, another order (highest first; firing neurons must come before silent
    ones), e.g. a random one. Only the ``first`` neurons in that order are summed (enough for almost every
    row); rows that need more are done again with all of them.
    """
    N, d_ff = activity.shape
    K = min(first, d_ff)
    order = (activity.clamp_min(0) if priority is None else priority).sort(dim=1, descending=True).indices
    ranked = activity.clamp_min(0).gather(1, order)                                     # (N, d_ff)
    parts = ranked[:, :K, None] * values[order[:, :K]]                                  # (N, K, d_model): m_i v_i
    after = parts.cumsum(dim=1)                                                         # removed up to neuron j
    reached = (after.norm(dim=-1) >= target[:, None]) & (ranked[:, :K] > 0)
    j = reached.double().argmax(dim=1)
    rows = torch.arange(N)
    b = parts[rows, j]
    a = after[rows, j] - b                                                              # removed before neuron j
    ab, bb, aa = (a * b).sum(-1), (b * b).sum(-1), (a * a).sum(-1)
    # ‖a + s b‖ = target: the root in [0, 1] of bb s² + 2 ab s + aa − target² = 0 (aa < target² ≤ ‖a + b‖²)
    root = (-ab + (ab ** 2 - bb * (aa - target ** 2)).clamp_min(0).sqrt()) / bb.clamp_min(1e-300)
    share = (torch.arange(K)[None, :] < j[:, None]).double()                           # whole before neuron j
    share[rows, j] = root.clamp(0, 1)
    share = torch.where(reached.any(dim=1, keepdim=True), share, 1.0) * (ranked[:, :K] > 0)   # never: all firing
    share = torch.cat([share, torch.zeros(N, d_ff - K, dtype=share.dtype)], dim=1)
    result = torch.zeros_like(share).scatter_(1, order, share)
    more = ~reached.any(dim=1) & (ranked[:, K - 1] > 0) if K < d_ff else torch.zeros(N, dtype=torch.bool)
    if more.any():                                                                       # firing neurons beyond K
        result[more] = _size_matched(activity[more], values, target[more], first=d_ff,
                                     priority=None if priority is None else priority[more])
    return result


def knockout_sets(activity: torch.Tensor, donor: torch.Tensor, n_off: int,
                  generator: torch.Generator | None = None, values: torch.Tensor | None = None,
                  rows: torch.Tensor | None = None, random_size_matched: bool = False) -> dict[str, torch.Tensor]:
    """The neuron sets a knock-out is judged against, one row per fact: ``{name: (N, d_ff) float}``, the share
    of each neuron's coefficient removed (1: off, 0: kept), for ``knock_out``.

    Args:
        activity: ``(N, d_ff)`` each fact's memory coefficients where it is read (one position per fact).
        donor: ``(N,)`` long, for each fact another fact whose top neurons serve as the control
            (e.g. another subject, same relation; ``same_group_donors``).
        n_off: how many neurons the "own", "other" and "random" sets switch off.
        values: optional ``(d_ff, d_model)``, the layer's values (``W2.T``); adds the "size-matched" set.
        rows: optional ``(R,)`` long, the facts to return sets for (default: all N); the sets are the same
            as ``knockout_sets(...)[name][rows]`` (the random draw included), computed only where needed.
        random_size_matched: with ``values``, also ``"random size-matched"``: the firing neurons in a random
            order, the last in part, until the vector removed is as long as the one "other" removes (every
            firing neuron where it never is). It asks whether *any* neurons removing that much write do what
            "other" does (drawn after the other sets, so they are unchanged).
    Returns:
        ``"own"``: the fact's ``n_off`` most active neurons; ``"other"``: the donor's ``n_off`` most active;
        ``"matched"``: the fact's own neurons in order of activity, the last one removed only in part, so that
        the activity removed (``removed_activity``, at this fact) equals what the "other" set removes, exactly;
        ``"random"``: ``n_off`` random neurons; with ``values``, ``"size-matched"``: the own neurons in the same
        order, the last in part, until the vector removed (``removed_write``) is exactly as long as the one the
        "other" set removes (where no prefix of the own ranking reaches it, every firing own neuron).
        The own set removes the most activity by construction, so "own" against "other" alone cannot
        separate fact-specific storage from activity; "matched" against "other" can, and "size-matched"
        against "other" also removes the explanation that the own neurons simply write larger vectors.
    """
    validate.float_tensor("activity", activity, min_dims=2)
    N, d_ff = activity.shape
    validate.int_in_range("n_off", n_off, 1, d_ff)
    if not isinstance(donor, torch.Tensor) or donor.shape != (N,):
        raise ValueError(f"donor must be a long tensor of shape ({N},), one other fact per fact")
    if values is not None and (not isinstance(values, torch.Tensor) or values.dim() != 2 or values.shape[0] != d_ff):
        raise ValueError(f"values must be a (d_ff={d_ff}, d_model) tensor, row i value i (W2.T), got "
                         f"{tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__}")

    def top(scores: torch.Tensor) -> torch.Tensor:
        return torch.zeros(N, d_ff).scatter_(1, scores.topk(n_off, dim=1).indices, 1.0)

    own, other = top(activity), top(activity[donor])
    target = removed_activity(activity.double(), other.double())                    # (N,) what "other" removes
    ranked, order = activity.double().clamp_min(0).sort(dim=1, descending=True)     # own neurons, most active first
    before = ranked.cumsum(dim=1) - ranked                                            # removed by the neurons ahead
    share = ((target[:, None] - before) / ranked.clamp_min(1e-300)).clamp(0, 1)      # (N, d_ff): 1, 1, ..., part, 0
    share = torch.where(ranked > 0, share, torch.zeros_like(share))
    matched = torch.zeros(N, d_ff, dtype=torch.float64).scatter_(1, order, share).float()
    noise = torch.rand(N, d_ff, generator=generator)
    rows = torch.arange(N) if rows is None else rows
    sets = {"own": own[rows], "other": other[rows], "matched": matched[rows], "random": top(noise)[rows]}
    if values is not None:
        size = removed_write(activity[rows], sets["other"], values)                   # (R,) what "other" removes
        sets["size-matched"] = _size_matched(activity[rows].double(), values.double(), size).float()
        if random_size_matched:
            firing = (activity > 0).double()
            priority = (firing * (1 + torch.rand(N, d_ff, generator=generator, dtype=torch.float64)))[rows]
            sets["random size-matched"] = _size_matched(activity[rows].double(), values.double(), size,
                                                        priority=priority).float()
    return sets


def same_group_donors(groups: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """``(N,)`` for each row another row of the same group: the rows of each group shuffled, and each given the
    next one in that order (a group of one row is its own donor). ``groups``: ``(N,)`` integer labels."""
    if not isinstance(groups, torch.Tensor) or groups.dim() != 1 or groups.is_floating_point():
        raise TypeError("groups must be a (N,) integer tensor, one group label per row")
    donor = torch.empty_like(groups, dtype=torch.long)
    for g in groups.unique().tolist():
        rows = torch.nonzero(groups == g)[:, 0]
        rows = rows[torch.randperm(len(rows), generator=generator)]
        donor[rows] = rows.roll(1)
    return donor


@torch.no_grad()
def knockout_drops(model: nn.Module, layer: int, ids: torch.Tensor, answer_pos: torch.Tensor,
                   answer_id: torch.Tensor, positions: torch.Tensor,
                   sets: dict[str, torch.Tensor], toward: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """For each neuron set (``(N, d_ff)`` shares removed, as ``knockout_sets`` returns, rows matching ``ids``),
    removed in ``layer`` at position ``positions[n]`` of row ``n`` (toward ``toward``: see ``knock_out``):
    ``(N,)`` the drop in P(answer)."""
    before = answer_probability(model, ids, answer_pos, answer_id)
    drops = {}
    for name, removed in sets.items():
        with knock_out(model, layer, removed, positions=positions, toward=toward):
            drops[name] = before - answer_probability(model, ids, answer_pos, answer_id)
    return drops


def knockouts_at_sites(model: nn.Module, coefficients: Sequence[torch.Tensor], ids: torch.Tensor,
                       answer_pos: torch.Tensor, answer_id: torch.Tensor, groups: torch.Tensor,
                       sites: dict[str, tuple[int, torch.Tensor]], n_off: int, n_facts: int,
                       seed: int, ablation: str = "zero") -> dict[tuple[str, str], tuple[torch.Tensor, ...] | torch.Tensor]:
    """Every ``knockout_sets`` set (random size-matched included) removed at each site, for ``n_facts`` random facts.

    Args:
        coefficients: per layer ``(N, T, d_ff)``, the model's coefficients on ``ids`` (``collect(...).coefficients``).
        groups: ``(N,)`` integer labels; each fact's donor is another fact of its group (``same_group_donors``).
        sites: name -> ``(layer, positions)``, ``positions`` ``(N,)`` long: where each fact is knocked out.
        seed: seeds the facts drawn, the donors and the random sets, in that order.
        ablation: ``"zero"`` or ``"mean"`` (each chosen coefficient set to its mean over all N facts at the site;
            the same sets, chosen as for zero ablation).
    Returns:
        ``{(site, set name): (drop in P(answer), activity silenced, length of the vector removed, neurons
        touched)}``, each ``(n_facts,)``; and ``(site, "shared")``: ``(n_facts,)``, the share of "own" also in
        "other".
    """
    g = torch.Generator().manual_seed(seed)
    rows, donor = torch.randperm(len(ids), generator=g)[:n_facts], same_group_donors(groups, g)
    out: dict[tuple[str, str], tuple[torch.Tensor, ...] | torch.Tensor] = {}
    for site, (layer, pos) in sites.items():
        activity = coefficients[layer][torch.arange(len(ids)), pos]                       # (N, d_ff) where it is read
        values = find_ffns(model).layer(layer).values.detach()                           # (d_ff, d_model): value i
        sets = knockout_sets(activity, donor, n_off, generator=g, values=values, rows=rows, random_size_matched=True)
        toward = {"zero": None, "mean": activity.mean(0)}[validate.one_of("ablation", ablation, ("zero", "mean"))]
        drops = knockout_drops(model, layer, ids[rows], answer_pos[rows], answer_id[rows], pos[rows], sets, toward)
        for name, share in sets.items():
            out[site, name] = (drops[name], removed_activity(activity[rows], share),
                               removed_write(activity[rows], share, values), (share > 0).sum(1).float())
        out[site, "shared"] = (sets["own"] * sets["other"]).sum(1) / n_off                # own ∩ other, per fact
    return out


@torch.no_grad()
def random_direction_drops(model: nn.Module, outputs: Sequence[torch.Tensor], ids: torch.Tensor,
                           answer_pos: torch.Tensor, answer_id: torch.Tensor, sites: dict[str, tuple[int, torch.Tensor]],
                           lengths: dict[str, torch.Tensor], n_facts: int, seed: int, draws: int = 5) -> dict[str, torch.Tensor]:
    """The control a knock-out needs: is it the neurons' write that matters, or any vector that long?

    For the ``n_facts`` facts ``knockouts_at_sites(..., seed=seed)`` draws (its generator's first draw), subtract
    from the FFN output at each site a random direction of length ``lengths[site]`` (``(n_facts,)``, e.g. the
    length the "other" set removes). ``outputs``: per layer ``(N, T, d_model)``, the model's FFN outputs on
    ``ids`` (``collect(...).outputs``). Returns ``{site: (n_facts,)}``, the drop in P(answer), mean of ``draws``
    directions (drawn from a generator seeded ``1000 + seed``)."""
    validate.int_in_range("draws", draws, 1, 1000)
    rows = torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed))[:n_facts]
    g = torch.Generator().manual_seed(1000 + seed)
    before = answer_probability(model, ids[rows], answer_pos[rows], answer_id[rows])
    out = {}
    for site, (layer, pos) in sites.items():
        length = lengths[site]
        if length.shape != (len(rows),):
            raise ValueError(f"lengths[{site!r}] must be ({len(rows)},), one length per fact, got {tuple(length.shape)}")
        written = outputs[layer][rows, pos[rows]]                                          # (n_facts, d_model)
        drops = []
        for _ in range(draws):
            d = torch.randn(written.shape, generator=g)
            with patched_ffn_output(model, layer, pos[rows], written - d / d.norm(dim=1, keepdim=True) * length[:, None]):
                drops.append(before - answer_probability(model, ids[rows], answer_pos[rows], answer_id[rows]))
        out[site] = torch.stack(drops).mean(0)
    return out


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
