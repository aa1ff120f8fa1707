r"""Notebook 05's short printed lines: one verdict table per Holm family, section 8's balance table, the fit controls
folded into one line, and one line for every live seed-0 rerun checked against its shipped file.

``python -m helpers.moe_lesson --fit`` prints the fit controls of section 8 in full (the no-FFN model, the
learning-rate sweep, the 1,000-step runs and their Holm family), which the notebook folds into ``fit_line``.
``python -m helpers.moe_lesson --purity`` trains section 8's α = 0.1 MoE for seeds 0-9 (15 steps each, about a
minute) and writes ``PURITY_PATH``: whether layer 0's trained router routes on position or on the word, and the
same seeds untrained (the control).
``python -m helpers.moe_lesson --delay`` trains α = 0 and α = 0.1 at lr 1e-3 for 60 steps, seeds 0-9 (under a
CPU-minute), and writes ``DELAY_PATH``: the cross-entropy after steps 15, 30 and 60 (does the slow start last?).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from collections.abc import Mapping, Sequence

import torch

from helpers.folded import Folded
from helpers.moe_runs import busiest, holm_groups, lm_families, over_seeds, starved, summaries
from helpers.precision import bound
from helpers.stats import Comparison, PairedDifference, holm, holm_table, paired_difference

#: The keys ``rerun_seed_zero`` fills, in the order ``live_checks_line`` prints them.
LIVE_ORDER = ("section 6", "section 7", "section 8", "collapse", "z-loss", "no FFN", "section 9", "section 10")


def verdict_table(family: Mapping[str, Comparison], what: str, digits: int = 2) -> str:
    """One Holm family (``helpers.stats.holm``, 5 % two-sided) as a short table: a first line naming ``what``, then
    ``helpers.stats.holm_table``'s compact rows (mean difference, seeds lower and higher, t against its threshold,
    verdict). E.g. ``verdict_table({"a − b": paired_difference(...)}, "balance, ten seeds")``."""
    return f"verdict, {what}:\n" + holm_table(dict(family), digits=digits, compact=True)


def verdict_readout(family: Mapping[str, Comparison], what: str, shown: str = "", digits: int = 2) -> Folded:
    """One Holm family as one line in view ("verdict, what, Holm over n: r of n resolved; not resolved: ...")
    after ``shown``, with the full ``verdict_table`` folded behind a click."""
    verdicts = holm(dict(family))
    resolved = sum(v.resolved for v in verdicts)
    line = f"verdict, {what}, Holm over {len(verdicts)}: {resolved} of {len(verdicts)} resolved"
    missing = [v.name for v in verdicts if not v.resolved]
    line += f"; not resolved: {', '.join(missing)}" if missing else ""
    return Folded(f"{shown}\n{line}" if shown else line, verdict_table(family, what, digits=digits),
                  f"the {len(verdicts)} verdicts (click)")


def expert_count_readout(by_count: dict, long: dict | None = None) -> Folded:
    """Section 7 in view: forward FLOPs per fact, the E = 8 headline (``total_line``) and one verdict line for the
    payoff family; folded: each dense width's best rate, the Holm table, how one row's t is made, E = 8 and
    E = 16 against 8 on each CPU kernel the runs were trained on, and (``long``: the 300-step runs,
    ``helpers.moe_expert_count.load_long``) the share of the gap after 300 steps."""
    from helpers.moe_expert_count import (EXPERT_COUNTS, dense_losses, dense_width, flops_per_fact, kernel_line,
                                          long_gap_line, payoff_family, total_line)

    family = payoff_family(by_count)
    shown = "\n".join([
        "forward FLOPs per fact (one expert 384, router 2·d·E): " + "; ".join(
            f"E = {e} {flops_per_fact(e)}" for e in EXPERT_COUNTS),
        total_line(by_count)])
    readout = verdict_readout(family, "answer loss, ten seeds, paired", shown)
    row = family["E = 8 − dense, width 11"]
    folded = ["the dense line, each width at its best rate: " + "; ".join(
                  f"width {dense_width(e)} at {dense_losses(by_count, e)[1]:g}" for e in EXPERT_COUNTS[1:]),
              readout.folded,
              f"t of the row 'E = 8 − dense, width 11' = mean / standard error = {row.mean:+.3f} / {row.se:.3f} "
              f"= {row.t:+.2f}",
              kernel_gap_line(by_count), kernel_line(by_count)]
    if long is not None:
        folded.append(f"E = 8 trained 3 times longer (AVX2 runs): {long_gap_line(long)}")
    return Folded(readout.shown, "\n".join(folded), f"dense rates, the {len(family)} verdicts and the CPU "
                  "kernels (click)")


def balance_table(study: dict, lr: float, alphas: Sequence[str] = ("0", "0.01", "0.1")) -> str:
    """Section 8's loads from the shipped runs, one row per α: busiest/mean in each layer over the last 5 of 15 steps
    (mean of the seeds, lowest–highest) and the experts under 2 % of the slots then (of 16), per seed; a first row
    for training step 1 (the same weights in every α) and a last row for a random router (``chance_busiest``)."""
    lines = [f"{'ten seeds':<14}{'busiest/mean, layer 0':>23}{'layer 1':>18}   starved experts (of 16), per seed"]
    first = [over_seeds([float(torch.tensor(r["max_over_mean"])[0, l]) for r in summaries(study, "MoE, α = 0", lr)])
             for l in range(2)]
    lines += [f"{'step 1, each α':<14}{first[0]:>23}{first[1]:>18}   (the same weights in every α)"]
    for a in alphas:
        rs = summaries(study, f"MoE, α = {a}", lr)
        layer = [over_seeds([float(torch.tensor(r["max_over_mean"])[-5:, l].mean()) for r in rs]) for l in range(2)]
        lines.append(f"{'α = ' + a:<14}{layer[0]:>23}{layer[1]:>18}   {','.join(str(starved(r)) for r in rs)}")
    chance = f"{chance_busiest():.2f}"
    lines.append(f"{'random router':<14}{chance:>23}{chance:>18}   (each token to a random expert: chance alone)")
    return "\n".join(lines)


def chance_busiest(n_tokens: int = 256, n_experts: int = 8, draws: int = 5000) -> float:
    """Busiest/mean of a perfectly even router: ``n_tokens`` (one training step's 32 sentences × 8 positions) sent
    to uniformly random experts, mean over ``draws`` seeded draws."""
    picks = torch.randint(n_experts, (draws, n_tokens), generator=torch.Generator().manual_seed(0))
    counts = torch.zeros(draws, n_experts, dtype=torch.float64)
    counts.scatter_add_(1, picks, torch.ones(draws, n_tokens, dtype=torch.float64))
    return float((counts.max(1).values / (n_tokens / n_experts)).mean())


#: The learning rate of the slow start, where the balancing loss delays the fit (``fit_family``, ``delay_study``).
SLOW_LR = 1e-3
SLOW_START = "CE at lr 1e-3: MoE α = 0.1 − MoE α = 0"


def fit_family(study: dict, no_ffn: dict, lr: float) -> dict[str, Comparison]:
    """Section 8's fit comparisons (``helpers.moe_runs.lm_families``), the balancing loss's cost at the slow
    learning rate ``SLOW_LR`` (15 steps, the same shipped study) and the no-FFN control, one Holm family."""
    from helpers.moe_no_ffn import no_ffn_family

    from helpers.moe_runs import values

    family = {}
    for name, comparison in lm_families(study, lr)[1].items():
        family[name] = comparison
        if name == "CE: MoE α = 0.1 − MoE α = 0":         # the balancing loss's cost again, at a slow start
            family[SLOW_START] = paired_difference(values(study, "MoE, α = 0.1", "ce", SLOW_LR),
                                                   values(study, "MoE, α = 0", "ce", SLOW_LR))
    family.update(no_ffn_family(no_ffn, study, ["MoE, α = 0.1", "dense, width 96"]))
    return family


def fit_line(study: dict, no_ffn: dict, lr: float) -> str:
    """The fit controls, every verdict of ``fit_family``'s Holm family with its size: the MoE (α = 0.1) against
    α = 0 (at ``lr`` and at ``SLOW_LR``), both dense FFNs (after 15 steps at ``lr``, at lr 3e-3 and after 1,000 steps) and no FFN."""
    return verdict_table(fit_family(study, no_ffn, lr), "cross-entropy (nats), ten seeds", digits=3)


#: The fit verdict section 8's note reads (``fit_readout``); the balancing loss's own fit verdict is read from the
#: three-prices table (``three_prices``), the others stay in the fold.
FIT_READ = ("CE: dense 96 − no FFN",)


def fit_readout(study: dict, no_ffn: dict, lr: float) -> Folded:
    """The fit control in view, one line: the verdicts of ``FIT_READ`` with their Holm family's size; folded:
    ``fit_line``'s whole Holm family."""
    family = fit_family(study, no_ffn, lr)
    resolved = sum(v.resolved for v in holm(family))
    shown = (f"fit verdict, ten seeds, Holm over {len(family)} ({resolved} resolved): "
             + verdict_clauses(family, FIT_READ, digits=3))
    return Folded(shown, fit_line(study, no_ffn, lr), f"all {len(family)} fit verdicts (click)")


#: Section 6's controls, in the fold's order (``skew_readout``, ``skew_family``).
SKEW_SHOWN = ("all positions", "matched Gaussian", "mean removed", "mean + isotropic", "isotropic Gaussian",
              "W_g = 0, noise")
#: The rows in the main line (the repeats control, the decisive control and its two ends); the others are folded.
SKEW_IN_VIEW = ("all positions", "distinct inputs", "matched Gaussian", "mean removed", "mean + isotropic",
                "isotropic Gaussian")
#: The verdicts ``skew_readout`` prints in the main line, one clause each.
SKEW_READ = ("matched Gaussian − isotropic Gaussian", "matched Gaussian − all positions",
             "mean removed − isotropic Gaussian")


def verdict_clauses(family: Mapping[str, Comparison], names: Sequence[str], digits: int = 2) -> str:
    """The named verdicts of one Holm family, one clause each: "name +0.12, higher in 9/10" (or "not resolved")."""
    verdicts = {v.name: v for v in holm(dict(family))}
    parts = []
    for name in names:
        v = verdicts[name]
        c = v.comparison
        if v.resolved:
            parts.append(f"{name} {c.mean:+.{digits}f}, {v.verdict} in {c.higher if c.mean > 0 else c.lower}/{c.n}")
        else:
            parts.append(f"{name} {c.mean:+.{digits}f}, not resolved ({c.lower} lower, {c.higher} higher of {c.n})")
    return "; ".join(parts)


def skew_family(skew, random_ids: torch.Tensor | None = None) -> dict[str, Comparison]:
    """Section 6's Holm family, paired by seed (``skew``: ``helpers.router_skew.SkewControls``): every control of
    ``SKEW_SHOWN`` − all positions, and the matched Gaussian and each of the two causes alone (mean removed: the
    low rank; mean + isotropic: the shared direction) − the isotropic Gaussian; one value per seed, the mean of the
    two layers. ``random_ids`` is accepted for the callers that pass it and not used."""
    plain, isotropic = skew.per_seed("all positions"), skew.per_seed("isotropic Gaussian")
    family = {f"{c} − all positions": paired_difference(skew.per_seed(c), plain) for c in SKEW_SHOWN[1:]}
    for c in ("matched Gaussian", "mean removed", "mean + isotropic"):
        family[f"{c} − isotropic Gaussian"] = paired_difference(skew.per_seed(c), isotropic)
    return family


def skew_readout(skew, random_ids: torch.Tensor | None = None) -> Folded:
    """Section 6 in view: busiest/mean of the untrained routers for ``SKEW_IN_VIEW`` (mean over seeds and both
    layers) with the share of the hidden states' excess (busiest/mean − 1) each keeps, and one short line per verdict
    of ``SKEW_READ``; folded: every control of ``SKEW_SHOWN`` per layer (``skew_table``), the inputs' geometry and the
    Holm family."""
    from helpers.router_skew import skew_table

    family = skew_family(skew)
    n, resolved = len(skew.per_seed("all positions")), sum(v.resolved for v in holm(family))
    base = float(skew.per_seed("all positions").mean()) - 1
    lines = [f"{f'router input ({n} untrained models)':<36}{'busiest/mean':>13}{'excess kept':>13}"]
    for c in SKEW_IN_VIEW:
        v = float(skew.per_seed(c).mean())
        lines.append(f"{c:<36}{v:>13.2f}{(v - 1) / base:>13.0%}")
    lines.append(f"verdict, {n} seeds, paired, Holm over {len(family)} ({resolved} of {len(family)} resolved):")
    lines += [f"  {verdict_clauses(family, [name])}" for name in SKEW_READ]     # one short line per verdict
    folded = [f"busiest/mean per layer, mean over {n} seeds (lowest–highest)", skew_table(skew, SKEW_SHOWN)]
    for layer, shape in enumerate(skew.geometry):
        folded.append(f"layer {layer}: |mean| / rms |x| = {shape.mean_ratio:.2f}; variance spread over "
                      f"{shape.participation:.0f} of {shape.d} directions")
    folded.append(verdict_table(family, f"{n} seeds"))
    return Folded("\n".join(lines), "\n".join(folded), "all six controls per layer, the inputs' geometry and the "
                  f"{len(family)} verdicts (click)")


def skew_summary(skew) -> str:
    """Section 6 in view, no fold: ``skew_readout``'s three-row table and verdict line, with one line of the router
    inputs' geometry (both layers). ``skew_details`` prints every control and the whole Holm family."""
    shown = skew_readout(skew).shown.splitlines()
    ratio = "–".join(sorted({f"{g.mean_ratio:.2f}" for g in skew.geometry}))
    spread = "–".join(sorted({f"{g.participation:.0f}" for g in skew.geometry}))
    geometry = (f"hidden states, both layers: |mean| / rms |x| = {ratio} (a shared direction); variance spread over "
                f"an effective {spread} of {skew.geometry[0].d} directions (participation ratio)")
    table = 1 + len(SKEW_IN_VIEW)                                 # header and rows; the verdict lines follow
    return "\n".join([*shown[:table], geometry, *shown[table:]])


def skew_details(skew) -> str:
    """Section 6 in full: every control of ``SKEW_SHOWN`` per layer, the inputs' geometry and the 8 verdicts."""
    return skew_readout(skew).folded


def three_prices(study: dict, cost: dict, trained: dict, no_ffn: dict, lr: float) -> str:
    """The lesson's three prices of imbalance, measured in sections 8 and 10 on the shipped runs, for α = 0 and
    α = 0.1 (ten seeds each, layer means): waiting (busiest/mean over the last 5 steps, both layers), drops (share
    of top-1 slots dropped at c = 1.25, layer 1) and the balancing loss's own price (its fit cost: cross-entropy,
    dropless, after 15 steps, at ``lr`` and at the slow ``SLOW_LR``). Each row's verdict is read from the Holm family it was printed in."""
    from helpers.moe_runs import CAPACITY_FACTORS, capacity_values, values

    waiting = {a: torch.tensor([busiest(s) for s in summaries(study, f"MoE, α = {a}", lr)]) for a in ("0", "0.1")}
    drops = {a: capacity_values(study, f"MoE, α = {a}", lr, "top1", CAPACITY_FACTORS.index(1.25)) for a in waiting}
    fit = {a: values(study, f"MoE, α = {a}", "ce", lr) for a in waiting}
    slow = {a: values(study, f"MoE, α = {a}", "ce", SLOW_LR) for a in waiting}
    fits = fit_family(study, no_ffn, lr)
    capacity = capacity_family(study, cost, trained, lr)
    rows = [("waiting: busiest expert's load / mean", waiting, "{:.2f}", 2, lm_families(study, lr)[0],
             "busiest/mean: α = 0.1 − α = 0"),
            ("drops: top-1 slots dropped, c = 1.25 (layer 1)", drops, "{:.0%}", 2, capacity,
             "dropped at c = 1.25, top-1: α = 0.1 − α = 0"),
            ("balancing loss: cross-entropy (nats), lr 1e-2", fit, "{:.3f}", 3, fits, "CE: MoE α = 0.1 − MoE α = 0"),
            ("  the same at lr 1e-3, after 15 steps", slow, "{:.3f}", 3, fits, SLOW_START)]
    lines = [f"{'trained dropless, mean of ten seeds':<48}{'α = 0':>8}{'α = 0.1':>9}   α = 0.1 − α = 0, paired, Holm"]
    for label, by_alpha, fmt, digits, family, name in rows:
        verdict = verdict_clauses(family, [name], digits=digits).split(name)[1].strip()
        lines.append(f"{label:<48}{fmt.format(float(by_alpha['0'].mean())):>8}"
                     f"{fmt.format(float(by_alpha['0.1'].mean())):>9}   {verdict}")
    return "\n".join(lines)


def drops_family(study: dict, lr: float) -> tuple[dict[str, Comparison], list[str]]:
    """Section 10's drop comparisons from the shipped runs (layer 1, ten seeds) and their printable lines: the
    share of top-1 slots dropped at c = 1.25 and 2 per α, and the busiest/mean of the top-1 routing."""
    from helpers.moe_runs import CAPACITY_FACTORS, capacity_values

    def dropped(alpha: str, k: int, c: float) -> torch.Tensor:
        return capacity_values(study, f"MoE, α = {alpha}", lr, f"top{k}", CAPACITY_FACTORS.index(c))

    def choice(alpha: str, j: int) -> torch.Tensor:            # busiest/mean of the top-2 routing's j-th choices
        return capacity_values(study, f"MoE, α = {alpha}", lr, "busiest_choice", j)

    family = {
        "dropped at c = 1.25, top-1: α = 0.1 − α = 0": paired_difference(dropped("0.1", 1, 1.25), dropped("0", 1, 1.25)),
        "α = 0.1, dropped top-1: c = 2 − c = 1.25": paired_difference(dropped("0.1", 1, 2.0), dropped("0.1", 1, 1.25)),
        "α = 0.1, busiest/mean: second − first choices": paired_difference(choice("0.1", 1), choice("0.1", 0)),
        "α = 0.1, dropped at c = 1: top-2 − top-1": paired_difference(dropped("0.1", 2, 1.0), dropped("0.1", 1, 1.0)),
    }
    lines = [f"top-1 slots dropped at c = {c}, ten seeds: α = 0 {over_seeds(dropped('0', 1, c))}, "
             f"α = 0.1 {over_seeds(dropped('0.1', 1, c))}" for c in (1.25, 2.0)]
    lines.append("top-2 slots dropped at c = 1.0, ten seeds: "
                 f"α = 0 {over_seeds(dropped('0', 2, 1.0))}, α = 0.1 {over_seeds(dropped('0.1', 2, 1.0))}")
    lines.append("busiest/mean of the top-1 routing: " + ", ".join(
        f"α = {a} {over_seeds(choice(a, 0))}" for a in ("0", "0.1")))
    return family, lines


#: The comparisons of section 10 its prose reads: the Holm family ``capacity_readout`` prints.
CAPACITY_READ = ("dropped at c = 1.25, top-1: α = 0.1 − α = 0", "α = 0: CE at c = 1 − dropless",
                 "α = 0.1: CE at c = 1 − dropless", "extra CE at c = 1: α = 0.1 − α = 0",
                 "α = 0, CE at c = 1: trained at c = 1 − dropless", "trained at c = 1, CE at c = 1: α = 0.1 − α = 0")


def capacity_family(study: dict, cost: dict, trained: dict, lr: float) -> dict[str, Comparison]:
    """Section 10's Holm family, the comparisons of ``CAPACITY_READ`` (drops: ten seeds; costs: 20 seeds)."""
    from helpers.moe_capacity_cost import cost_family, trained_family

    every = {**drops_family(study, lr)[0], **cost_family(cost), **trained_family(trained, cost, compare_arms=True)}
    return {name: every[name] for name in CAPACITY_READ}


def capacity_readout(study: dict, cost: dict, trained: dict, no_ffn: dict, lr: float) -> Folded:
    """Section 10 in view: the capacity-cost table (``helpers.moe_capacity_cost.cost_table``) with the no-FFN
    model's cross-entropy as a last row, and one verdict line; folded: the drop shares and the Holm family of the
    comparisons the prose reads (``CAPACITY_READ``: drops, ten seeds; costs, 20 seeds)."""
    from helpers.moe_capacity_cost import cost_table
    from helpers.moe_no_ffn import no_ffn_values

    drop_lines = drops_family(study, lr)[1]
    family = capacity_family(study, cost, trained, lr)
    verdicts = {v.name: v for v in holm(family)}
    n_seeds = len(next(iter(cost["ce"].values())))
    ffn_free = no_ffn_values(no_ffn)
    shown = [f"cross-entropy over all targets after 15 steps, mean of {n_seeds} seeds, scored at each factor:",
             cost_table(cost, trained, {f"no FFN at all ({len(ffn_free)} seeds)": float(ffn_free.mean())})]
    parts = []
    for a in ("0", "0.1"):
        c = verdicts[f"α = {a}: CE at c = 1 − dropless"]
        parts.append(f"α = {a} {c.comparison.mean:+.3f} nats, {c.verdict} in {c.comparison.higher}/{c.comparison.n}")
    shown.append(f"verdict, trained dropless, c = 1 − dropless (Holm over {len(family)}): " + "; ".join(parts))
    read = [line for line in drop_lines if "slots dropped" in line]   # the shares the prose reads
    folded = [*read, verdict_table(family, f"drops (ten seeds), capacity costs ({n_seeds} seeds)", digits=3)]
    return Folded("\n".join(shown), "\n".join(folded), f"drop shares and the {len(family)} verdicts (click)")


def live_checks_line(live: Mapping[str, float | None], tol: float = 1e-3) -> str:
    """One line for every live seed-0 rerun against its shipped file: ``live`` maps a section (``LIVE_ORDER``) to
    the largest |live − file| difference, or ``None`` where the file holds no run on this CPU kernel."""
    done = [k for k in LIVE_ORDER if live.get(k) is not None]
    gap = max(live[k] for k in done) if done else float("nan")
    missing = [k for k in LIVE_ORDER if k in live and live[k] is None]
    text = f"seed 0 rerun live against the shipped files ({', '.join(done)}): largest |difference| {bound(gap, tol)}"
    return text + (f"; {', '.join(missing)}: the file has no run on this CPU kernel" if missing else "")


def expert_count_gap(by_count: dict) -> float | None:
    """Section 7's live check as a number: seed 0 of E = 4 and of the dense FFN of E = 8's total parameters against
    the file's runs on the same CPU kernel (``None`` on a kernel the file does not store)."""
    from helpers.moe_expert_count import (TOTAL_E, dense_run, expert_count_run, lookup_data, seed0_reference,
                                          total_losses, total_seed0, total_width)

    ref_moe, ref_dense = seed0_reference(by_count, 4), total_seed0(by_count)
    data = lookup_data()
    moe = expert_count_run(4, 0, data)
    dense = dense_run(total_width(TOTAL_E), 0, total_losses(by_count)[1], data)
    if ref_moe is None or ref_dense is None:
        return None
    return max(abs(moe - ref_moe), abs(dense - ref_dense))


def kernel_gap_line(by_count: dict, n_experts: int = 8) -> str:
    """Section 7's E = 8 headline from each CPU kernel's E = 8 runs (ten seeds each; the dense runs exist on the
    AVX2 kernel only): its mean answer loss below the dense FFN of its active parameters, and the share of the gap
    to the dense FFN of its total parameters that it closes."""
    from helpers.moe_expert_count import dense_losses, kernel_losses, total_losses

    active, total = float(dense_losses(by_count, n_experts)[0].mean()), float(total_losses(by_count)[0].mean())
    parts = []
    for kernel in ("AVX2", *by_count.get("loss_by_kernel", {})):
        moe = float(kernel_losses(by_count, kernel, n_experts).mean())
        parts.append(f"{kernel} {moe - active:+.2f} nats, {(active - moe) / (active - total):.0%} of the gap")
    return (f"E = {n_experts} − the dense FFN of its active parameters (AVX2 runs), by the kernel E = {n_experts} "
            f"trained on: " + "; ".join(parts))


#: Where ``python -m helpers.moe_lesson --purity`` writes section 9's ten seeds and ``load_purity`` reads them.
PURITY_PATH = Path(__file__).parent / "data" / "moe_purity.json"


def purity(expert: torch.Tensor, groups: torch.Tensor, n_experts: int = 8) -> float:
    """The share of positions sent to their group's most common expert. ``expert``, ``groups``: ``(positions,)``
    int64, each position's first-choice expert and its group label."""
    kept = sum(int(torch.bincount(expert[groups == g], minlength=n_experts).max()) for g in groups.unique())
    return kept / groups.numel()


def position_and_type(data, facts) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positions,)`` group labels of every token position of ``data.ids`` (flattened): its position in the
    sentence (8 groups) and its token type (``helpers.facts.token_types``, 7 groups)."""
    from helpers.facts import token_types

    types_of = token_types(data.vocab, facts)
    names = sorted(set(types_of.values()))
    ids = data.ids.reshape(-1)
    position = torch.arange(ids.numel()) % data.ids.shape[1]
    kind = torch.tensor([names.index(types_of[data.vocab.tokens[i]]) for i in ids.tolist()])
    return position, kind


#: Words that sit at more than one position of the fact sentences: (word, its positions).
SHARED_WORDS = (("is", (2, 5, 6)), ("the", (1, 6)))


def word_only(expert: torch.Tensor, words: torch.Tensor, n_experts: int = 8) -> torch.Tensor:
    """A position-blind router built from a trained one: every word sent to the expert it most often gets.
    ``expert``, ``words``: ``(positions,)`` int64 -> ``(positions,)`` int64."""
    out = torch.empty_like(expert)
    for w in words.unique():
        m = words == w
        out[m] = torch.bincount(expert[m], minlength=n_experts).argmax()
    return out


def routing_purity(run, data, facts, layer: int = 0) -> dict[str, object]:
    """A trained run's (``helpers.moe_runs.Run``) layer routing: purity by position of the router and of its
    position-blind copy (``word_only``), and each shared word's most common expert at each of its positions."""
    expert = run.final[layer].routing.expert_index[:, 0]
    position, _ = position_and_type(data, facts)
    words = data.ids.reshape(-1)
    out: dict[str, object] = {"position": purity(expert, position),
                              "word only": purity(word_only(expert, words), position)}
    for w, places in SHARED_WORDS:
        m = words == data.vocab.tokens.index(w)
        out[w] = [int(torch.bincount(expert[m & (position == p)], minlength=8).argmax()) for p in places]
    return out


def untrained_purity(seed: int, data, facts, position: int = 6) -> dict[str, object]:
    """The control for ``routing_purity``: the same seed's model before its first step (``make_model``, evaluated
    on all of ``data``), plus ``"row"``: the share of ``position``'s tokens sent to its most common expert."""
    from types import SimpleNamespace

    from helpers.moe_runs import evaluate, lm_config, make_model

    records = evaluate(make_model("MoE, α = 0.1", seed, lm_config(data)), data)[3]
    out = routing_purity(SimpleNamespace(final=records), data, facts)
    expert = records[0].routing.expert_index[:, 0]
    at = torch.arange(expert.numel()) % data.ids.shape[1] == position
    out["row"] = float(torch.bincount(expert[at], minlength=8).max() / at.sum())
    return out


def purity_study(seeds: Sequence[int] = tuple(range(10))) -> dict:
    """Section 8's α = 0.1 MoE (15 steps, lr 1e-2) for each seed: ``routing_purity`` of layer 0, trained
    (``"runs"``) and untrained (``"untrained"``, ``untrained_purity``)."""
    from helpers.facts import load_facts, make_dataset
    from helpers.moe_runs import train_run

    facts = load_facts()
    data = make_dataset(facts)

    def rounded(r):
        return {k: round(v, 5) if isinstance(v, float) else v for k, v in r.items()}

    runs, untrained = {}, {}
    for s in seeds:
        untrained[str(s)] = rounded(untrained_purity(s, data, facts))
        runs[str(s)] = rounded(routing_purity(train_run("MoE, α = 0.1", s, data, lr=1e-2, keep_model=False),
                                              data, facts))
    return {"settings": {"arm": "MoE, α = 0.1", "lr": 1e-2, "steps": 15, "layer": 0, "untrained_row": 6},
            "runs": runs, "untrained": untrained}


def live_purity_gap(live: Mapping[str, object], study: dict, seed: int = 0) -> float:
    """Largest |difference| between a live ``routing_purity`` and the file's run of ``seed`` (a word whose experts
    differ counts as 1)."""
    ref = study["runs"][str(seed)]
    return max(abs(v - ref[k]) if isinstance(v, float) else float(v != ref[k]) for k, v in live.items())


def position_row_line(run, data, position: int = 6, layer: int = 0) -> str:
    """One heat-map row in words: how many different words sit at ``position`` and the share of them routed to
    that position's most common expert (``run``: a ``helpers.moe_runs.Run``)."""
    expert = run.final[layer].routing.expert_index[:, 0]
    words = data.ids.reshape(-1)
    at = torch.arange(words.numel()) % data.ids.shape[1] == position
    share = torch.bincount(expert[at], minlength=8).max() / at.sum()
    return (f"seed 0, position {position}: {len(words[at].unique())} different words; share of its {int(at.sum())} "
            f"tokens sent to its most common expert {share:.2f}")


def load_purity(path: Path = PURITY_PATH) -> dict:
    """The shipped purity study."""
    return json.loads(Path(path).read_text())


def purity_lines(study: dict) -> str:
    """Each shared word's experts by position per seed, how many seeds move it, and the paired verdict of the
    router's purity by position against its position-blind copy's (``holm_table``)."""
    runs = [study["runs"][s] for s in sorted(study["runs"], key=int)]
    lines = [f"layer 0, α = 0.1, {len(runs)} seeds: each word's most common expert at each of its positions"]
    for w, places in SHARED_WORDS:
        moved = sum(len(set(r[w])) > 1 for r in runs)
        per_seed = "  ".join("/".join(str(e) for e in r[w]) for r in runs)
        lines.append(f"  '{w}' at positions {', '.join(map(str, places))}: {per_seed}   "
                     f"-> changes expert in {moved}/{len(runs)} seeds")
    pos = torch.tensor([r["position"] for r in runs], dtype=torch.float64)
    blind = torch.tensor([r["word only"] for r in runs], dtype=torch.float64)
    lines.append(f"purity by position (share sent to the position's most common expert): router {over_seeds(pos)}, "
                 f"each word to its own most common expert {over_seeds(blind)}")
    family = {"router − word only": paired_difference(pos, blind)}
    if "untrained" in study:
        # The control: the same seeds before step 1 (one line), in the same Holm family.
        cold = [study["untrained"][s] for s in sorted(study["untrained"], key=int)]
        cpos = torch.tensor([r["position"] for r in cold], dtype=torch.float64)
        cblind = torch.tensor([r["word only"] for r in cold], dtype=torch.float64)
        moved = ", ".join(f"'{w}' {sum(len(set(r[w])) > 1 for r in cold)}/{len(cold)}" for w, _ in SHARED_WORDS)
        lines.append(f"untrained, the same seeds before step 1: router {over_seeds(cpos)}, word only "
                     f"{over_seeds(cblind)}; changes expert: {moved}; seed 0's position "
                     f"{study['settings'].get('untrained_row', 6)}: {cold[0]['row']:.2f} to one expert")
        family["untrained: router − word only"] = paired_difference(cpos, cblind)
    lines.append(holm_table(family, digits=2))
    return "\n".join(lines)


def purity_readout(study: dict) -> Folded:
    """Section 9 in view: how many seeds move each shared word between experts with its position, the purity by
    position of the router against its word-only copy (trained and untrained) and one verdict line; folded:
    ``purity_lines`` (every seed's experts and the Holm table)."""
    runs = [study["runs"][s] for s in sorted(study["runs"], key=int)]
    cold = [study["untrained"][s] for s in sorted(study["untrained"], key=int)]
    moved = ", ".join(f"'{w}' in {sum(len(set(r[w])) > 1 for r in runs)}/{len(runs)}" for w, _ in SHARED_WORDS)

    def mean_of(rs, key):
        return torch.tensor([r[key] for r in rs], dtype=torch.float64)

    family = {"router − word only": paired_difference(mean_of(runs, "position"), mean_of(runs, "word only")),
              "untrained: router − word only": paired_difference(mean_of(cold, "position"),
                                                                 mean_of(cold, "word only"))}
    shown = [f"layer 0, α = 0.1, {len(runs)} seeds: a word changes expert with its position: {moved} seeds",
             "share of a position's tokens sent to its most common expert, router against each word on its own "
             f"expert: trained {float(mean_of(runs, 'position').mean()):.2f} against "
             f"{float(mean_of(runs, 'word only').mean()):.2f}, untrained {float(mean_of(cold, 'position').mean()):.2f}"
             f" against {float(mean_of(cold, 'word only').mean()):.2f}",
             f"verdict, paired, Holm over 2: {verdict_clauses(family, list(family))}"]
    return Folded("\n".join(shown), purity_lines(study), "every seed's experts and the verdicts (click)")


#: Where ``python -m helpers.moe_lesson --delay`` writes the slow start's longer runs and ``load_delay`` reads them.
DELAY_PATH = Path(__file__).parent / "data" / "moe_delay.json"
DELAY_STEPS = (15, 30, 60)


def delay_study(seeds: Sequence[int] = tuple(range(10)), steps: Sequence[int] = DELAY_STEPS) -> dict:
    """Section 8's recipe at the slow ``SLOW_LR`` for α = 0 and α = 0.1, trained ``max(steps)`` steps: the
    cross-entropy over every target after each of ``steps``, ``{"runs": {arm: {seed: {step: ce}}}}``."""
    from helpers.facts import load_facts, make_dataset
    from helpers.moe_runs import train_run

    data = make_dataset(load_facts())
    runs: dict = {}
    for arm in ("MoE, α = 0", "MoE, α = 0.1"):
        for s in seeds:
            run = train_run(arm, s, data, steps=max(steps), lr=SLOW_LR, keep_model=False, checkpoints=steps)
            runs.setdefault(arm, {})[str(s)] = {str(k): round(v, 5) for k, v in run.curve.items()}
    return {"made_by": "python -m helpers.moe_lesson --delay",
            "settings": {"lr": SLOW_LR, "steps": list(steps), "seeds": list(seeds)}, "runs": runs}


def load_delay(path: Path = DELAY_PATH) -> dict:
    """The shipped slow-start runs (``delay_study``)."""
    return json.loads(Path(path).read_text())


def delay_differences(delay: dict) -> dict[str, PairedDifference]:
    """α = 0.1 − α = 0 in cross-entropy at ``SLOW_LR``, paired over the file's seeds, at every checkpoint."""
    runs = delay["runs"]
    seeds = sorted(runs["MoE, α = 0"], key=int)

    def ce(arm: str, step: str) -> torch.Tensor:
        return torch.tensor([runs[arm][s][step] for s in seeds], dtype=torch.float64)

    return {f"step {k}": paired_difference(ce("MoE, α = 0.1", str(k)), ce("MoE, α = 0", str(k)))
            for k in delay["settings"]["steps"]}


def delay_family(delay: dict) -> dict[str, Comparison]:
    """``delay_differences`` after the first checkpoint: step 15 is judged once, in ``fit_family`` (the same runs),
    so each comparison sits in one Holm family."""
    return dict(list(delay_differences(delay).items())[1:])


def delay_line(delay: dict) -> str:
    """One line: ``delay_family``'s verdicts (steps 30 and 60), Holm over those steps; step 15 is the row above."""
    family = delay_family(delay)
    verdicts = {v.name: v for v in holm(family)}
    return (f"  the same trained on, Holm over {len(family)} (step 15: the row above): "
            + ", ".join(f"{name} {verdicts[name].comparison.mean:+.3f} {verdicts[name].verdict}" for name in family))


def three_prices_figure(study: dict, delay: dict, lr: float):
    """The three prices side by side, from the shipped files (ten seeds, one dot per seed, a bar at the mean):
    waiting (busiest/mean, both layers, last 5 steps; lines at an even load and at a random router's
    ``chance_busiest``), drops (top-1 slots dropped at c = 1.25, layer 1), and the
    balancing loss's fit cost, α = 0.1 − α = 0 in cross-entropy with its 95 % interval (``helpers.stats.interval``):
    after 15 steps at ``lr``, and at ``SLOW_LR`` after steps 15, 30 and 60 (``delay_study``)."""
    import matplotlib.pyplot as plt

    from helpers.moe_runs import CAPACITY_FACTORS, capacity_values, values
    from helpers.plotting import PALETTE
    from helpers.stats import interval

    alphas = ("0", "0.1")
    waiting = [torch.tensor([busiest(s) for s in summaries(study, f"MoE, α = {a}", lr)]) for a in alphas]
    drops = [100 * capacity_values(study, f"MoE, α = {a}", lr, "top1", CAPACITY_FACTORS.index(1.25)) for a in alphas]
    seeds = sorted(delay["runs"]["MoE, α = 0"], key=int)
    fits = [paired_difference(values(study, "MoE, α = 0.1", "ce", lr), values(study, "MoE, α = 0", "ce", lr)),
            *delay_differences(delay).values()]
    fit_labels = ["15\n(lr 1e-2)", *(f"{k}\n(lr 1e-3)" for k in delay["settings"]["steps"])]

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    jitter = torch.linspace(-0.12, 0.12, len(seeds))
    for ax, by_alpha, ylabel, title in (
            (axes[0], waiting, "busiest expert's load / even load", "waiting: α = 0.1 cuts the busiest load"),
            (axes[1], drops, "% of top-1 slots dropped\nat c = 1.25, layer 1", "drops: α = 0.1 drops fewer slots")):
        for x, (v, color) in enumerate(zip(by_alpha, PALETTE)):
            ax.bar(x, float(v.mean()), width=0.6, color=color, alpha=0.3)
            ax.plot(x + jitter[:len(v)], v.numpy(), "o", color=color, ms=4)
        ax.set(xticks=[0, 1], xticklabels=[f"α = {a}" for a in alphas], ylabel=ylabel, title=title, xlim=(-0.6, 1.6))
    axes[0].axhline(1.0, color="gray", ls="--", lw=1, label="even load")
    axes[0].axhline(chance_busiest(), color="black", ls=":", lw=1.5, label="random router (chance)")
    axes[0].legend(loc="upper right", fontsize=8)
    ax = axes[2]
    for x, c in enumerate(fits):
        color = "gray" if x == 0 else PALETTE[2]
        lo, hi = interval(c)
        ax.plot(x + jitter[:c.n], c.diffs.numpy(), "o", color=color, ms=3, alpha=0.5)
        ax.errorbar(x, c.mean, yerr=[[c.mean - lo], [hi - c.mean]], fmt="s", color=color, ms=7, capsize=5, lw=2)
    ax.axhline(0.0, color="black", lw=1)
    ax.set(xticks=range(len(fits)), xticklabels=fit_labels, xlabel="step", ylabel="α = 0.1 − α = 0, cross-entropy (nats)\nabove 0: α = 0.1 fits worse",
           title="fit: a brief delay at lr 1e-3")
    fig.suptitle(f"The three prices of imbalance, {len(seeds)} seeds (dots); fit: mean and 95 % interval", y=1.0)
    fig.tight_layout()
    return fig


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", action="store_true", help="print section 8's fit controls in full")
    parser.add_argument("--purity", action="store_true", help="train section 9's ten seeds and write PURITY_PATH")
    parser.add_argument("--delay", action="store_true", help="train the slow start's 60-step runs, write DELAY_PATH")
    args = parser.parse_args(argv)
    for wanted, make, path, show in ((args.delay, delay_study, DELAY_PATH, delay_line),
                                     (args.purity, purity_study, PURITY_PATH, purity_lines)):
        if wanted:                                           # train, ship, then print what the notebook reads
            torch.set_num_threads(1)
            study = make()
            path.write_text(json.dumps(study) + "\n")
            print(show(study))
            return
    if not args.fit:
        parser.print_help()
        return
    from helpers.facts import load_facts, loss_floor, make_dataset
    from helpers.moe_no_ffn import load_no_ffn, no_ffn_family, no_ffn_values
    from helpers.moe_runs import answer_share, load_runs, long_table, relation_prior, sweep_table

    data, study, no_ffn, lr = make_dataset(load_facts()), load_runs(), load_no_ffn(), 1e-2
    print(f"no FFN, 10 seeds: CE {over_seeds(no_ffn_values(no_ffn), 3)}; answers are {answer_share(data):.0%} of the "
          f"targets; knowing each relation's answers and their frequencies but no fact scores "
          f"{relation_prior(data):.2f} on them")
    print(holm_groups({"fit, ten seeds (CE: all targets, lr 1e-2 unless named)": lm_families(study, lr)[1],
                       "control: no FFN at all, ten seeds": no_ffn_family(no_ffn, study,
                                                                          ["MoE, α = 0.1", "dense, width 96"])}))
    print("mean cross-entropy over 10 seeds after 15 steps, by learning rate (* the arm's best):")
    print(sweep_table(study))
    print("busiest/mean at lr 1e-2, mean over 10 seeds: " + ", ".join(
        f"{arm.split(', ')[1]} {sum(busiest(s) for s in summaries(study, arm, lr)) / 10:.2f}"
        for arm in ["MoE, α = 0", "MoE, α = 0.01", "MoE, α = 0.1"]))
    floor = loss_floor(data)
    print(f"long runs ({study['settings']['long_steps']:,} steps at lr {study['settings']['long_lr']:g}, 10 seeds); "
          f"the data's loss floor: {floor:.3f} nats")
    print(long_table(study, floor))


if __name__ == "__main__":
    main()


#: The notebook's names that ``rerun_seed_zero`` reads, keyed by its argument names.
RERUN_NAMES = {"build_lm": "untrained_moe_lm", "arms": "ARMS", **{name: name for name in (
    "data", "config", "facts", "runs", "study", "skew", "random_ids", "skew_seeds", "by_count", "collapse", "zloss",
    "no_ffn", "purity_runs", "cost", "trained")}}


def rerun_seed_zero_from(namespace: Mapping) -> str:
    """``rerun_seed_zero`` on the objects the notebook made (pass ``globals()``): its untrained MoE LM, section 8's
    live runs and every shipped result, read by the names in ``RERUN_NAMES``."""
    missing = [name for name in RERUN_NAMES.values() if name not in namespace]
    if missing:
        return "run the notebook's cells above first: missing " + ", ".join(missing)
    return rerun_seed_zero(**{arg: namespace[name] for arg, name in RERUN_NAMES.items()})


def rerun_seed_zero(*, build_lm, data, config, facts, runs: Mapping, study, skew, random_ids, skew_seeds, by_count,
                    collapse, zloss, no_ffn, purity_runs, cost, trained, arms: Sequence[str]) -> str:
    """Every shipped file of notebook 05 checked against seed 0 retrained live (a tqdm bar over the eight checks):
    one line with the largest |live − file| difference (``live_checks_line``). The arguments are the notebook's own
    objects: ``build_lm`` its untrained MoE LM, ``runs`` section 8's live runs keyed ``(arm, seed)``, the rest the
    shipped results each section loaded."""
    from helpers.moe_capacity_cost import capacity_cost, largest_cost_difference, trained_again
    from helpers.moe_collapse import busiest_share_run, live_gap
    from helpers.moe_no_ffn import no_ffn_run
    from helpers.moe_runs import largest_difference
    from helpers.moe_zloss import largest_live_difference, router_stats
    from helpers.progress import progress
    from helpers.router_skew import largest_seed_difference, random_id_loads, skew_controls

    seed0 = runs["MoE, α = 0.1", 0]                                   # section 8's live run, reused
    checks = {
        "section 6": lambda: largest_seed_difference(
            skew_controls(build_lm, data.ids, seeds=[0]),
            random_id_loads(build_lm, config.vocab_size, data.ids.shape, seeds=[0]), skew, random_ids, [0],
            skew_seeds),
        "section 7": lambda: expert_count_gap(by_count),                # seed 0 of E = 4 and width 67
        "section 8": lambda: float(largest_difference(runs, study)),
        "collapse": lambda: live_gap(busiest_share_run(0, data, steps=4), collapse),   # the first 4 steps
        "z-loss": lambda: largest_live_difference({0: router_stats(seed0.final)}, zloss),
        "no FFN": lambda: abs(no_ffn_run(0, data) - no_ffn["runs"]["0"]),
        "section 9": lambda: live_purity_gap(routing_purity(seed0, data, facts), purity_runs),
        "section 10": lambda: max(largest_cost_difference({(a, 0): capacity_cost(runs[a, 0].model, data)
                                                           for a in arms}, cost),
                                  trained_again("MoE, α = 0", 0, data, trained)),
    }
    return live_checks_line({name: check() for name, check in progress(checks.items(), desc="seed 0 rerun live")})
