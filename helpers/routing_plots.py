"""Pictures of where an MoE router sends tokens: bars, heat maps, load over training.

All functions draw on matplotlib axes they are given (or return a figure) and
take plain tensors, so they work for any router: ``helpers.moe`` records give
the counts (``MoEStats.tokens_per_expert``, ``RoutingLog.counts``).
"""

from __future__ import annotations

import math

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from helpers import validate
from helpers.moe import RoutingLog, arrival_rank
from helpers.plotting import PALETTE

KEPT_COLOR = PALETTE[0]
DROPPED_COLOR = PALETTE[1]


def plot_expert_bars(ax: Axes, counts: torch.Tensor, *, kept: torch.Tensor | None = None,
                     capacity: int | None = None, title: str | None = None, ylabel: str = "tokens routed") -> Axes:
    """Bars of tokens per expert. ``counts``: ``(E,)``.

    With ``kept`` (``(E,)``, the part each expert processed) the bars are split into kept
    and dropped; ``capacity`` draws the per-expert limit. A dotted line marks perfect balance (one dashed line, named for
    both, when the capacity equals it: capacity factor 1).
    """
    counts = torch.as_tensor(counts).double()
    n_experts = counts.numel()
    experts = torch.arange(n_experts).numpy()
    if kept is None:
        ax.bar(experts, counts.numpy(), color=KEPT_COLOR, label="routed")
    else:
        kept = torch.as_tensor(kept).double()
        ax.bar(experts, kept.numpy(), color=KEPT_COLOR, label="kept")
        ax.bar(experts, (counts - kept).numpy(), bottom=kept.numpy(), color=DROPPED_COLOR, label="dropped")
    even = float(counts.mean())
    if capacity is not None and abs(capacity - even) < 0.5:   # c = 1: one line, both names
        ax.axhline(capacity, color=DROPPED_COLOR, ls="--", lw=2, zorder=4,
                   label=f"capacity = {capacity} = perfect balance")
    else:
        ax.axhline(even, color="black", ls=":", lw=2.5, zorder=4, label="perfect balance")  # on top
        if capacity is not None:
            ax.axhline(capacity, color=DROPPED_COLOR, ls="--", lw=1.5, zorder=3, label=f"capacity = {capacity}")
    top = max(float(counts.max()), float(capacity or 0))
    ax.set_ylim(0, 1.4 * top if top > 0 else 1)               # room for the legend above the bars
    ax.set_xticks(experts)
    ax.set_xlabel("expert")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=9, loc="upper center", ncol=2)
    return ax


def plot_heatmap(ax: Axes, matrix: torch.Tensor, *, xlabel: str, ylabel: str, title: str | None = None,
                 yticklabels: Sequence[str] | None = None, xticklabels: Sequence[str] | None = None, colorbar_label: str = "share of tokens",
                 vmin: float | None = 0.0, vmax: float | None = None, annotate: bool = False, cmap: str = "viridis",
                 aspect: str = "auto", colorbar: bool = True) -> Axes:
    """A labelled heat map of a 2-D tensor ``(rows, columns)`` (rows on the y axis), with a colour bar unless
    ``colorbar=False`` (the caller then draws one for several panels from ``ax.images[0]``)."""
    m = torch.as_tensor(matrix).double()
    if m.dim() != 2:
        raise ValueError(f"matrix must be 2-D, got shape {tuple(m.shape)}")
    image = ax.imshow(m.numpy(), aspect=aspect, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label=colorbar_label, fraction=0.046, pad=0.03)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(False)
    if xticklabels is not None:
        ax.set_xticks(range(len(xticklabels)))
        ax.set_xticklabels(xticklabels)
    elif m.shape[1] <= 32:
        ax.set_xticks(range(m.shape[1]))
    if yticklabels is not None:
        ax.set_yticks(range(len(yticklabels)))
        ax.set_yticklabels(yticklabels)
    else:                                                      # rows are counted things (steps, layers): whole ticks
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if annotate:
        top = float(m.max()) if vmax is None else vmax
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                value = float(m[i, j])
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if value > 0.6 * top else "white")
    if title:
        ax.set_title(title)
    return ax


def load_shares(counts: torch.Tensor) -> torch.Tensor:
    """Counts ``(..., E)`` -> shares of the tokens per expert (each row sums to 1)."""
    counts = torch.as_tensor(counts).double()
    return counts / counts.sum(-1, keepdim=True).clamp_min(1)


def experts_by_load(counts: torch.Tensor) -> torch.Tensor:
    """``(E,)`` long: expert ids ordered from the busiest to the least busy (ties: lower id first).

    ``counts``: ``(..., E)`` loads; leading dimensions (steps, tokens, ...) are summed first.
    Which id an expert ends up with after training is an accident of the run, so plots that
    compare runs show experts in this order.
    """
    counts = torch.as_tensor(counts).double()
    if counts.dim() == 0:
        raise ValueError("counts must have at least 1 dimension (experts), got a scalar")
    total = counts.reshape(-1, counts.shape[-1]).sum(0)
    return torch.sort(-total, stable=True).indices


def routing_over_training_figure(logs: Mapping[str, RoutingLog], layers: Sequence[int] = (0,),
                                 sort_experts: bool = False, first_step: int = 0) -> Figure:
    """Heat maps, one column per run and one row per layer: training step × expert, colour = share of the
    step's tokens that went to the expert (one colour scale for all panels). Steps are labelled from
    ``first_step`` (0 by default; 1 to count steps as the prose does).

    With ``sort_experts`` each panel shows its experts busiest first (by load summed over training), so
    panels of different runs, whose expert ids mean nothing to each other, compare by rank.
    """
    fig, axes = plt.subplots(len(layers), len(logs), figsize=(4.6 * len(logs), 3.4 * len(layers)), squeeze=False)
    top = max(float(load_shares(log.counts[:, layer]).max()) for log in logs.values() for layer in layers)
    n_experts = next(iter(logs.values())).counts.shape[-1]
    top = math.ceil(top * n_experts - 1e-9) / n_experts            # the scale ends on a labelled multiple of 1/E
    for row, layer in enumerate(layers):
        for ax, (name, log) in zip(axes[row], logs.items()):
            shares = load_shares(log.counts[:, layer])              # (steps, E)
            xlabel = "expert"
            if sort_experts:
                shares = shares[:, experts_by_load(log.counts[:, layer])]
                xlabel = "experts, busiest first"
            plot_heatmap(ax, shares, xlabel=xlabel, ylabel="training step", title=f"{name}: layer {layer}",
                         yticklabels=[str(s + first_step) for s in range(shares.shape[0])] if first_step else None,
                         vmax=top, xticklabels=[str(i + 1) for i in range(shares.shape[1])] if sort_experts else None,
                         colorbar=False)
    fig.suptitle("Share of each step's tokens that every expert receives")
    fig.tight_layout(rect=(0, 0, 0.9, 1))
    cax = fig.add_axes((0.92, 0.15, 0.015, 0.7))                  # one colour bar: every panel shares the scale
    bar = fig.colorbar(axes[0, 0].images[0], cax=cax,
                       label=f"share of the step's tokens, linear scale (even split = 1/{n_experts})")
    low, high = axes[0, 0].images[0].get_clim()
    ticks = [m for m in range(n_experts + 1) if low <= m / n_experts <= high]  # every multiple of the even share
    bar.set_ticks([m / n_experts for m in ticks], labels=[f"{m}/{n_experts}" if m else "0" for m in ticks])
    return fig


def _as_runs(value: RoutingLog | Sequence[RoutingLog]) -> list[RoutingLog]:
    return [value] if isinstance(value, RoutingLog) else list(value)


def load_curves_figure(logs: Mapping[str, RoutingLog | Sequence[RoutingLog]], first_step: int = 0) -> Figure:
    """Two panels over training: busiest expert's load / mean load, and the normalised load entropy; steps
    numbered from ``first_step``.

    One line per run and layer (solid: layer 0, dashed: layer 1, ...). A run given as several logs
    (seeds) is drawn as their mean, with a band from the lowest to the highest seed.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    styles = ["-", "--", ":", "-."]
    n_experts = 0
    counts = {len(_as_runs(value)) for value in logs.values()}
    n_seeds = counts.pop() if len(counts) == 1 else 0              # one seed count for all: said once in the legend
    for color, (name, value) in zip(PALETTE, logs.items()):
        runs = _as_runs(value)
        mom = torch.stack([log.max_over_mean() for log in runs])          # (seeds, steps, layers)
        ent = torch.stack([log.load_entropy() for log in runs])
        n_experts = max(n_experts, runs[0].counts.shape[-1])
        steps = torch.arange(first_step, first_step + mom.shape[1]).numpy()
        suffix = f" (mean of {len(runs)} seeds)" if 1 < len(runs) != n_seeds else ""
        for layer in range(mom.shape[2]):
            label = f"{name}, layer {layer}{suffix}"
            for ax, values in ((left, mom[:, :, layer]), (right, ent[:, :, layer])):
                ax.plot(steps, values.mean(0).numpy(), styles[layer % 4], color=color, label=label, lw=1.6)
                if len(runs) > 1:
                    ax.fill_between(steps, values.min(0).values.numpy(), values.max(0).values.numpy(),
                                    color=color, alpha=0.15, lw=0)
    left.axhline(1.0, color="0.5", lw=0.8)
    right.axhline(1.0, color="0.5", lw=0.8)
    left.set_xlabel("training step")
    left.set_ylabel("max load / mean load")
    left.set_title(f"Busiest expert (1 = even, {n_experts} = collapse on one)")
    right.set_xlabel("training step")
    right.set_ylabel("entropy of the load / log E")
    right.set_title("Load entropy (1 = even, 0 = one expert)")
    right.set_ylim(0, 1.05)
    handles, labels = left.get_legend_handles_labels()
    if any(len(_as_runs(value)) > 1 for value in logs.values()):
        handles.append(Patch(color="0.5", alpha=0.3, lw=0))
        labels.append(f"lines: mean of {n_seeds} seeds; shaded: lowest to highest" if n_seeds > 1
                      else "shaded: lowest to highest seed")
    fig.legend(handles, labels, loc="lower center", ncol=min(2, len(labels)), fontsize=11, frameon=False)
    rows = -(-len(labels) // 2)                                   # legend rows under the panels
    fig.tight_layout(rect=(0, 0.06 * rows + 0.02, 1, 1))
    return fig


def token_type_by_expert(token_ids: torch.Tensor, expert_index: torch.Tensor, type_of_token: Sequence[str],
                         types: Sequence[str], n_experts: int) -> torch.Tensor:
    """``(len(types), E)``: for each token type, the share of its tokens routed to each expert.

    Args:
        token_ids: ``(N,)`` long, the token at each position.
        expert_index: ``(N,)`` long, its (first-choice) expert.
        type_of_token: the type of every vocabulary id (``helpers.facts.token_types`` in vocab order).
        types: the types to show, in row order.
    """
    validate.positive_int("n_experts", n_experts)
    row_of = {t: i for i, t in enumerate(types)}
    rows = torch.tensor([row_of.get(type_of_token[int(i)], -1) for i in token_ids])
    mask = rows >= 0
    counts = torch.zeros(len(types), n_experts, dtype=torch.float64)
    counts.index_put_((rows[mask], expert_index[mask]), torch.ones(int(mask.sum()), dtype=torch.float64),
                      accumulate=True)
    return load_shares(counts)


# ----------------------------------------------------------------------------- analyses behind notebook 05's figures
def busiest_first(counts: torch.Tensor) -> torch.Tensor:
    """``(E,)`` long: each expert's rank by load, 0 for the busiest (``experts_by_load`` inverted), so that
    ``busiest_first(counts)[expert_index]`` renames experts busiest first."""
    order = experts_by_load(counts)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel())
    return rank


def shares_by_type_and_position(token_ids: torch.Tensor, expert_index: torch.Tensor, type_of_token: Sequence[str],
                                types: Sequence[str], n_experts: int,
                                seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where a layer sent each kind of token, experts renamed busiest first: ``(by_type (len(types), E),
    by_position (seq_len, E))``, each row the shares of that type's (position's) tokens per expert.

    ``token_ids`` ``(B·T,)`` and ``expert_index`` ``(B·T,)`` (first choices) in row-major order of a (B, T) batch.
    """
    validate.positive_int("seq_len", seq_len)
    rank = busiest_first(torch.bincount(expert_index, minlength=n_experts))[expert_index]
    position = torch.arange(token_ids.numel()) % seq_len
    by_type = token_type_by_expert(token_ids, rank, type_of_token, types, n_experts)
    by_position = load_shares(torch.stack([torch.bincount(rank[position == p], minlength=n_experts)
                                           for p in range(seq_len)]))
    return by_type, by_position


def favourite_expert_shares(first_choice: torch.Tensor, group: torch.Tensor, others: torch.Tensor,
                            n_experts: int) -> tuple[float, float]:
    """The expert that takes most tokens of ``group`` (a bool mask over positions): the share of ``group`` it
    takes, and the share of the ``others`` positions (a bool mask) it takes too. ``first_choice`` ``(N,)``."""
    favourite = torch.bincount(first_choice[group], minlength=n_experts).argmax()
    return (float((first_choice[group] == favourite).double().mean()),
            float((first_choice[others] == favourite).double().mean()))


def plot_dispatch(ax: Axes, expert_index: torch.Tensor, n_experts: int, capacity: int, *,
                  title: str | None = None) -> Axes:
    """Draw dispatch with a capacity: tokens on the left, each expert's ``capacity`` slots on the right.

    ``expert_index``: ``(N, k)`` or ``(N,)`` long, best choice first. Each slot is drawn where
    ``arrival_rank`` puts it (the rule ``MoE`` applies): a line from its token to its place in the
    expert's queue, or, when the queue is full, to the dropped row (that slot adds 0; the residual
    carries the token on). Slot labels are the token ids; colour marks the first or later choice.
    """
    index = expert_index[:, None] if expert_index.dim() == 1 else expert_index
    if index.dim() != 2 or index.numel() == 0:
        raise ValueError(f"expert_index must be a non-empty (N, k) or (N,) tensor, got shape {tuple(expert_index.shape)}")
    n_experts, capacity = validate.positive_int("n_experts", n_experts), validate.positive_int("capacity", capacity)
    n, k = index.shape
    rank = arrival_rank(index, n_experts)
    height = max(n, 1.5 * (n_experts + 1))
    token_y = [height - 1 - t * (height - 1) / max(n - 1, 1) for t in range(n)]
    row_y = [height - 1 - e * (height - 1) / n_experts for e in range(n_experts + 1)]   # the last row: dropped
    colors = [PALETTE[0], PALETTE[2], PALETTE[4], PALETTE[3]]
    x_in, step = 2.2, 0.7                                          # where a row's queue begins, slot spacing
    ax.text(0, height, "tokens", ha="right", fontsize=9, weight="bold")
    ax.text(x_in, height, f"{capacity} slots per expert, first come, first served", fontsize=9,
            weight="bold")
    for t in range(n):
        ax.text(0, token_y[t], f"token {t}", ha="right", va="center", fontsize=9)
    for e in range(n_experts + 1):
        label = f"expert {e}" if e < n_experts else "dropped slots (each adds 0 to its token's output)"
        ax.text(x_in, row_y[e] + 0.42, label, fontsize=9, color="0.2" if e < n_experts else PALETTE[1])
        for r in range(capacity if e < n_experts else 0):
            ax.add_patch(plt.Rectangle((x_in + 0.1 + r * step, row_y[e] - 0.27), 0.54, 0.54, fill=False,
                                       ec="0.6", ls=":"))
    n_dropped = 0
    for j in range(k):                                            # arrival order: choice by choice, token order
        for t in range(n):
            e, r = int(index[t, j]), int(rank[t, j])
            kept = r < capacity
            row, place = (e, r) if kept else (n_experts, n_dropped)
            n_dropped += not kept
            ax.annotate("", xy=(x_in, row_y[row]), xytext=(0.15, token_y[t]),
                        arrowprops=dict(arrowstyle="-|>", color=colors[j % 4], lw=1, alpha=0.6,
                                        ls="-" if kept else "--", shrinkA=0, shrinkB=2))
            ax.text(x_in + 0.37 + place * step, row_y[row], str(t), ha="center", va="center", fontsize=9,
                    color="white" if kept else PALETTE[1], weight="bold",
                    bbox=dict(boxstyle="round,pad=0.3", lw=1.5, fc=colors[j % 4] if kept else "white",
                              ec=colors[j % 4]))
    if k > 1:
        ax.legend(handles=[Patch(color=colors[j % 4], label=f"choice {j + 1}") for j in range(k)],
                  loc="center right", fontsize=9)
    ax.set_xlim(-1.3, x_in + max(capacity, n_dropped, 5) * step + 0.4)
    ax.set_ylim(-0.6, height + 0.5)
    ax.axis("off")
    if title:
        ax.set_title(title)
    return ax
