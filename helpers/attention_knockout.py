"""Attention knock-out: stop one position from reading another through attention (notebook 03, section 5).

Geva et al. (2023, "Dissecting Recall of Factual Associations in Auto-Regressive Language Models") block the edge
from the last position to the subject in chosen layers and watch the answer's probability: if it falls, the
subject's information reaches the prediction through that layer's attention. Here the edge is removed from the
causal mask of one ``TinyGPT`` block (every head), for a query and a key position per example, and the
control removes an edge of the same kind to another prompt word. ``attention_patching_effect`` is the causal
trace of ``helpers.interventions.patching_effect`` for attention's output (which sublayer carries the subject).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from helpers.memory import answer_probability
from helpers.stats import PairedDifference, paired_difference

__all__ = ["blocked_attention", "other_word_positions", "knockout_probabilities", "knockout_family",
           "mean_ablated_accuracy", "mean_ablation_family", "mean_ablation_report", "attention_patching_effect"]


@contextmanager
def blocked_attention(model: nn.Module, layer: int, query_pos: torch.Tensor, key_pos: torch.Tensor) -> Iterator[None]:
    """Inside the block, position ``query_pos[n]`` of example ``n`` does not attend to ``key_pos[n]`` in ``layer``.

    model: a ``helpers.transformer.TinyGPT``; query_pos, key_pos: ``(B,)`` int64, ``key_pos <= query_pos`` (what the
    causal mask allows), for the batch of ``B`` examples the model is then run on. The rest of the attention
    pattern is renormalised over the positions left, as a masked softmax does.
    """
    if not 0 <= layer < len(model.blocks):
        raise ValueError(f"layer must be in [0, {len(model.blocks)}), got {layer}")
    if query_pos.shape != key_pos.shape or query_pos.dim() != 1 or bool((key_pos > query_pos).any()):
        raise ValueError("query_pos and key_pos must be (B,) int64 tensors with key_pos <= query_pos")
    attn = model.blocks[layer].attn

    def forward(x: torch.Tensor) -> torch.Tensor:                     # CausalSelfAttention.forward, one edge fewer
        batch, length, width = x.shape
        if batch != len(query_pos):
            raise ValueError(f"blocked_attention was set up for {len(query_pos)} examples, the model got {batch}")
        q, k, v = (t.view(batch, length, attn.n_heads, width // attn.n_heads).transpose(1, 2)
                   for t in attn.qkv(x).split(width, dim=-1))
        allowed = torch.ones(length, length, dtype=torch.bool, device=x.device).tril().repeat(batch, 1, 1)
        allowed[torch.arange(batch), query_pos, key_pos] = False          # (B, T, T)
        mixed = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])
        return attn.proj(mixed.transpose(1, 2).reshape(batch, length, width))

    attn.forward = forward
    try:
        yield
    finally:
        del attn.forward                                                   # back to the class's forward


def other_word_positions(subject_pos: torch.Tensor) -> torch.Tensor:
    """The control's key: the first prompt word after ``<bos>`` that is not the subject, ``(B,)`` int64 (position 1,
    or 2 when the subject is at 1: "the" of "the capital of X is", "is" of "X is located in")."""
    return torch.where(subject_pos == 1, 2, 1)


def knockout_probabilities(model: nn.Module, ids: torch.Tensor, answer_pos: torch.Tensor, answer_id: torch.Tensor,
                           subject_pos: torch.Tensor) -> dict[str, float]:
    """Mean P(right answer) over the examples with nothing blocked, and with the last word's edge to the subject
    (or to another word, the control) blocked in layer 0, in layer 1, and in both. ids: ``(B, T)``; the rest ``(B,)``."""
    other = other_word_positions(subject_pos)
    result = {"nothing blocked": answer_probability(model, ids, answer_pos, answer_id).mean().item()}
    for name, key in [("subject", subject_pos), ("other word", other)]:
        for layers in [(0,), (1,), (0, 1)]:
            with torch.no_grad(), _blocked_in(model, layers, answer_pos, key):
                p = answer_probability(model, ids, answer_pos, answer_id).mean().item()
            result[f"{name}, layer {' and '.join(map(str, layers))}"] = p
    return result


@contextmanager
def _blocked_in(model: nn.Module, layers: Sequence[int], query_pos: torch.Tensor, key_pos: torch.Tensor):
    if not layers:
        yield
        return
    with blocked_attention(model, layers[0], query_pos, key_pos), _blocked_in(model, layers[1:], query_pos, key_pos):
        yield


def knockout_family(by_seed: Mapping[int, Mapping[str, float]]) -> dict[str, PairedDifference]:
    """Per layer setting: P(right answer) with the subject's edge blocked − with the other word's, paired by seed."""
    seeds = sorted(by_seed)
    return {f"layer {layers}: subject − other word": paired_difference(
        [by_seed[s][f"subject, layer {layers}"] for s in seeds], [by_seed[s][f"other word, layer {layers}"] for s in seeds])
        for layers in ("0", "1", "0 and 1")}


@torch.no_grad()
def mean_ablated_accuracy(model: nn.Module, ids: torch.Tensor, answer_pos: torch.Tensor, answer_id: torch.Tensor,
                          groups: torch.Tensor, sublayer: str) -> torch.Tensor:
    """Share of each group's examples answered right (argmax over the vocabulary) when ``sublayer`` ("ffn" or
    "attn") of every block writes, at every position, its mean output over that group's examples.

    Mean ablation: every example-specific write of the sublayer is gone, its share common to the group (e.g. one
    relation's template) is kept. The means are taken on the clean run. ids: ``(N, T)``; answer_pos, answer_id,
    groups: ``(N,)`` int64, groups numbered 0..G-1. Returns ``(G,)`` float.
    """
    if sublayer not in ("ffn", "attn"):
        raise ValueError(f"sublayer must be 'ffn' or 'attn', got {sublayer!r}")
    modules = [getattr(block, sublayer) for block in model.blocks]
    accuracy = []
    for g in range(int(groups.max()) + 1):
        rows = torch.nonzero(groups == g)[:, 0]
        means, hooks = {}, []
        for i, module in enumerate(modules):                          # clean run: each sublayer's mean output
            hooks.append(module.register_forward_hook(
                lambda mod, inputs, out, i=i: means.__setitem__(i, out.mean(0, keepdim=True))))
        model(ids[rows])
        for h in hooks:
            h.remove()
        hooks = [module.register_forward_hook(lambda mod, inputs, out, i=i: means[i].expand_as(out).clone())
                 for i, module in enumerate(modules)]
        try:
            logits = model(ids[rows])[torch.arange(len(rows)), answer_pos[rows]]
        finally:
            for h in hooks:
                h.remove()
        accuracy.append((logits.argmax(-1) == answer_id[rows]).float().mean())
    return torch.stack(accuracy)


def mean_ablation_family(ffn: Mapping[int, Sequence[float]], attn: Mapping[int, Sequence[float]],
                         group_names: Sequence[str]) -> dict[str, PairedDifference]:
    """Per group: accuracy with both FFNs mean-ablated − with both attention layers mean-ablated, paired by seed.
    ffn, attn: ``{seed: accuracy per group}`` from ``mean_ablated_accuracy``."""
    seeds = sorted(ffn)
    return {name: paired_difference([float(ffn[s][g]) for s in seeds], [float(attn[s][g]) for s in seeds])
            for g, name in enumerate(group_names)}


def mean_ablation_report(ffn: Mapping[int, Sequence[float]], attn: Mapping[int, Sequence[float]],
                         group_names: Sequence[str]) -> str:
    """Mean and range over the seeds of each group's accuracy with both FFNs and with both attention layers
    mean-ablated, one line each. The attention line is labelled a floor: without attention nothing carries the
    subject to the last word, so FFNs − attention is forced by the architecture and gets no verdict here
    (``mean_ablation_family`` still computes it)."""
    seeds = sorted(ffn)
    lines = []
    for name, runs in [("both FFNs", ffn), ("both attention (floor)", attn)]:
        cells = []
        for g, group in enumerate(group_names):
            values = [float(runs[s][g]) for s in seeds]
            cells.append(f"{group} {sum(values) / len(values):.2f} ({min(values):.2f}–{max(values):.2f})")
        lines.append(f"  {name:24s}" + "  ".join(cells))
    return "\n".join(lines)


@torch.no_grad()
def attention_patching_effect(model: nn.Module, ids: torch.Tensor, answer_pos: torch.Tensor, answer_id: torch.Tensor,
                              donor_ids: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
    """``helpers.interventions.patching_effect`` for attention: ``(n_layers, T)``, the mean probability of each
    row's own answer when one layer's attention output at one position is replaced by what it was on the donor row
    (``donor_ids[n]``, aligned with ``ids[n]``). Columns not in ``positions`` are ``nan``."""
    if donor_ids.shape != ids.shape:
        raise ValueError(f"donor_ids must have the shape of ids, {tuple(ids.shape)}, got {tuple(donor_ids.shape)}")
    blocks = list(model.blocks)
    donor: dict[int, torch.Tensor] = {}
    handles = [b.attn.register_forward_hook(lambda module, inputs, out, l=l: donor.__setitem__(l, out.detach()))
               for l, b in enumerate(blocks)]
    try:
        model(donor_ids)
    finally:
        for handle in handles:
            handle.remove()
    effect = torch.full((len(blocks), ids.shape[1]), float("nan"))
    for layer, block in enumerate(blocks):
        for t in positions:
            def patch(module, inputs, out, layer=layer, t=int(t)):
                out = out.clone()
                out[:, t] = donor[layer][:, t]
                return out
            handle = block.attn.register_forward_hook(patch)
            try:
                effect[layer, t] = answer_probability(model, ids, answer_pos, answer_id).mean()
            finally:
                handle.remove()
    return effect
