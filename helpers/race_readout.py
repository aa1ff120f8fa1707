"""Notebook 04, section 6.2 read in short: one verdict table, one-line checks, every full table folded.

Section 6.2's race (``helpers.gating``) is a statistics lesson on a toy task: how many seeds, Holm over a family,
runs that stall, a tuned learning rate. The machinery behind its verdict is large (a 9 × 8 learning-rate sweep, a
27-row Holm family, a stalled-seed split, an output-size control with its own 9-row family, 300-step runs); this
module keeps the learner's view to a few lines and folds the rest into an HTML ``<details>`` block:

* ``Folded``: lines shown with the rest folded (``text/plain`` is the shown lines alone; the HTML adds the fold).
* ``tuning_summary``: the sweep in one line (each variant's best rate, the failures one step above).
* ``group_verdicts``: the 27-row family's group rows and step-size controls in the course's verdict format (gap,
  seeds lower and higher, t against its Holm threshold, verdict); the 21 per-variant rows folded.
* ``race_checks``: one line per check of the verdict (longer runs, stalled runs, the seeds without them, the
  output size at the start, optional stopping), each full table folded.
* ``kernel_note``: what the notebook shows of the three kernel lines below: one line (the live reruns against
  their stored curves, and whether any verdict of the family moves when the tuned arm's seeds 0-14 come from
  another CPU kernel), the three lines folded. Why it matters: a tuned run near the failure cliff can take off at
  another step on another kernel (curves move by up to 2.3 nats), so a verdict must survive the swap.
* ``kernel_lines``: the live reruns of shipped runs, each against its stored curve.
* ``kernel_verdict_line``: the family judged again with the tuned arm's seeds 0-14 from the default CPU kernel.
* ``kernel_move_line``: how far the same tuned gated runs move between two CPU kernels (shipped runs,
  ``KERNEL_PATHS``, made by the commands in their ``made_by`` field)::

    ATEN_CPU_CAPABILITY=default python -m helpers.gating --race-results --at-stored-rates \
        --variants swiglu geglu reglu bilinear --seeds 0 1 2 3 4 \
        --out helpers/data/gating_race_gated_tuned_seeds_0-4_default_kernel.json     # and avx2
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from helpers.ffn import VARIANT_NAMES
from helpers.gating import (DENSE, GATED_NO_SIGMOID, GROUP, LrSweep, VariantComparison, block_gaps, failed_runs,
                            init_output_rms, load_race, output_size_family, split_stalled_seeds, sweep_gap_lines,
                            sweep_table)
from helpers.precision import bound
from helpers.stats import Verdict, holm, holm_table

__all__ = ["Folded", "tuning_summary", "group_verdicts", "race_checks", "kernel_lines", "kernel_move_line",
           "kernel_verdict_line", "kernel_note", "KERNEL_PATHS", "DEFAULT_KERNEL_TUNED_PATH"]

#: The tuned race's gated (not GLU) runs on seeds 0-4, trained on two CPU kernels (``ATEN_CPU_CAPABILITY``).
KERNEL_PATHS: dict[str, Path] = {
    k: Path(__file__).parent / "data" / f"gating_race_gated_tuned_seeds_0-4_{k}_kernel.json" for k in ("default", "avx2")}


@dataclass
class Folded:
    """Lines shown with the rest folded: ``Folded(lines, shown=2)`` displays ``lines[:shown]`` (its ``text/plain``)
    and, in HTML, puts ``lines[shown:]`` in a ``<details>`` block labelled ``label``."""

    lines: list[str]
    shown: int = 1
    label: str = "the full tables (click)"

    def __repr__(self) -> str:
        return "\n".join(self.lines[:self.shown])

    def _repr_html_(self) -> str:
        def pre(lines: Sequence[str]) -> str:
            return "<pre>" + html.escape("\n".join(lines)) + "</pre>"
        folded = self.lines[self.shown:]
        return pre(self.lines[:self.shown]) + (
            f"<details><summary>{html.escape(self.label)}</summary>{pre(folded)}</details>" if folded else "")


def _names(variants: Sequence[str]) -> str:
    return ", ".join(VARIANT_NAMES[v] for v in variants)


def tuning_summary(sweep: LrSweep, fail_lr: float = 0.056, threshold: float = 4.0) -> Folded:
    """The learning-rate sweep in one line: each variant's best rate (the lowest mean run-mean loss over the
    tuning seeds), whether it lies inside the swept range, and how many runs average above ``threshold`` nats at
    ``fail_lr`` per group. Folded: ``sweep_table``, ``sweep_gap_lines`` and the failures per variant."""
    best = {v: sweep.best_lr(v) for v in sweep.variants}
    inside = all(sweep.lrs[0] < lr < sweep.lrs[-1] for lr in best.values())
    by_rate = {lr: [v for v in sweep.variants if best[v] == lr] for lr in sorted(set(best.values()))}
    failed = failed_runs(sweep, fail_lr, threshold)
    n = len(sweep.seeds)
    gated = sum(failed[v] for v in GATED_NO_SIGMOID)
    dense = sum(failed[v] for v in DENSE)
    head = (f"tuning on seeds {sweep.seeds[0]}-{sweep.seeds[-1]}, {len(sweep.lrs)} rates {sweep.lrs[0]:g}-"
            f"{sweep.lrs[-1]:g}: best " + "; ".join(f"{lr:g} ({_names(vs)})" for lr, vs in by_rate.items())
            + (", all inside the sweep" if inside else ", NOT all inside the sweep"))
    second = (f"  at {fail_lr:g}, runs averaging above {threshold:g} nats: gated (not GLU) {gated} of "
              f"{n * len(GATED_NO_SIGMOID)}, dense {dense} of {n * len(DENSE)}")
    folded = [f"run-mean answer loss, mean of seeds {sweep.seeds[0]}-{sweep.seeds[-1]} (* each variant's best "
              f"rate); gap: {GROUP}", sweep_table(sweep), sweep_gap_lines(sweep),
              f"runs above {threshold:g} nats at lr {fail_lr:g}, of {n}: "
              + ", ".join(f"{VARIANT_NAMES[v]} {k}" for v, k in failed.items())]
    return Folded([head, second, *"\n".join(folded).splitlines()], shown=2, label="the sweep (click)")


def group_verdicts(verdicts: Mapping[str, Verdict]) -> Folded:
    """A Holm family judged together (``helpers.stats.holm``), shown in short: the rows naming ``GROUP`` (the gated
    (not GLU) group against the dense one, per arm, and the step-size controls), one line each with gap, seeds
    lower and higher, t against its Holm threshold and verdict; the per-variant rows (``"X − ReLU, <arm>"``)
    folded in the same format."""
    rows = list(verdicts.values())
    shown = [v for v in rows if v.name.startswith(GROUP)]
    rest = [v for v in rows if not v.name.startswith(GROUP)]
    width = max(len(v.name) for v in rows)
    head = (f"one Holm family of {len(rows)} rows, {sum(v.resolved for v in rows)} resolved (5 % two-sided; t vs "
            f"its Holm threshold); run-mean loss, nats")
    lines = [head] + ["  " + v.line(width, digits=3, compact=True) for v in shown]
    folded = ["each variant − ReLU, per arm (same family):"] + ["  " + v.line(width, digits=3, compact=True)
                                                               for v in rest]
    return Folded(lines + folded, shown=len(lines), label=f"the other {len(rest)} rows (click)")


@dataclass(frozen=True)
class _Check:
    line: str
    details: list[str] = field(default_factory=list)


def race_checks(tuned: VariantComparison, slow_arms: Mapping[str, VariantComparison], long: VariantComparison,
                long_gap: float, matched: Mapping[str, VariantComparison], matched_gap: float,
                stall_threshold: float = 4.0) -> Folded:
    """Section 6.2's checks of its verdict, one line each (full tables folded).

    Args:
        tuned: the tuned arm (seeds 0-89). slow_arms: ``"lr 0.005"`` (seeds 0-59) and the other shared-rate arms.
        long: the stored 300-step runs at lr 0.005; long_gap: their largest gap (nats) to the race over steps 0-100.
        matched: ``helpers.gating.init_rms_controls()``; matched_gap: one of them retrained here against its file.
        stall_threshold: a run still above this many nats at step 100 has not taken off (ln 152 ≈ 5.0).
    """
    checks = []
    ends = ", ".join(f"{VARIANT_NAMES[v]} {float(long.final(v).max()):.2f}" for v in long.variants)
    checks.append(_Check(f"longer runs ({long.eval_steps[-1]} steps, lr {long.lr(long.variants[0]):g}, seeds "
                         f"{long.seeds[0]}-{long.seeds[-1]}): highest loss at the end {ends} nats; first 100 steps "
                         f"as stored {bound(long_gap, 0.01)}"))
    split = split_stalled_seeds(tuned, threshold=stall_threshold)
    checks.append(_Check(
        f"stalled (tuned runs above {stall_threshold:g} nats at step 100): {split.seeds} of {len(tuned.seeds)} seeds "
        f"hold one among the gap's 7 variants; sd of the per-seed gap {split.sd_stuck:.1f} nats on them, "
        f"{split.sd_rest:.2f} on the other {split.rest_gap.n}",
        [f"tuned runs above {stall_threshold:g} nats at step 100, of {len(tuned.seeds)}: "
         + ", ".join(f"{VARIANT_NAMES[v]} {n}" for v, n in split.stuck.items())
         + f" ({split.seeds_any} seeds with GLU's)"]))
    rest = split.rest_gap
    checks.append(_Check(f"tuned without those {split.seeds} seeds (post hoc, outside the family): {rest.mean:+.3f} "
                         f"nats, {rest.lower} lower, {rest.higher} higher of {rest.n}, t {rest.t:+.2f}"))
    family = output_size_family(slow_arms["lr 0.005"], matched)
    judged = {v.name: v for v in holm(family)}
    group = judged[f"matched {GROUP}"]
    c = group.comparison
    rms = {v: float(r.mean()) for v, r in init_output_rms(seeds=range(5)).items()}
    scales = ", ".join(f"{VARIANT_NAMES[v]} ×{runs.settings['w2_scale'][v]:.2f}" for v, runs in matched.items())
    checks.append(_Check(
        f"output size at the start, W2 scaled to ReLU's (lr 0.005, seeds 0-29; own Holm family of {len(family)}, "
        f"{sum(v.resolved for v in judged.values())} resolved): matched {GROUP} {c.mean:+.3f} nats, {c.lower} lower "
        f"of {c.n}, t {c.t:+.2f} vs {group.threshold:.2f} → {group.verdict}",
        [f"FFN output RMS at initialisation, seeds 0-4: gated (not GLU) "
         f"{np.mean([rms[v] for v in GATED_NO_SIGMOID]):.2f}, dense {np.mean([rms[v] for v in DENSE]):.2f}, "
         f"ReLU {rms['relu']:.2f}; W2 multiplied: {scales}",
         f"one matched run retrained here: largest gap to the stored curve {bound(matched_gap, 0.01)} nats",
         *holm_table(family, unit=" nats", digits=3).splitlines()]))
    blocks = block_gaps({"tuned": tuned})["tuned"]
    checks.append(_Check("optional stopping: each arm grew after its first 30 seeds were seen; tuned gap per block "
                         "of 30 seeds: " + ", ".join(f"{b.mean:+.2f}" for b in blocks) + " nats"))
    lines = ["checks, one line each:"] + ["  " + k.line for k in checks]
    details = [d for k in checks for d in k.details]
    return Folded(lines + details, shown=len(lines), label="their tables (click)")


def kernel_lines(reruns: Sequence[tuple[str, float]]) -> str:
    """One line per live rerun of a shipped run: ``(label, largest gap to the stored curve in nats)``."""
    return "\n".join(f"{label}, retrained here: largest gap to the stored curve {bound(gap, 0.01)} nats"
                     for label, gap in reruns)


def kernel_move_line(paths: Mapping[str, Path] = KERNEL_PATHS, tolerance: float = 0.01) -> str:
    """One line: the same (variant, seed) runs trained on two CPU kernels (two stored races, same variants and
    seeds): how many curves differ by more than ``tolerance`` nats at some step, the largest such difference and
    its run, and the largest difference in run-mean loss (nats)."""
    (ka, pa), (kb, pb) = list(paths.items())
    a, b = load_race(pa), load_race(pb)
    if a.variants != b.variants or a.seeds != b.seeds:
        raise ValueError("the two races must hold the same variants and seeds")
    gaps = {(v, s): float((a.curves[v][i] - b.curves[v][i]).abs().max()) for v in a.variants
            for i, s in enumerate(a.seeds)}
    means = max(float((a.run_mean(v) - b.run_mean(v)).abs().max()) for v in a.variants)
    (v, s), top = max(gaps.items(), key=lambda item: item[1])
    moved = sum(g > tolerance for g in gaps.values())
    return (f"{ka} vs {kb} CPU kernel, tuned seeds {a.seeds[0]}-{a.seeds[-1]} of {_names(a.variants)}: "
            f"{moved} of {len(gaps)} curves differ by more than {tolerance:g} nats, the most by {top:.1f} "
            f"({VARIANT_NAMES[v]} seed {s}); run means by up to {means:.2f}")


#: The tuned race's seeds 0-14, every variant, retrained on the default CPU kernel (the stored race ran on AVX512):
#: the dense variants and GLU by ``ATEN_CPU_CAPABILITY=default python -m helpers.gating --race-results
#: --at-stored-rates --variants relu gelu swish glu --seeds 0 ... 14``, the gated (not GLU) ones the same way (seeds
#: 0-4 are ``KERNEL_PATHS["default"]``), joined into one file.
DEFAULT_KERNEL_TUNED_PATH = Path(__file__).parent / "data" / "gating_race_tuned_seeds_0-14_default_kernel.json"


def kernel_verdict_line(arms: Mapping[str, VariantComparison], family_fn,
                        path: Path = DEFAULT_KERNEL_TUNED_PATH) -> str:
    """The whole Holm family judged again with the tuned arm's first seeds taken from another CPU kernel
    (``path``): one line, the tuned ``GROUP`` row's gap, seeds, t against its Holm threshold and verdict, and how
    many rows of the family are resolved. ``family_fn``: ``helpers.gating.race_family_with_controls``."""
    other = load_race(path)
    tuned = arms["tuned"]
    rest = tuned.select([s for s in tuned.seeds if s not in other.seeds])
    swapped = VariantComparison(list(tuned.variants), other.seeds + rest.seeds, list(tuned.eval_steps),
                                {v: torch.cat([other.curves[v], rest.curves[v]]) for v in tuned.variants},
                                dict(tuned.ffn_params), dict(tuned.model_params), dict(tuned.d_ff),
                                dict(tuned.settings))
    judged = {v.name: v for v in holm(family_fn({**arms, "tuned": swapped}))}
    row = judged[f"{GROUP}, tuned"]
    c = row.comparison
    return (f"with tuned seeds {other.seeds[0]}-{other.seeds[-1]} from the {other.settings['environment']['cpu_capability']}"
            f" kernel: tuned {GROUP} {c.mean:+.3f} nats, {c.lower} lower of {c.n}, t {c.t:+.2f} vs "
            f"{row.threshold:.2f} → {row.verdict}; {sum(v.resolved for v in judged.values())} of {len(judged)} "
            f"rows resolved")


def kernel_note(reruns: Sequence[tuple[str, float]], arms: Mapping[str, VariantComparison], family_fn,
                path: Path = DEFAULT_KERNEL_TUNED_PATH, tolerance: float = 0.01) -> Folded:
    """One shown line, the kernel lines folded (``kernel_lines``, ``kernel_move_line``, ``kernel_verdict_line``).

    The line: the live reruns (``(label, largest gap in nats)``) against ``tolerance``, and how many rows of the
    Holm family (``family_fn(arms)``) change verdict when the tuned arm's first seeds come from the run on another
    CPU kernel (``path``)."""
    tuned = arms["tuned"]
    other = load_race(path)
    rest = tuned.select([s for s in tuned.seeds if s not in other.seeds])
    swapped = VariantComparison(list(tuned.variants), other.seeds + rest.seeds, list(tuned.eval_steps),
                                {v: torch.cat([other.curves[v], rest.curves[v]]) for v in tuned.variants},
                                dict(tuned.ffn_params), dict(tuned.model_params), dict(tuned.d_ff),
                                dict(tuned.settings))
    before = {v.name: v.verdict for v in holm(family_fn(arms))}
    after = {v.name: v.verdict for v in holm(family_fn({**arms, "tuned": swapped}))}
    moved = sum(before[k] != after[k] for k in before)
    within = all(gap < tolerance for _, gap in reruns)
    line = (f"{len(reruns)} stored runs retrained here: {'all' if within else 'not all'} within {tolerance:g} nats "
            f"of their curves; with tuned seeds {other.seeds[0]}-{other.seeds[-1]} from another CPU kernel, "
            f"{moved} of {len(before)} verdicts change (helpers.race_readout)")
    return Folded([line, kernel_lines(reruns), kernel_move_line(), kernel_verdict_line(arms, family_fn, path)],
                  shown=1, label="the kernel lines (click)")
