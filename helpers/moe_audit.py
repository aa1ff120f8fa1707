"""Notebook 07's race, read in short: one verdict line, the lead-shrinks test and the folded audit (section 4.1).

Section 4 judges its race over seeds (``helpers.moe_race``, ``helpers.moe_long_run``); this module keeps the
reading short for the learner:

* ``equal_flops_line``: one line, how many of the "MoE against the dense FFN of its FLOPs" comparisons Holm resolves.
* ``lead_shrink_family`` / ``lead_shrink_lines``: does the MoE's lead over its dense twin shrink from 300 to 3,000
  steps? Per seed, ``lead = loss(dense twin) − loss(MoE)``; the change ``lead(3,000) − lead(300)`` is tested with
  the paired t against 0 (``helpers.stats.paired_difference`` of the two leads), Holm's step-down over the four
  MoE–twin pairings.
* ``long_run_fold``: the 3,000-step reading in two shown lines (each MoE against its twin at the twin's best rate),
  with the four 3,000-step rows of section 4's family, the lead-shrinks table and the unstable width-19 seeds folded.
* ``steps_to_dense_loss`` / ``steps_saved_figure``: the per-step gain as steps saved (the first step at which the
  MoE's mean curve reaches the dense twin's loss after a budget), on the long run's curves at four budgets, beside
  Switch Transformer's 7.5× at scale.
* ``race_audit``: section 4.1's checks (sweeps, trainable embeddings, live reruns of four shipped runs, another CPU
  kernel, fresh seeds, the full Holm table) run once; the notebook shows a few summary lines and folds every table
  into an HTML ``<details>`` block (``RaceAudit._repr_html_``). ``text/plain`` is the summary alone.
"""

from __future__ import annotations

import dataclasses
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from helpers.fact_lookup import FactLookup, LookupData, build_lookup, lookup_loss_and_accuracy, train_lookup
from helpers.moe_configs import SWITCH_STEP_BASIS
from helpers.moe_long_run import LongRun
from helpers.moe_race import (ARMS, BALANCE_NAMES, BALANCE_PAIRS, FRESH_SEEDS_PATH, KERNEL_RERUN_PATH,
                              RACE_FRESH_SEEDS_PATH, RACE_PAIRS, Race, convergence_lines, load_family, load_race,
                              loss_family, rerun_lines, sweep_summary_lines, top1_label)
from helpers.precision import bound
from helpers.stats import PairedDifference, Verdict, holm, holm_table, paired_difference

__all__ = ["TWIN_PAIRS", "Folded", "equal_flops_line", "equal_flops_split", "lead_shrink_family", "lead_shrink_lines", "long_run_fold",
           "RaceAudit", "balance_verdicts", "fresh_deepseekmoe_lines", "race_audit",
           "steps_to_dense_loss", "steps_saved_figure", "STEPS_SAVED_KEYS",
           "STEPS_SAVED_CONTROL"]

#: The 3,000-step pairings: (MoE key, dense twin key) in ``helpers.moe_long_run.load_ten_seeds()``.
TWIN_PAIRS: tuple[tuple[str, str], ...] = (
    ("MoE, lr 0.02", "dense, width 11, lr 0.04"), ("MoE, lr 0.02", "dense, width 11, lr 0.08"),
    ("MoE, top-2, lr 0.04", "dense, width 19, lr 0.04"), ("MoE, top-2, lr 0.04", "dense, width 19, lr 0.08"))
#: The race's comparisons of an MoE against the dense FFN of its FLOPs per fact (``helpers.moe_race.RACE_PAIRS``).
EQUAL_FLOPS: tuple[tuple[str, str], ...] = (
    ("MoE", "dense, width 11"), ("MoE, top-2", "dense, width 19"), ("fine-grained", "dense, width 19"),
    ("DeepSeekMoE", "dense, width 19"))
SECTION_4_ARMS: tuple[str, ...] = tuple(ARMS)[:8]


def _family_makeup(verdicts: Sequence[Verdict]) -> str:
    """What section 4's family is made of: the race's rows, the 3,000-step rows, DeepSeekMoE at fixed rates."""
    parts = {"long": [v for v in verdicts if v.name.startswith("3,000 steps")],
             "fixed": [v for v in verdicts if "DeepSeekMoE, lr" in v.name]}
    parts["race"] = [v for v in verdicts if v not in parts["long"] and v not in parts["fixed"]]

    def seeds(vs):
        return "/".join(sorted({str(len(v.comparison.diffs)) for v in vs}))

    return (f"the {len(verdicts)}: the race's {len(parts['race'])} (100 and 300 steps, {seeds(parts['race'])} "
            f"seeds), {len(parts['long'])} at 3,000 steps ({seeds(parts['long'])} seeds), {len(parts['fixed'])} of "
            f"DeepSeekMoE at rates fixed in advance (300 steps, {seeds(parts['fixed'])} seeds; 4.1)")


def equal_flops_line(verdicts: Sequence[Verdict]) -> str:
    """One line: of the race's MoE − dense-of-equal-FLOPs rows (both budgets) in ``verdicts`` (``holm`` over
    section 4's family), how many are resolved lower, and the family's size and resolved count (its make-up is
    folded by ``equal_flops_split``)."""
    names = {f"{s:>3} steps: {a} − {b}" for s in (100, 300) for a, b in EQUAL_FLOPS}
    rows = [v for v in verdicts if v.name in names]
    lower = sum(v.verdict == "lower" for v in rows)
    return (f"each MoE against the dense FFN of its FLOPs per fact, 100 and 300 steps: lower in {lower} of "
            f"{len(rows)} (Holm over section 4's {len(verdicts)} comparisons, {sum(v.resolved for v in verdicts)} "
            f"resolved)")


def equal_flops_split(verdicts: Sequence[Verdict]) -> tuple[list[Verdict], "Folded"]:
    """Section 4's lesson first: the race's MoE − dense-of-equal-FLOPs verdicts (both budgets, in family order) and,
    folded, the family's make-up and every other verdict of ``verdicts`` (one line each; the first line, shown,
    their count and resolved count)."""
    names = {f"{s:>3} steps: {a} − {b}" for s in (100, 300) for a, b in EQUAL_FLOPS}
    eight = [v for v in verdicts if v.name in names]
    rest = [dataclasses.replace(v, name=top1_label(v.name)) for v in verdicts if v.name not in names]
    width = max(len(v.name) for v in rest)
    head = (f"the family's other {len(rest)} comparisons (controls, granularity, width 64, 3,000 steps, DeepSeekMoE "
            f"at fixed rates): {sum(v.resolved for v in rest)} resolved")
    return eight, Folded([head, _family_makeup(verdicts)] + [v.line(width=width, unit=" nats", compact=True)
                                                             for v in rest], shown=1, label="each of them (click)")


def lead_shrink_family(long: LongRun, pairs: Sequence[tuple[str, str]] = TWIN_PAIRS, start: int = 300,
                       end: int = 3000) -> dict[str, PairedDifference]:
    """Per pairing, seed by seed: ``lead(end) − lead(start)``, ``lead = loss(twin) − loss(MoE)`` (nats); negative:
    the lead shrank. ``long.loss[key]`` is ``(len(marks), seeds)``; each value is a ``PairedDifference`` over the
    seeds."""
    i, j = long.marks.index(start), long.marks.index(end)
    family = {}
    for moe, twin in pairs:
        lead = long.loss[twin] - long.loss[moe]                 # (marks, seeds)
        family[f"{moe.replace(', lr', ' (lr')}) vs {twin.removeprefix('dense, ')}"] = paired_difference(lead[j],
                                                                                                      lead[i])
    return family


def lead_shrink_lines(long: LongRun, pairs: Sequence[tuple[str, str]] = TWIN_PAIRS, start: int = 300,
                      end: int = 3000) -> list[str]:
    """The lead-shrinks verdict as printed lines: per pairing the mean lead at ``start`` and ``end``, the seeds
    where it shrank, t against its Holm threshold (family: the pairings) and "shrank" or "not resolved"."""
    family = lead_shrink_family(long, pairs, start, end)
    i, j = long.marks.index(start), long.marks.index(end)
    width = max(map(len, family)) + 2
    rows = [f"does the lead shrink from {start:,} to {end:,} steps? paired t over {len(long.seeds)} seeds, Holm over "
            f"{len(family)}"]
    for (moe, twin), v in zip(pairs, holm(family)):
        lead = (long.loss[twin] - long.loss[moe]).mean(1)
        c = v.comparison
        word = {"lower": "shrank", "higher": "grew"}.get(v.verdict, v.verdict)
        rows.append(f"  {v.name:<{width}}lead {float(lead[i]):.2f} → {float(lead[j]):.2f} nats, smaller in "
                    f"{c.lower:>2} of {c.n}, t {c.t:+6.2f} vs {v.threshold:.2f}  → {word}")
    return rows


def long_run_fold(verdicts: Sequence[Verdict], long: LongRun, shown: Sequence[int] = (0, 2)) -> "Folded":
    """Section 4's 3,000-step reading. ``verdicts``: ``holm`` over section 4's family (it holds the rows
    ``"3,000 steps: <MoE> − <twin>"``); ``long``: ``load_ten_seeds()``. Shown: for ``TWIN_PAIRS[i]``, ``i`` in
    ``shown``, the lead (``loss(twin) − loss(MoE)``, seed mean, nats) at 300 and 3,000 steps, the two losses at
    3,000 and the 3,000-step verdict. Folded: the four 3,000-step rows, ``lead_shrink_lines`` and, per seed, width 19 at lr 0.08 (its loss
    and share of facts right after 3,000 steps: the seeds behind the figure's wide band)."""
    by_name = {v.name: v for v in verdicts}
    i, j = long.marks.index(300), long.marks.index(3000)
    lines, rows = [], []
    width = max(len(f"3,000 steps: {m} − {t.removeprefix('dense, ')}") for m, t in TWIN_PAIRS) + 2
    for n, (moe, twin) in enumerate(TWIN_PAIRS):
        v = by_name[f"3,000 steps: {moe} − {twin.removeprefix('dense, ')}"]
        c = v.comparison
        rows.append(f"  {v.name:<{width}}{c.mean:+.3f} nats  lower in {c.lower:>2} of {c.n}  t {c.t:+6.2f} vs "
                    f"{v.threshold:.2f}  → {v.verdict}")
        if n in shown:
            lead = (long.loss[twin] - long.loss[moe]).mean(1)
            word = "resolved" if v.verdict == "lower" else "not resolved"
            ends = f"{float(long.loss[moe][j].mean()):.3f} and {float(long.loss[twin][j].mean()):.3f}"
            name = moe.replace("MoE, top-2", "top-2 MoE") if "top-2" in moe else moe.replace("MoE", "top-1 MoE", 1)
            lines.append(f"{name} vs {twin.removeprefix('dense, ')}: lead {float(lead[i]):.2f} nats at 300 steps, "
                         f"{float(lead[j]):.2f} at 3,000 (losses {ends}; the MoE lower in {c.lower} of {c.n} seeds, "
                         f"{word})")
    key = "dense, width 19, lr 0.08"
    per_seed = [f"{key}, after 3,000 steps, per seed: loss " + " ".join(f"{float(x):.3f}" for x in long.loss[key][j]),
                f"{'':>{len(key) + 29}}right " + " ".join(f"{float(x):>5.0%}" for x in long.right[key][j])]
    return Folded(lines + ["3,000 steps in section 4's family (Holm over " f"{len(verdicts)}):"] + rows + [""]
                  + lead_shrink_lines(long) + [""] + per_seed, shown=len(lines), label="every 3,000-step verdict (click)")


@dataclass
class RaceAudit:
    """Section 4.1's checks, run once. ``summary``: the lines shown (also ``text/plain``); ``tables``: every
    table, folded (HTML ``<details>``); ``deepseekmoe``: the DeepSeekMoE retrained live (lr 0.02, seed 0, 100
    steps); ``bar``: the finished progress bar of the live reruns."""

    summary: list[str]
    tables: list[str]
    deepseekmoe: FactLookup
    bar: str = ""

    def __repr__(self) -> str:
        return "\n".join(self.summary)

    def _repr_html_(self) -> str:
        def pre(lines: Sequence[str]) -> str:
            return "<pre>" + html.escape("\n".join(lines)) + "</pre>"
        return (pre(self.summary) + "<details><summary>every table behind these lines (click)</summary>"
                + pre(self.tables) + "</details>")


@dataclass
class Folded:
    """Lines shown with the rest folded: ``Folded(lines, shown=1)`` displays ``lines[:shown]`` (also
    ``text/plain``) and puts the others in an HTML ``<details>`` block, as ``RaceAudit`` does."""

    lines: list[str]
    shown: int = 1
    label: str = "the full table (click)"

    def __repr__(self) -> str:
        return "\n".join(self.lines[:self.shown])

    def _repr_html_(self) -> str:
        def pre(lines: Sequence[str]) -> str:
            return "<pre>" + html.escape("\n".join(lines)) + "</pre>"
        return (pre(self.lines[:self.shown]) + f"<details><summary>{html.escape(self.label)}</summary>"
                + pre(self.lines[self.shown:]) + "</details>")



def steps_to_dense_loss(moe: torch.Tensor, target: float) -> int | None:
    """The first step (counted from 1) at which the MoE's mean curve ``moe`` reaches the dense arm's loss ``target``
    (``None`` if it never does)."""
    hits = (moe <= target).nonzero()
    return int(hits[0]) + 1 if len(hits) else None


#: The long run's two keys the steps-saved figure reads (``helpers.moe_long_run``): the MoE, its dense twin.
STEPS_SAVED_KEYS: tuple[str, str] = ("MoE, lr 0.02", "dense, width 11, lr 0.04")
#: The dense control read by the same count: width 64, all 1,536 expert parameters active, at its tuned 300-step
#: rate in the race (0.08), as the MoE runs at its own (0.02).
STEPS_SAVED_CONTROL = "dense, width 64, lr 0.08"


def steps_saved_figure(long: LongRun, curves: dict[str, tuple[torch.Tensor, list[int]]] | None = None,
                       marked: Sequence[int] = (300, 3_000), printed: Sequence[int] = (300, 1_000, 3_000),
                       colors: Sequence[str] = ("#0072B2", "#D55E00")):
    """Steps to the dense model's loss, two panels. Left: the long run's mean curves (``helpers.moe_long_run
    .load_curves``: the same runs as ``long``'s seeds) of the top-1 MoE (lr 0.02, ``colors[0]``) and width 11
    (lr 0.04, ``colors[1]``, drawn lighter), log-x, and, if the curves hold it, the dense control
    ``STEPS_SAVED_CONTROL`` as a thin grey line; width 11's loss after each step of ``long.marks`` is its mean over
    ``long``'s seeds at that mark (as the long run reports it), and an arm reaches it at the first step its mean
    curve is at or below it. For each budget of ``marked``, a dashed line at that loss from the MoE's step to the
    budget. Right: Switch Transformer's 64-expert Switch-Base (``colors[0]``) against T5-Base (black, as
    ``helpers.moe_configs.switch_figure``; section 3.1, ``SWITCH_STEP_BASIS``). Returns the figure and one line:
    the steps saved at each budget of ``printed`` (the budgets the long run's rates were chosen for), by the MoE
    and by the control."""
    import matplotlib.pyplot as plt

    from helpers.moe_long_run import load_curves

    curves = load_curves() if curves is None else curves
    (moe, seeds), (dense, _) = curves[STEPS_SAVED_KEYS[0]], curves[STEPS_SAVED_KEYS[1]]
    if [int(s) for s in seeds] != [int(s) for s in long.seeds]:
        raise ValueError(f"the curves' seeds {seeds} are not the long run's {long.seeds}")
    targets = {b: float(long.loss[STEPS_SAVED_KEYS[1]][i].mean()) for i, b in enumerate(long.marks)}
    reached = {b: steps_to_dense_loss(moe, t) for b, t in targets.items()}
    control = curves.get(STEPS_SAVED_CONTROL)
    if control is not None and [int(s) for s in control[1]] != [int(s) for s in long.seeds]:
        raise ValueError(f"the control's seeds {control[1]} are not the long run's {long.seeds}")
    experts, moe_step, dense_step = SWITCH_STEP_BASIS
    fig, (toy, switch) = plt.subplots(1, 2, figsize=(11.5, 3.8), gridspec_kw={"width_ratios": [1.6, 1]})
    steps = torch.arange(1, len(dense) + 1).numpy()
    toy.plot(steps, dense.numpy(), color=colors[1], lw=0.7, alpha=0.7, label="dense, width 11 (lr 0.04)")
    toy.plot(steps, moe.numpy(), color=colors[0], lw=1.2, label="top-1 MoE, 8 experts (lr 0.02)")
    if control is not None:
        toy.plot(steps, control[0].numpy(), color="#999999", lw=0.7,
                 label="dense, width 64: all 1,536 expert parameters, 6× the FLOPs (lr 0.08)")
    for b in marked:
        target, hit = targets[b], reached[b]
        toy.plot([hit, b], [target, target], color="#333333", ls="--", lw=1.2)
        toy.plot([b], [target], "o", color=colors[1], ms=6, mec="white")
        toy.plot([hit], [target], "o", color=colors[0], ms=6, mec="white")
        toy.annotate(f"step {hit} vs {b:,}: {b / hit:.1f}×", (hit, target), xytext=(-7, 0),
                     textcoords="offset points", ha="right", va="center", fontsize=8.5)
    toy.set(xscale="log", yscale="log", xlabel="training step (log scale)", ylabel="answer loss (nats, log scale)",
            xlim=(10, 1.2 * len(dense)), ylim=(0.003, 6))
    toy.set_yticks([0.01, 0.1, 1], ["0.01", "0.1", "1"])
    toy.set_xticks([10, 100, 1_000, 3_000], ["10", "100", "1,000", "3,000"])
    toy.minorticks_off()
    toy.legend(frameon=False, fontsize=8, loc="lower left")
    toy.set_title(f"the toy, mean of seeds {seeds[0]}–{seeds[-1]}: steps to width 11's loss", fontsize=10)
    values = [dense_step / 1000, moe_step / 1000]
    switch.barh([1, 0], values, color=["#000000", colors[0]], height=0.6)
    for y, v in zip([1, 0], values):
        switch.annotate(f"{v:,.0f}k", (v, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=9)
    switch.set_yticks([1, 0], ["T5-Base", f"Switch-Base,\n{experts} experts"])
    switch.set_xlim(0, 1.2 * values[0])
    switch.set_title(f"Switch Transformer (C4): to T5-Base's {dense_step // 1000}k-step loss,\n"
                     f"the MoE needs {values[0] / values[1]:.1f}× fewer steps", fontsize=10)
    switch.set_xlabel("training steps (thousands)")
    fig.suptitle("Steps to reach the dense model's loss, at the same FLOPs per token", fontsize=11)
    fig.tight_layout()

    def saved(hits: dict[int, int | None]) -> str:
        return ", ".join("never" if hits[b] is None else f"{b / hits[b]:.1f}×" for b in printed)

    line = (f"width 11's loss after {', '.join(f'{b:,}' for b in printed)} steps: the top-1 MoE reaches it in "
            f"{saved(reached)} fewer steps")
    if control is not None:
        line += (f"; dense width 64, all its 1,536 parameters active, in "
                 f"{saved({b: steps_to_dense_loss(control[0], targets[b]) for b in printed})} fewer")
    return fig, line


def balance_verdicts(race: Race, rerun: Race, fresh: Race) -> Folded:
    """Section 5's family (``BALANCE_PAIRS`` on the late load, then on the loss; Holm over all), shown as its
    headline and one line on how it held on ``rerun`` (another CPU kernel) and ``fresh`` (other seeds); folded: the
    full table and the verdicts that moved."""
    family = {**load_family(race, BALANCE_PAIRS, names=BALANCE_NAMES),
              **loss_family(race, BALANCE_PAIRS, names=BALANCE_NAMES)}
    moved = rerun_lines(race, rerun, BALANCE_PAIRS, loads=True, fresh=fresh, changed_only=True, names=BALANCE_NAMES)
    table = holm_table(family).splitlines()
    kernel, runs, fresh_seeds = moved[-1].split("; ")
    seeds = fresh.runs[fresh.budgets[0]][BALANCE_PAIRS[0][0]].seeds
    held = (f"verdicts unchanged on another CPU kernel: {kernel.removeprefix('same verdict in ')}; on seeds "
            f"{seeds[0]}–{seeds[-1]}: {fresh_seeds.removeprefix('on the fresh seeds, same verdict in ')} (which: folded)")
    return Folded([table[0], held] + table[1:] + ["", f"the verdicts that moved ({runs} on the other kernel):"]
                  + moved[:-1], shown=2)


def _live_reruns(data: LookupData, race: Race, long: LongRun, dsm: LongRun) -> tuple[list[str], FactLookup, str]:
    """Four shipped runs trained again for 100 steps (seed 0): lines, the DeepSeekMoE model, the finished bar."""
    from helpers.progress import progress

    buffer = io.StringIO()                      # the bar is drawn once, finished (see RaceAudit.bar)
    jobs = [("long run", "dense, width 11", 0.04, long), ("long run", "MoE", 0.02, long),
            ("race", "MoE, top-2", None, race), ("fixed-rate run", "DeepSeekMoE", 0.02, dsm)]
    lines, gaps, model = [], [], None
    bar = progress(jobs, desc="four shipped runs again, 100 steps each", file=buffer,
                   ascii=False)
    for kind, arm, lr, source in bar:
        if kind == "race":
            stored = source.runs[100][arm]
            model = build_lookup(data, ARMS[arm], d_model=8, seed=stored.seeds[0])
            _, loads, _ = train_lookup(model, data, steps=100, lr=stored.lr)
            live, _ = lookup_loss_and_accuracy(model, data)
            gap = abs(live - float(stored.final()[0]))
            rerouted = int((loads != stored.first_loads).any(1).sum())
            lines.append(f"  race, {arm}, lr {stored.lr:g}, seed {stored.seeds[0]}: |here − file| {bound(gap, 0.01)}"
                         f" nats; steps routed differently: {rerouted} of 100")
        else:
            model = build_lookup(data, ARMS[arm], d_model=8, seed=source.seeds[0])
            _, _, live = train_lookup(model, data, steps=100, lr=lr, eval_at=[100])
            gap = abs(live[100][0] - float(source.loss[f"{arm}, lr {lr:g}"][source.marks.index(100), 0]))
            lines.append(f"  {kind}, {arm}, lr {lr:g}, seed {source.seeds[0]}: |here − file| {bound(gap, 0.01)} nats")
        gaps.append(gap)
    print(str(bar))                             # one finished bar
    summary = f"live reruns (seed 0, 100 steps): {sum(g < 0.01 for g in gaps)} of {len(gaps)} within 0.01 nats of their files"
    return [summary] + lines, model, str(bar)


def fresh_deepseekmoe_lines(fresh: Race, fixed: LongRun | None = None, unstable: float = 0.7) -> list[str]:
    """DeepSeekMoE against width 19 after 300 steps on the fresh seeds of ``fresh`` (``RACE_FRESH_SEEDS_PATH``): at
    its tuned rate (from ``fresh``) and at the rate fixed in advance of ``fixed`` (default: the shipped
    ``DEEPSEEK_300_FRESH_PATH``, the same seeds), Holm over these two; and how many tuned-rate runs end above
    ``unstable`` nats (diverged: the seeds' other runs end near 0.1)."""
    from helpers.moe_long_run import DEEPSEEK_300_FRESH_PATH, load_long_run

    fixed = fixed if fixed is not None else load_long_run(DEEPSEEK_300_FRESH_PATH)
    tuned, dense = fresh.runs[300]["DeepSeekMoE"], fresh.runs[300]["dense, width 19"]
    if list(fixed.seeds) != list(dense.seeds):
        raise ValueError("the fixed-rate run must have the fresh race's seeds")
    (key, loss), = fixed.loss.items()
    family = {f"at its tuned lr {tuned.lr:g}": paired_difference(tuned.final(), dense.final()),
              f"at lr {key.split('lr ')[-1]}, fixed in advance": paired_difference(loss[-1], dense.final())}
    width = max(map(len, family)) + 2
    rows = [f"DeepSeekMoE − width 19 (lr {dense.lr:g}) on seeds {dense.seeds[0]}–{dense.seeds[-1]}, 300 steps, "
            f"Holm over these {len(family)}:"]
    for v in holm(family):
        c = v.comparison
        rows.append(f"  {v.name:<{width}}{c.mean:+.3f} nats, lower in {c.lower:>2} of {c.n}, t {c.t:+6.2f} vs "
                    f"{v.threshold:.2f} → {v.verdict}")
    above = int((tuned.final() > unstable).sum())
    rows.append(f"  DeepSeekMoE's runs at lr {tuned.lr:g} ending above {unstable} nats: {above} of {tuned.final().numel()}"
                f" (at lr {key.split('lr ')[-1]}: {int((loss[-1] > unstable).sum())})")
    return rows


def _fixed_rate_line(rows: list[str]) -> str:
    """``fresh_deepseekmoe_lines``'s fixed-rate verdict in words (its t and threshold stay in the fold)."""
    row = rows[2]
    rate = row.split("at lr ")[1].split(",")[0]
    seeds = row.split("lower in ")[1].split(",")[0].strip()
    word = "resolved" if row.endswith("→ lower") else "not resolved"
    return (f"  at lr {rate}, fixed in advance, DeepSeekMoE is lower than width 19 in {seeds} of those seeds "
            f"({word}; its t folded)")


def race_audit(data: LookupData, race: Race, long: LongRun, dsm: LongRun,
               section4: dict[str, PairedDifference]) -> RaceAudit:
    """Run section 4.1's checks: ``race`` (``load_race()``), ``long`` (``load_ten_seeds()``), ``dsm`` (DeepSeekMoE
    at fixed rates), ``section4`` (``section_family``: the race's 18 comparisons first). Trains four shipped runs
    again live (about 4 s)."""
    arms = list(SECTION_4_ARMS)
    trainable = {arm: float(loss.mean(1).min()) for arm, loss in race.trainable.loss.items()}
    live, model, bar = _live_reruns(data, race, long, dsm)
    rerun, fresh = load_race(KERNEL_RERUN_PATH), load_race(RACE_FRESH_SEEDS_PATH)
    rest = dict(list(section4.items())[18:])       # the family's other 8 rows, judged in every column
    kernel = rerun_lines(race, rerun, RACE_PAIRS, fresh=fresh, changed_only=True, extra=rest)
    sweeps = sweep_summary_lines(race, arms)
    same_kernel, _, same_fresh = kernel[-1].split("; ")
    ends = sweeps[0].split(": ")[-1]
    theirs = loss_family(fresh, RACE_PAIRS)
    resolved = [v for v in holm(section4) if v.name in theirs and v.resolved]
    flipped = [v.name for v in resolved if (v.comparison.mean > 0) != (theirs[v.name].mean > 0)]
    dsm_fresh = fresh_deepseekmoe_lines(fresh)
    summary = [
        f"the race's {len(theirs)} verdicts unchanged on another CPU kernel: "
        f"{same_kernel.removeprefix('same verdict in ')}; on seeds 300–319: "
        f"{same_fresh.removeprefix('on the fresh seeds, same verdict in ')} (which: folded)",
        f"of the {len(resolved)} resolved, the mean changes sign on seeds 300–319 in {len(flipped)}: "
        f"{'; '.join(flipped) or 'none'}", _fixed_rate_line(dsm_fresh)]
    tables_head = ["DeepSeekMoE on the fresh seeds, at its tuned rate and at a rate fixed in advance:"] + dsm_fresh + [""]
    checks = [f"tuned rates at an end of the grid: {ends}; live reruns within 0.01 nats of their files: "
              f"{live[0].split(': ')[-1].split(' within')[0]}", ""]
    per_seed = [f"{arm}, answer loss per seed after 3,000 steps: " + " ".join(f"{float(v):.3f}"
                                                                              for v in long.loss[arm][-1])
                for arm in ("MoE, top-2, lr 0.04", "dense, width 19, lr 0.04")]
    tables = (tables_head + checks + ["trainable embeddings, best rate, 100 steps: " + ", ".join(f"{a} {v:.3f}"
                                                                          for a, v in trainable.items()) + " nats"]
              + sweeps + [""] + live + [""] + convergence_lines(race, arms)
              + ['("last fifth": the loss\'s relative change over the run\'s last fifth; "right": facts answered right)',
                 ""] + long.sweep_lines() + [""] + long.lines() + per_seed + ["", "the same seeds on the default "
                 "CPU kernel, and seeds 300–319, at the same rates (rows whose verdict differs):"] + kernel
              + ["", holm_table(section4, unit=" nats", digits=3)])
    return RaceAudit(summary, tables, model, bar)
