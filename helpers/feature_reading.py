"""Reading one dictionary feature (notebook 09, section 5): which feature to feature, and its two-panel figure.

A feature is read two ways: its key through the prefixes it fires on (every firing, grouped by the prefix's next
word), its value through the vocabulary (the logits it adds, ``helpers.memory.project_to_vocab``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from helpers import validate
from helpers.dictionary import top_label_share
from helpers.plotting import PALETTE

__all__ = ["clean_answer_features", "featured_feature", "draw_feature"]


def clean_answer_features(codes: torch.Tensor, next_word: Sequence[str], at_answer: torch.Tensor, q: int = 8,
                          min_active: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """The features a top-``q`` list calls clean: their ``q`` strongest rows all lead to one word, all sit where an
    answer is due, and they are active on at least ``min_active`` rows.

    ``codes (M, F)``: the features' activations on M prefixes; ``next_word``: M labels; ``at_answer (M,)`` bool.
    Returns ``(clean (F,) bool, active (F,) long)``, ``active`` = on how many rows each feature is positive.
    """
    validate.float_tensor("codes", codes, min_dims=2)
    if at_answer.shape != (codes.shape[0],):
        raise ValueError(f"at_answer must have shape ({codes.shape[0]},), got {tuple(at_answer.shape)}")
    share, active = top_label_share(codes, next_word, q=q)
    answer_top = at_answer[codes.topk(q, dim=0).indices].all(0)                           # (F,)
    return (share == 1) & answer_top & (active >= min_active), active


def featured_feature(codes: torch.Tensor, next_word: Sequence[str], at_answer: torch.Tensor, q: int = 8,
                     min_active: int = 10) -> int:
    """The feature a top list invites one to read: of ``clean_answer_features``, the one active on most rows
    (ties: the lowest index). Raises ``ValueError`` when no feature is clean."""
    clean, active = clean_answer_features(codes, next_word, at_answer, q, min_active)
    if not bool(clean.any()):
        raise ValueError("no feature has its q strongest rows all at one answer; lower q or min_active")
    return int(torch.where(clean, active, torch.full_like(active, -1)).argmax())


def draw_feature(codes: torch.Tensor, value_logits: torch.Tensor, next_word: Sequence[str], decode, feature: int,
                 title: str = "") -> None:
    """Two panels for one feature: left, every row it fires on at its activation, grouped by next word (its 8
    strongest in orange); right, the 6 words its value promotes most and the 6 it demotes most.

    ``codes (M, F)``, ``value_logits (F, vocab)``, ``next_word``: M labels, ``decode``: ids -> list of words.
    """
    acts, logits = codes[:, feature], value_logits[feature]
    on = (acts > 0).nonzero()[:, 0].tolist()
    groups = [w for w, _ in Counter(next_word[j] for j in on).most_common(6)]
    strongest = set(acts.topk(8).indices.tolist())
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.2, 1]})
    jitter = torch.Generator().manual_seed(0)                         # a fixed vertical spread, so dots do not overlap
    counts = []
    for g, word in enumerate(groups + ["other"]):
        members = [j for j in on if next_word[j] == word or (word == "other" and next_word[j] not in groups)]
        counts.append(len(members))
        spread = (torch.rand(len(members), generator=jitter) - 0.5) * 0.5
        left.scatter([float(acts[j]) for j in members], (g + spread).tolist(), s=12, alpha=0.6,
                     color=[PALETTE[1] if j in strongest else PALETTE[0] for j in members])
    left.set_yticks(range(len(groups) + 1), [f"→ {w} ({n})" for w, n in zip(groups, counts)] + [f"other ({counts[-1]})"],
                    fontsize=9)
    left.invert_yaxis()
    left.set(xlabel=f"activation f_{feature} (orange: its 8 strongest)", title="Every prefix it fires on, by next word")
    order = torch.cat([logits.topk(6).indices, logits.topk(6, largest=False).indices.flip(0)])
    heights = logits[order].tolist()
    right.barh(range(12), heights, color=[PALETTE[2] if v > 0 else PALETTE[3] for v in heights])
    right.set_yticks(range(12), decode(order), fontsize=9)
    right.invert_yaxis()
    right.axvline(0, color="0.4", lw=0.8)
    right.set(xlabel="logit it adds (via final norm, unembedding)", title="Its value: most promoted / demoted words")
    fig.suptitle(f"{title}feature {feature}: active on {len(on)} of {len(acts)} prefixes", x=0.01, ha="left")
    fig.tight_layout()
    plt.show()
