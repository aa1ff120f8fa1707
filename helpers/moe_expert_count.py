"""Notebook 05's expert-count sweep: more experts, the same expert work per fact, on notebook 07's fact lookup.

Every arm is notebook 07's race MoE (d = 8, top-1 experts of width 8, balancing α = 0.1) with E = 1, 2, 4, 8 or
16 experts: each fact runs one expert of width 8 whatever E is, so the FLOPs per fact grow only with the router.
100 steps at the race MoE's 100-step rate (8e-2) for every E, seeds 0-9; the answer loss over every fact is kept.

    python -m helpers.moe_expert_count --results     # writes helpers/data/moe_expert_count.json (a few minutes)

A single run is sensitive to the CPU kernel (E = 8 and 16 move by up to 0.18 nats between ATEN_CPU_CAPABILITY=avx2
and =default), so the file also keeps seed 0 of every E as trained on each kernel, for the notebook's live check:

    ATEN_CPU_CAPABILITY=avx2 python -m helpers.moe_expert_count --seed0-kernel
    ATEN_CPU_CAPABILITY=default python -m helpers.moe_expert_count --seed0-kernel
    ATEN_CPU_CAPABILITY=avx512 python -m helpers.moe_expert_count --seed0-kernel   # on a CPU with AVX-512

The dense line: for each E, a dense SwiGLU FFN with at least the MoE's active parameters (one expert, 3·d·8, plus
the router, d·E: width ceil(8 + E/3), so 9, 9, 10, 11, 14), seeds 0-9, at 4e-2, 8e-2, 1.6e-1 and 3.2e-1 (the
rates around those that won notebook 07's 100-step sweeps for its dense arms); the notebook takes each width's best
rate on these seeds, which favours the dense line:

    python -m helpers.moe_expert_count --dense       # adds "dense" to helpers/data/moe_expert_count.json

The main sweep ("loss") was trained on the AVX2 kernel. At this rate E = 8 and E = 16 sit near the edge of
stability, and whether E = 16 beats E = 8 depends on the kernel, so the file also keeps those two arms, ten seeds,
as trained on the default kernel (the notebook prints that row from both kernels), and seed 0 of the dense FFN of
E = 8's total parameters on that kernel (run --dense-total first):

    ATEN_CPU_CAPABILITY=default python -m helpers.moe_expert_count --kernel-sweep   # adds "loss_by_kernel"

The upper line: a dense SwiGLU FFN with at least E = 8's total parameters (eight experts plus the router:
width ceil(8·8 + 8/3) = 67), seeds 0-9, at the same four rates; the notebook takes its best rate:

    python -m helpers.moe_expert_count --dense-total  # adds "dense_total"

The same three arms (E = 8; the dense FFNs of its active and of its total parameters, every rate) trained 3 times
longer, 300 steps, seeds 0-9, on the main sweep's kernel (``long_gap_line``: the share of the gap at 300 steps):

    ATEN_CPU_CAPABILITY=avx2 python -m helpers.moe_expert_count --long   # writes helpers/data/moe_expert_count_300.json (2 min)

Section 10 scores the E = 8 runs at capacity factors 2, 1.25 and 1 against dropless (``scored_run``):

    ATEN_CPU_CAPABILITY=avx2 python -m helpers.moe_expert_count --capacity   # writes helpers/data/moe_lookup_capacity.json
"""
from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from helpers.costs import measure_flops, torch_threads
from helpers.fact_lookup import build_lookup, lookup_data, lookup_loss_and_accuracy, train_lookup
from helpers.moe import MoE
from helpers.moe_runs import read_results, write_results
from helpers.stats import Comparison, PairedDifference, holm, paired_difference

EXPERT_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16)
SEEDS: tuple[int, ...] = tuple(range(10))
STEPS, LR, D_MODEL = 100, 8e-2, 8
DENSE_LRS: tuple[float, ...] = (4e-2, 8e-2, 1.6e-1, 3.2e-1)
PATH = Path(__file__).parent / "data" / "moe_expert_count.json"
COMMAND = "python -m helpers.moe_expert_count --results"
KERNEL_COUNTS: tuple[int, ...] = (8, 16)
TOTAL_E = 8


def spec(n_experts: int) -> dict:
    """The race MoE's FFN with ``n_experts`` top-1 experts of width 8."""
    return {"ffn": "moe", "n_experts": n_experts, "top_k": 1, "d_ff": 8, "balance_coef": 0.1, "z_coef": 0.0}


def expert_count_run(n_experts: int, seed: int, data=None) -> float:
    """One run: the answer loss (nats) over every fact after ``STEPS`` steps, on one CPU thread as in the notebooks
    (a run this short at this rate moves with the thread count and the CPU kernel)."""
    data = lookup_data() if data is None else data
    with torch_threads(1):
        model = build_lookup(data, spec(n_experts), d_model=D_MODEL, seed=seed)
        train_lookup(model, data, steps=STEPS, lr=LR)
        return lookup_loss_and_accuracy(model, data)[0]


def run_sweep(seeds: Sequence[int] = SEEDS, counts: Sequence[int] | None = None) -> dict:
    """Every E's answer loss for every seed, rounded to 5 decimals: {"loss": {E: {seed: loss}}}."""
    data, counts = lookup_data(), EXPERT_COUNTS if counts is None else counts
    return {"loss": {str(e): {str(s): round(expert_count_run(e, s, data), 5) for s in seeds} for e in counts}}


def load_expert_count(path: str | Path | None = None) -> dict:
    """The shipped sweep (or the file at ``path``)."""
    return read_results(PATH if path is None else path, "expert-count runs", COMMAND)


def losses(study: dict, n_experts: int) -> torch.Tensor:
    """(seeds,) float64 answer losses of one E, in seed order."""
    table = study["loss"][str(n_experts)]
    return torch.tensor([table[s] for s in sorted(table, key=int)], dtype=torch.float64)


def seed0_reference(study: dict, n_experts: int) -> float | None:
    """Seed 0's answer loss for ``n_experts`` as trained on this process's CPU kernel (see the module docstring),
    or None when the file holds no run made on this kernel (it holds AVX2, DEFAULT and AVX512)."""
    runs = study["seed0_by_kernel"].get(torch.backends.cpu.get_cpu_capability())
    return None if runs is None else runs[str(n_experts)]


def flops_per_fact(n_experts: int, n_facts: int = 64) -> int:
    """Forward FLOPs per fact of the sweep's MoE layer with ``n_experts`` (``FlopCounterMode``): one expert of
    width 8 (the same for every E) plus the router, 2·d·E."""
    layer, x = MoE(D_MODEL, n_experts, 1, d_ff=8).eval(), torch.zeros(n_facts, D_MODEL)
    with torch.no_grad():
        return measure_flops(lambda: layer(x)) // n_facts


def doubling_family(study: dict) -> dict[str, PairedDifference]:
    """Each doubling of E against the count before it, paired by seed: one Holm family."""
    counts = [int(e) for e in study["loss"]]
    return {f"E = {b} − E = {a}": paired_difference(losses(study, b), losses(study, a))
            for a, b in zip(counts, counts[1:])}


def dense_width(n_experts: int) -> int:
    """The width of a dense SwiGLU FFN with at least the active parameters of the sweep's MoE with ``n_experts``:
    3·d·w >= 3·d·8 + d·E, so w = ceil(8 + E/3)."""
    return math.ceil(8 + n_experts / 3)


def dense_run(width: int, seed: int, lr: float, data=None) -> float:
    """One dense run of ``width``: the answer loss (nats) after ``STEPS`` steps at ``lr``, on one CPU thread."""
    data = lookup_data() if data is None else data
    with torch_threads(1):
        model = build_lookup(data, {"ffn": "dense", "d_ff": width}, d_model=D_MODEL, seed=seed)
        train_lookup(model, data, steps=STEPS, lr=lr)
        return lookup_loss_and_accuracy(model, data)[0]


def run_dense(seeds: Sequence[int] = SEEDS) -> dict:
    """Every dense width's answer loss at every rate of ``DENSE_LRS``: {width: {lr: {seed: loss}}}."""
    data, widths = lookup_data(), sorted({dense_width(e) for e in EXPERT_COUNTS})
    return {str(w): {f"{lr:g}": {str(s): round(dense_run(w, s, lr, data), 5) for s in seeds} for lr in DENSE_LRS}
            for w in widths}


def total_width(n_experts: int) -> int:
    """The width of a dense SwiGLU FFN with at least the total parameters of the sweep's MoE with ``n_experts``:
    3·d·w >= E·3·d·8 + d·E, so w = ceil(8·E + E/3)."""
    return math.ceil(8 * n_experts + n_experts / 3)


def best_rate(by_lr: dict) -> tuple[torch.Tensor, float]:
    """The (seeds,) float64 losses at the rate with the lowest mean, and that rate, from {lr: {seed: loss}}."""
    table = {lr: torch.tensor([runs[s] for s in sorted(runs, key=int)], dtype=torch.float64)
             for lr, runs in by_lr.items()}
    lr = min(table, key=lambda r: float(table[r].mean()))
    return table[lr], float(lr)


def total_losses(study: dict) -> tuple[torch.Tensor, float]:
    """The dense FFN with E = 8's total parameters at its best rate: (seeds,) losses and the rate."""
    return best_rate(study["dense_total"][str(total_width(TOTAL_E))])


def dense_losses(study: dict, n_experts: int) -> tuple[torch.Tensor, float]:
    """(seeds,) float64 answer losses of the dense FFN matched to ``n_experts`` at its best rate (lowest mean over
    the file's seeds), and that rate."""
    by_lr = study["dense"][str(dense_width(n_experts))]
    table = {lr: torch.tensor([runs[s] for s in sorted(runs, key=int)], dtype=torch.float64)
             for lr, runs in by_lr.items()}
    lr = min(table, key=lambda r: float(table[r].mean()))
    return table[lr], float(lr)


def payoff_family(study: dict) -> dict[str, PairedDifference]:
    """The section's one question, one Holm family: each E's MoE against the dense FFN of its active parameters,
    then each doubling of E up to 8 against the count before it; all paired by seed. E = 16 against E = 8 is left
    out: its verdict depends on the CPU kernel (``kernel_line`` prints it from both)."""
    counts = [int(e) for e in study["loss"]]
    rows = {f"E = {e} − dense, width {dense_width(e)}": paired_difference(losses(study, e), dense_losses(study, e)[0])
            for e in counts}
    if "dense_total" in study:
        rows[f"E = {TOTAL_E} − dense, width {total_width(TOTAL_E)}"] = paired_difference(
            losses(study, TOTAL_E), total_losses(study)[0])
    doublings = {name: row for name, row in doubling_family(study).items() if name != "E = 16 − E = 8"}
    return {**rows, **doublings}


def total_seed0(study: dict) -> float | None:
    """Seed 0 of the dense FFN of E = 8's total parameters at its best rate, as trained on this process's CPU
    kernel (the main runs for AVX2, ``dense_total_seed0_by_kernel`` for others), or None when the file has none."""
    lr = total_losses(study)[1]
    stored = {"AVX2": study["dense_total"][str(total_width(TOTAL_E))][f"{lr:g}"]["0"],
              **study.get("dense_total_seed0_by_kernel", {})}
    return stored.get(torch.backends.cpu.get_cpu_capability())


def total_line(study: dict) -> str:
    """E = 8 between the dense FFNs of its active and of its total parameters (means of the file's seeds), and the
    share of the gap between those two it closes."""
    active, total = float(dense_losses(study, TOTAL_E)[0].mean()), total_losses(study)
    moe = float(losses(study, TOTAL_E).mean())
    return (f"E = {TOTAL_E}, mean answer loss of ten seeds: dense FFN of its active parameters (width "
            f"{dense_width(TOTAL_E)}) {active:.2f}; the MoE {moe:.2f}; dense FFN of its total parameters (width "
            f"{total_width(TOTAL_E)}, best rate {total[1]:g}) {float(total[0].mean()):.2f}: the MoE closes "
            f"{(active - moe) / (active - float(total[0].mean())):.0%} of the gap")


LONG_STEPS = 300
LONG_PATH = Path(__file__).parent / "data" / "moe_expert_count_300.json"
LONG_COMMAND = "ATEN_CPU_CAPABILITY=avx2 python -m helpers.moe_expert_count --long"


def run_long(seeds: Sequence[int] = SEEDS, steps: int = LONG_STEPS) -> dict:
    """E = 8 and the dense FFNs of its active and total parameters (every rate of ``DENSE_LRS``), trained ``steps``
    steps on one CPU thread: {"loss": {"8": {seed: loss}}, "dense": {width: {lr: ...}}, "dense_total": {...}}."""
    data = lookup_data()

    def train(arm: dict, seed: int, lr: float) -> float:
        with torch_threads(1):
            model = build_lookup(data, arm, d_model=D_MODEL, seed=seed)
            train_lookup(model, data, steps=steps, lr=lr)
            return round(lookup_loss_and_accuracy(model, data)[0], 5)

    def dense(width: int) -> dict:
        return {str(width): {f"{lr:g}": {str(s): train({"ffn": "dense", "d_ff": width}, s, lr) for s in seeds}
                             for lr in DENSE_LRS}}

    return {"loss": {str(TOTAL_E): {str(s): train(spec(TOTAL_E), s, LR) for s in seeds}},
            "dense": dense(dense_width(TOTAL_E)), "dense_total": dense(total_width(TOTAL_E))}


def load_long(path: str | Path = LONG_PATH) -> dict:
    """The shipped 300-step runs (``run_long``)."""
    return read_results(path, "300-step expert-count runs", LONG_COMMAND)


def long_gap_line(study: dict) -> str:
    """``total_line`` for the 300-step runs: E = 8 between the dense FFNs of its active and total parameters (each
    at its best rate) and the share of the gap it closes, with the seeds where E = 8 beats the smaller one."""
    active, total = dense_losses(study, TOTAL_E), total_losses(study)
    moe = losses(study, TOTAL_E)
    a, t, m = float(active[0].mean()), float(total[0].mean()), float(moe.mean())
    steps = study["settings"]["steps"]
    return (f"after {steps} steps, mean of {len(moe)} seeds: dense FFN of its active parameters {a:.2f}; the MoE "
            f"{m:.2f} (below it in {int((moe < active[0]).sum())}/{len(moe)}); dense FFN of its total parameters "
            f"{t:.2f}: the MoE closes {(a - m) / (a - t):.0%} of the gap")


def kernel_losses(study: dict, kernel: str, n_experts: int) -> torch.Tensor:
    """(seeds,) answer losses of one E as trained on ``kernel`` ("AVX2" is the main sweep)."""
    if kernel == "AVX2":
        return losses(study, n_experts)
    table = study["loss_by_kernel"][kernel][str(n_experts)]
    return torch.tensor([table[s] for s in sorted(table, key=int)], dtype=torch.float64)


def kernel_line(study: dict) -> str:
    """E = 16 − E = 8, paired by seed, from the runs of each CPU kernel the file holds: one printable line, no
    verdict (the two kernels disagree on it)."""
    parts = []
    for kernel in ["AVX2", *study.get("loss_by_kernel", {})]:
        row = paired_difference(kernel_losses(study, kernel, 16), kernel_losses(study, kernel, 8))
        parts.append(f"{kernel} kernel {row.mean:+.3f}, lower in {row.lower}/{row.n}, t {row.t:+.2f}")
    moves = [float((kernel_losses(study, k, e) - losses(study, e)).abs().max())
             for k in study.get("loss_by_kernel", {}) for e in KERNEL_COUNTS]
    move = f" (one seed moves by up to {max(moves):.2f} nats between kernels)" if moves else ""
    return "E = 16 − E = 8, ten seeds trained on each CPU kernel: " + "; ".join(parts) + move


def figure(study: dict):
    """Answer loss against E: one grey line per seed, the mean in black; the dense line of the MoE's active
    parameters and the dense FFN of E = 8's total parameters (the AVX2 sweep; ``kernel_line`` prints the other)."""
    import matplotlib.pyplot as plt
    counts = [int(e) for e in study["loss"]]
    values = torch.stack([losses(study, e) for e in counts])          # (E values, seeds)
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    ax.plot(counts, values.numpy(), color="0.8", lw=0.8)
    mean = values.mean(1).numpy()
    ranked = [i for i, e in enumerate(counts) if e <= TOTAL_E]       # E above 8: the CPU kernels disagree
    ax.plot([counts[i] for i in ranked], mean[ranked], "o-", color="black", lw=2,
            label=f"MoE, mean of {values.shape[1]} seeds")
    beyond = [i for i, e in enumerate(counts) if e > TOTAL_E]
    if beyond:
        last = ranked[-1:] + beyond
        ax.plot([counts[i] for i in last], mean[last], ":", color="black", lw=1.5)
        ax.plot([counts[i] for i in beyond], mean[beyond], "o", mfc="white", mec="black", ms=7,
                label=f"E = {', '.join(str(counts[i]) for i in beyond)} (not ranked against E = {TOTAL_E})")
    if "dense" in study:
        dense = torch.stack([dense_losses(study, e)[0] for e in counts])
        ax.plot(counts, dense.mean(1).numpy(), "s--", color="tab:red", lw=2,
                label="dense FFN, the MoE's active parameters")
    if "dense_total" in study:
        ax.plot([TOTAL_E], [float(total_losses(study)[0].mean())], "D", color="tab:green", ms=8,
                label=f"dense FFN, E = {TOTAL_E}'s total parameters (width {total_width(TOTAL_E)})")
    ax.plot([], [], color="0.8", lw=0.8, label="one MoE seed")
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(e) for e in counts])
    ax.set_xlabel("experts E (top-1: one expert of width 8 per fact)")
    ax.set_ylabel("answer loss after 100 steps (nats)")
    ax.set_title("More experts, the same expert work per fact (fact lookup, 100 steps)", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- section 10: capacity drops where the experts matter
#: Section 7's E = 8 runs (seeds 0-9, trained dropless exactly as ``expert_count_run``), scored over every fact in
#: one batch with the capacity factor set at evaluation only (``None``: dropless); the share of slots dropped is
#: kept too. Trained on the AVX2 kernel like the main sweep, whose E = 8 losses the dropless column repeats:
#:     ATEN_CPU_CAPABILITY=avx2 python -m helpers.moe_expert_count --capacity   # helpers/data/moe_lookup_capacity.json
FACTORS: tuple[float | None, ...] = (None, 2.0, 1.25, 1.0)
CAPACITY_PATH = Path(__file__).parent / "data" / "moe_lookup_capacity.json"
CAPACITY_COMMAND = "ATEN_CPU_CAPABILITY=avx2 python -m helpers.moe_expert_count --capacity"


def capacity_key(factor: float | None) -> str:
    return "dropless" if factor is None else f"c = {factor:g}"


def scored_run(seed: int, data=None, n_experts: int = TOTAL_E) -> dict[str, dict[str, float]]:
    """Train one seed dropless, then score it at every factor: {factor key: {"loss", "dropped"}}, plus
    ``"dropped_loss"`` where a slot was dropped: the mean answer loss of the facts whose slot it was (top-1: one
    slot per fact)."""
    data = lookup_data() if data is None else data
    out = {}
    with torch_threads(1):
        model = build_lookup(data, spec(n_experts), d_model=D_MODEL, seed=seed)
        train_lookup(model, data, steps=STEPS, lr=LR)
        for factor in FACTORS:
            model.ffn.capacity_factor = factor
            loss = lookup_loss_and_accuracy(model, data)[0]
            record = model.ffn_record                                # the MoE's record of that forward
            out[capacity_key(factor)] = {"loss": round(loss, 5), "dropped": round(float(record.dropped_share), 5)}
            lost = ~record.routing.kept.all(dim=1)                   # (facts,) True where the fact's slot was dropped
            if bool(lost.any()):
                with torch.no_grad():
                    per_fact = F.cross_entropy(model(data.ids)[:, 0], data.answer_id, reduction="none")
                out[capacity_key(factor)]["dropped_loss"] = round(float(per_fact[lost].mean()), 5)
        model.ffn.capacity_factor = None
    return out


def load_lookup_capacity(path: str | Path = CAPACITY_PATH) -> dict:
    """The shipped capacity-scored E = 8 runs (``--capacity``)."""
    return read_results(path, "capacity-scored fact-lookup runs", CAPACITY_COMMAND)


def capacity_values(study: dict, factor_key: str, what: str = "loss") -> torch.Tensor:
    runs = study["runs"]
    return torch.tensor([runs[s][factor_key][what] for s in sorted(runs, key=int)], dtype=torch.float64)


def lookup_capacity_family(study: dict, by_count: dict | None = None) -> dict[str, Comparison]:
    """Answer loss at c = 1.25 and at c = 1 − dropless, paired by seed (c = 2 drops no slot in any shipped seed,
    so its losses equal the dropless ones and it is not tested); with ``by_count`` (``load_expert_count``), also
    the loss at c = 1 − the dense FFN of E = 8's active parameters at its best rate, paired by seed. One Holm family."""
    base = capacity_values(study, "dropless")
    family = {f"answer loss at {capacity_key(f)} − dropless": paired_difference(capacity_values(study, capacity_key(f)), base)
              for f in FACTORS[1:] if bool((capacity_values(study, capacity_key(f), "dropped") > 0).any())}
    if by_count is not None:
        family[f"answer loss at c = 1 − dense, width {dense_width(TOTAL_E)}"] = paired_difference(
            capacity_values(study, capacity_key(1.0)), dense_losses(by_count, TOTAL_E)[0])
    return family


def lookup_capacity_line(study: dict, by_count: dict | None = None) -> str:
    """A small table: the mean answer loss at each factor with its share of slots dropped, and for each tested
    factor the paired difference from dropless with its Holm verdict; then one line on the dropped facts; with
    ``by_count``, one line more: c = 1 against the dense FFN of E = 8's active parameters, in the same family."""
    family = lookup_capacity_family(study, by_count)
    verdicts = {v.name: v for v in holm(family)}
    header = "each factor − dropless" + (" and c = 1 − the dense FFN (last line)" if by_count is not None else "")
    rows = [f"E = 8 fact lookup, mean of {len(study['runs'])} seeds; {header}, paired, Holm over {len(family)}:",
            f"{'factor':<10}{'answer loss':>12}{'slots dropped':>15}{'− dropless':>12}{'higher in':>11}  verdict",
            f"{'dropless':<10}{capacity_values(study, 'dropless').mean():>12.2f}{'0%':>15}"]
    for f in FACTORS[1:]:
        v = verdicts.get(f"answer loss at {capacity_key(f)} − dropless")
        dropped = capacity_values(study, capacity_key(f), "dropped").mean()
        row = f"{capacity_key(f):<10}{capacity_values(study, capacity_key(f)).mean():>12.2f}{dropped:>15.1%}"
        if v is None:
            rows.append(f"{capacity_key(f):<10}{capacity_values(study, capacity_key(f)).mean():>12.2f}{'0%':>15}"
                        "  (no slot dropped: not tested)")
        else:
            c = v.comparison
            rows.append(row + f"{c.mean:>+12.2f}{f'{c.higher}/{c.n}':>11}  "
                        f"{'resolved' if v.resolved else 'not resolved'}")
    line = "\n".join(rows)
    runs = [study["runs"][s]["c = 1"] for s in sorted(study["runs"], key=int)]
    if all("dropped_loss" in r for r in runs):
        lost = torch.tensor([r["dropped_loss"] for r in runs], dtype=torch.float64)
        n_answers = int(lookup_data().answer_id.max()) + 1
        line += (f"\nat c = 1, the facts whose slot was dropped: answer loss {lost.mean():.1f} "
                 f"({lost.min():.1f}–{lost.max():.1f} over seeds); a uniform guess over the {n_answers} answers: "
                 f"ln {n_answers} = {math.log(n_answers):.2f}")
    dense = verdicts.get(f"answer loss at c = 1 − dense, width {dense_width(TOTAL_E)}")
    if dense is not None:
        c = dense.comparison
        line += (f"\nc = 1 − the dense FFN of its active parameters (width {dense_width(TOTAL_E)}, "
                 f"{dense_losses(by_count, TOTAL_E)[0].mean():.2f}): {c.mean:+.2f}, "
                 + (f"{dense.verdict} in {c.higher if c.mean > 0 else c.lower}/{c.n}" if dense.resolved else
                    f"not resolved ({c.lower} lower, {c.higher} higher of {c.n})"))
    return line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--results", action="store_true")
    what.add_argument("--seed0-kernel", action="store_true",
                      help="add this kernel's seed 0 of every E (and of the total-parameter line) to the file")
    what.add_argument("--dense", action="store_true", help="add the dense line (every width, both rates) to the file")
    what.add_argument("--dense-total", action="store_true", help="add the dense FFN of E = 8's total parameters")
    what.add_argument("--kernel-sweep", action="store_true", help="add E = 8 and 16, every seed, on this kernel")
    what.add_argument("--long", action="store_true", help="E = 8 and both dense lines at 300 steps (LONG_PATH)")
    what.add_argument("--capacity", action="store_true",
                      help="E = 8 trained dropless, scored at each capacity factor (writes CAPACITY_PATH)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--out", default=str(PATH))
    args = parser.parse_args(argv)
    if args.long:
        out = LONG_PATH if args.out == str(PATH) else Path(args.out)
        settings = {"steps": LONG_STEPS, "lr": LR, "d_model": D_MODEL, "spec": spec(TOTAL_E),
                    "dense_lrs": list(DENSE_LRS)}
        write_results(out, LONG_COMMAND, settings, run_long(args.seeds))
        print(f"wrote {out}")
        return 0
    if args.capacity:
        data = lookup_data()
        settings = {"steps": STEPS, "lr": LR, "d_model": D_MODEL, "n_experts": TOTAL_E, "spec": spec(TOTAL_E),
                    "factors": [capacity_key(f) for f in FACTORS]}
        out = CAPACITY_PATH if args.out == str(PATH) else Path(args.out)
        write_results(out, CAPACITY_COMMAND, settings,
                      {"runs": {str(s): scored_run(s, data) for s in args.seeds}})
        print(f"wrote {out}")
        return 0
    if args.dense:
        study = load_expert_count(args.out)
        study["dense"] = run_dense(args.seeds)
        study["settings"]["dense_lrs"] = list(DENSE_LRS)
        Path(args.out).write_text(json.dumps(study, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"added the dense line to {args.out}")
        return 0
    if args.dense_total:
        study, data, width = load_expert_count(args.out), lookup_data(), total_width(TOTAL_E)
        study["dense_total"] = {str(width): {f"{lr:g}": {str(s): round(dense_run(width, s, lr, data), 5)
                                                         for s in args.seeds} for lr in DENSE_LRS}}
        Path(args.out).write_text(json.dumps(study, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"added the dense FFN of width {width} to {args.out}")
        return 0
    if args.kernel_sweep:
        study = load_expert_count(args.out)
        study.setdefault("loss_by_kernel", {})[torch.backends.cpu.get_cpu_capability()] = run_sweep(
            args.seeds, KERNEL_COUNTS)["loss"]
        if "dense_total" in study:                        # seed 0 of the total-parameter line, for the live check
            study.setdefault("dense_total_seed0_by_kernel", {})[torch.backends.cpu.get_cpu_capability()] = round(
                dense_run(total_width(TOTAL_E), 0, total_losses(study)[1]), 5)
        Path(args.out).write_text(json.dumps(study, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"added E = 8 and 16 on this kernel to {args.out}")
        return 0
    if args.seed0_kernel:
        study, data = load_expert_count(args.out), lookup_data()
        kernel = torch.backends.cpu.get_cpu_capability()
        study.setdefault("seed0_by_kernel", {})[kernel] = {
            str(e): round(expert_count_run(e, 0, data), 5) for e in EXPERT_COUNTS}
        if "dense_total" in study and kernel != "AVX2":   # seed 0 of the total-parameter line (AVX2: the main runs)
            study.setdefault("dense_total_seed0_by_kernel", {})[kernel] = round(
                dense_run(total_width(TOTAL_E), 0, total_losses(study)[1]), 5)
        Path(args.out).write_text(json.dumps(study, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"added seed 0 on this kernel to {args.out}")
        return 0
    settings = {"steps": STEPS, "lr": LR, "d_model": D_MODEL, "expert_counts": list(EXPERT_COUNTS), "spec": spec(0)}
    write_results(args.out, COMMAND, settings, run_sweep(args.seeds))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
