r"""What a wider FFN buys: memorising random key -> value pairs at several hidden widths.

Notebook 02's quality-vs-width measurement. A table of ``n_facts`` random pairs
``(k_n, v_n)``, both ``N(0, 1)`` vectors of width ``d_model``, is stored in one
``helpers.ffn.FFN`` by training ``FFN(k_n) ≈ v_n`` (mean squared error, full batch, Adam,
the same number of steps for every width). After training we report, per FFN:

* ``error``: the mean squared error divided by the mean square of the values, i.e. the
  fraction of the values' variance the FFN fails to reproduce (1 for an FFN that outputs 0);
* ``recall``: the fraction of keys whose output is closer (Euclidean) to their own value than
  to any other value in the table.

Each width is trained from several seeds (a seed fixes the table and the FFN's initialisation),
so the spread across seeds can be compared with the gaps between widths; the trained FFNs are
kept (``WidthSweep.ffns``) so that a notebook can look inside them. The FFNs of one width
are trained together as one batched computation (``torch.baddbmm``) for speed; this is the same
arithmetic as training each ``FFN`` on its own (``tests/test_width.py`` checks it) and the
trained weights are copied back into ordinary ``FFN`` modules, which the scores are computed with.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from helpers import validate
from helpers.ffn import FFN
from helpers.progress import progress as progress_bar


def random_facts(n_facts: int, d_model: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A table of random pairs: ``(keys, values)``, each ``(n_facts, d_model)`` from ``N(0, 1)``, seeded."""
    validate.positive_int("n_facts", n_facts)
    validate.positive_int("d_model", d_model)
    validate.non_negative_int("seed", seed)
    gen = torch.Generator().manual_seed(10_000 + seed)
    keys = torch.randn(n_facts, d_model, generator=gen)
    values = torch.randn(n_facts, d_model, generator=gen)
    return keys, values


def init_ffn(d_model: int, d_ff: int, seed: int) -> FFN:
    """``FFN(d_model, d_ff)`` (exact GELU, biases) initialised from ``torch.manual_seed(seed)``; global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return FFN(d_model, d_ff)


def score(ffn: FFN, keys: torch.Tensor, values: torch.Tensor) -> tuple[float, float]:
    """``(error, recall)`` of ``ffn`` on a table (see the module docstring); keys, values ``(n, d_model)``."""
    with torch.no_grad():
        out = ffn(keys)
        error = ((out - values) ** 2).mean() / (values ** 2).mean()
        nearest = torch.cdist(out, values).argmin(dim=1)
        recall = (nearest == torch.arange(len(values))).float().mean()
    return error.item(), recall.item()


def train_together(ffns: Sequence[FFN], keys: torch.Tensor, values: torch.Tensor, *, steps: int,
                   lr: float) -> None:
    """Train FFNs of one shape, FFN ``s`` on table ``s``, in place: full-batch Adam on the mean squared error.

    Args:
        ffns: ``S`` dense FFNs with biases, all ``(d_model, d_ff)`` alike.
        keys, values: ``(S, n_facts, d_model)``, one table per FFN.
        steps: Adam steps; lr: its learning rate.

    The loss summed over the ``S`` FFNs has independent parts, so each FFN gets exactly the
    gradient (and, Adam being elementwise, the update) it would get if trained alone.
    """
    validate.positive_int("steps", steps)
    validate.positive_float("lr", lr)
    if keys.shape[0] != len(ffns) or values.shape != keys.shape:
        raise ValueError(f"keys and values must be (S={len(ffns)}, n_facts, d_model), got {tuple(keys.shape)} "
                         f"and {tuple(values.shape)}")
    with torch.no_grad():
        W1 = torch.stack([f.w1.weight for f in ffns]).clone()                 # (S, d_ff, d)
        b1 = torch.stack([f.w1.bias for f in ffns]).unsqueeze(1).clone()      # (S, 1, d_ff)
        W2 = torch.stack([f.w2.weight for f in ffns]).clone()                 # (S, d, d_ff)
        b2 = torch.stack([f.w2.bias for f in ffns]).unsqueeze(1).clone()      # (S, 1, d)
    params = [p.requires_grad_() for p in (W1, b1, W2, b2)]
    opt = torch.optim.Adam(params, lr=lr)
    with torch.enable_grad():
        for _ in range(steps):
            hidden = F.gelu(torch.baddbmm(b1, keys, W1.transpose(1, 2)))     # (S, n, d_ff)
            out = torch.baddbmm(b2, hidden, W2.transpose(1, 2))               # (S, n, d)
            loss = ((out - values) ** 2).mean(dim=(1, 2)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        for s, f in enumerate(ffns):
            f.w1.weight.copy_(W1[s])
            f.w1.bias.copy_(b1[s, 0])
            f.w2.weight.copy_(W2[s])
            f.w2.bias.copy_(b2[s, 0])


@dataclass
class WidthSweep:
    """Scores per hidden width and seed; ``error[d_ff][i]``, ``recall[d_ff][i]`` and the trained ``ffns[d_ff][i]``
    belong to ``seeds[i]``, whose table is ``random_facts(n_facts, d_model, seeds[i])``."""

    d_model: int
    n_facts: int
    steps: int
    lr: float
    seeds: list[int]
    error: dict[int, list[float]] = field(default_factory=dict)
    recall: dict[int, list[float]] = field(default_factory=dict)
    params: dict[int, int] = field(default_factory=dict)
    ffns: dict[int, list[FFN]] = field(default_factory=dict, repr=False)

    @property
    def targets(self) -> int:
        """How many numbers the table asks an FFN to store: ``n_facts * d_model`` (every value's entries)."""
        return self.n_facts * self.d_model

    @property
    def widths(self) -> list[int]:
        return sorted(self.error)

    def mean(self, what: str, d_ff: int) -> float:
        """Mean over seeds of ``"error"`` or ``"recall"`` at width ``d_ff``."""
        return statistics.fmean(getattr(self, validate.one_of("what", what, ("error", "recall")))[d_ff])


def memorisation_sweep(widths: Sequence[int], *, d_model: int = 16, n_facts: int = 256, seeds: Sequence[int] = (0, 1, 2),
                       steps: int = 150, lr: float = 1e-2, progress: bool = True) -> WidthSweep:
    """Train an FFN of every width in ``widths`` from every seed on a table of random facts; score each.

    Seed ``s`` fixes the table (``random_facts(n_facts, d_model, s)``) and the FFN's
    initialisation (``init_ffn(d_model, d_ff, s)``), so every width sees the same tables.
    Returns a ``WidthSweep``; shows a progress bar over the widths unless ``progress=False``.
    """
    validate.positive_int("d_model", d_model)
    seeds = [validate.non_negative_int("seed", s) for s in seeds]
    if not seeds or not widths:
        raise ValueError(f"widths and seeds must be non-empty, got widths={list(widths)}, seeds={seeds}")
    tables = [random_facts(n_facts, d_model, s) for s in seeds]
    keys = torch.stack([k for k, _ in tables])
    values = torch.stack([v for _, v in tables])
    sweep = WidthSweep(d_model, n_facts, steps, lr, seeds)
    for d_ff in progress_bar(list(widths), desc="training FFNs", disable=not progress):
        ffns = [init_ffn(d_model, validate.positive_int("d_ff", d_ff), s) for s in seeds]
        train_together(ffns, keys, values, steps=steps, lr=lr)
        scores = [score(f, k, v) for f, (k, v) in zip(ffns, tables)]
        sweep.error[d_ff] = [e for e, _ in scores]
        sweep.recall[d_ff] = [r for _, r in scores]
        sweep.params[d_ff] = ffns[0].param_count()
        sweep.ffns[d_ff] = [f.eval() for f in ffns]
    return sweep


def width_tradeoff_figure(sweep: WidthSweep, selected: int, *, reference: int = 4):
    """Two panels over the expansion ``d_ff / d_model``: what a width costs and what it buys, ``selected`` marked.

    Left: parameters of one FFN (counted) against the numbers the table asks it to store
    (``sweep.targets``), and forward FLOPs per token (``4·d·d_ff``, exact), both on log scales.
    Right: the error left and the share of facts recalled, per seed and their mean.

    Args:
        sweep: a ``WidthSweep`` whose widths are multiples of ``sweep.d_model``.
        selected: the expansion to highlight (e.g. 8 for ``d_ff = 8d``); reference: the one the title compares
            with (4).
    Returns the figure (not shown).
    """
    import matplotlib.pyplot as plt

    d = sweep.d_model
    expansions = [w // d for w in sweep.widths]
    for name, value in (("selected", selected), ("reference", reference)):
        if value not in expansions:
            raise ValueError(f"{name} must be one of the expansions {expansions}, got {value!r}")
    widths = sweep.widths
    w_sel, w_ref = selected * d, reference * d
    fig, (ax_c, ax_q) = plt.subplots(1, 2, figsize=(12, 4.3))

    ax_c.plot(expansions, [sweep.params[w] for w in widths], "s-", color="#0072B2", ms=7, lw=2,
              label="parameters of the FFN")
    ax_c.plot(expansions, [4 * d * w for w in widths], "o--", color="0.4", ms=5, lw=1.5,
              label="forward FLOPs per token (4·d·d_ff)")
    ax_c.axhline(sweep.targets, color="#D55E00", ls=":", lw=2,
                 label=f"numbers to store ({sweep.n_facts} facts × {d})")
    ax_c.set_xscale("log", base=2)
    ax_c.set_yscale("log", base=2)
    ax_c.set_xticks(expansions, [f"{e}d" for e in expansions])
    ax_c.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    for axis in (ax_c.xaxis, ax_c.yaxis):
        axis.set_minor_formatter(lambda v, _: "")  # no mathtext tick labels: keeps a redraw fast
    ax_c.set_xlabel("hidden width d_ff")
    ax_c.set_ylabel("count (log scale)")
    ax_c.set_title(f"What it costs (d = {d}): linear in d_ff")
    ax_c.legend(fontsize=9, loc="upper left")

    for s_idx in range(len(sweep.seeds)):
        ax_q.plot(expansions, [sweep.error[w][s_idx] for w in widths], "o", color="#D55E00", ms=4, alpha=0.6,
                  label="error left, one seed" if s_idx == 0 else None)
        ax_q.plot(expansions, [sweep.recall[w][s_idx] for w in widths], "s", color="#009E73", ms=4, alpha=0.6,
                  label="facts recalled, one seed" if s_idx == 0 else None)
    ax_q.plot(expansions, [sweep.mean("error", w) for w in widths], "-", color="#D55E00", lw=2,
              label="error left (mean)")
    ax_q.plot(expansions, [sweep.mean("recall", w) for w in widths], "-", color="#009E73", lw=2,
              label="facts recalled (mean)")
    ax_q.set_xscale("log", base=2)
    ax_q.set_xticks(expansions, [f"{e}d" for e in expansions])
    ax_q.xaxis.set_minor_formatter(lambda v, _: "")
    ax_q.set_ylim(-0.03, 1.03)
    ax_q.set_xlabel("hidden width d_ff")
    ax_q.set_ylabel("fraction")
    ax_q.set_title(f"What it buys ({sweep.n_facts} random facts, {len(sweep.seeds)} seeds, {sweep.steps} steps)")
    ax_q.legend(fontsize=9, loc="center right")

    for ax in (ax_c, ax_q):
        ax.axvline(selected, color="0.3", ls=":", lw=1.5)
    fig.suptitle(f"d_ff = {selected}d: {sweep.params[w_sel]:,} parameters for {sweep.targets:,} numbers to store, "
                 f"{selected / reference:g}× the FLOPs of {reference}d; error left {sweep.mean('error', w_sel):.2f} "
                 f"({reference}d: {sweep.mean('error', w_ref):.2f}), facts recalled "
                 f"{sweep.mean('recall', w_sel):.0%} ({reference}d: {sweep.mean('recall', w_ref):.0%})", fontsize=11)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.13, top=0.84, wspace=0.22)  # fixed: faster than tight_layout
    return fig
