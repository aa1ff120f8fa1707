"""Fine-grained against coarse experts, at equal expert parameters and at equal FLOPs (notebook 07, section 4).

Section 4's race cuts experts of width 8 into 4 of width 2; there the router is 57 % of the fine-grained layer's
multiply-adds, ``E / (E + 3 (k + s) w)`` = 32 / (32 + 3 · 4 · 2). This experiment adds five arms (multiply-adds per
fact: the experts' ``3 · 8 · k · w`` plus the router's ``8 E``):

* wide, experts eight times wider, the router a small share:
  ``coarse``, 8 SwiGLU experts of width 64, top-1 (1,600 multiply-adds, router 4 %); ``fine``, the same cut with
  ``m = 4``, 32 experts of width 16, top-4 (1,792, router 14 %): equal active expert parameters; ``coarse, 1,792``,
  8 experts of width 72, top-1 (1,792, router 4 %): equal FLOPs with ``fine``;
* narrow, section 4's width: ``fine, narrow``, the race's fine-grained arm (32 of width 2, top-4: 448, router 57 %);
  ``coarse, 448``, 8 experts of width 16, top-1 (448, router 14 %): equal FLOPs.

All use section 4's task (``helpers.fact_lookup``: 608 facts, ``d_model`` = 8, frozen embeddings, Switch loss
α = 0.1) for 100 steps, and again for 300. Each arm's rate is its best (lowest mean loss) of ``LRS`` (``LRS_300``
at 300 steps) on the sweep seeds 100–102; ten other seeds (0–9) then train at those rates. ``COMPARISONS``, a family of three judged by the paired t with Holm's
step-down (``helpers.stats``): fine − coarse (equal parameters) and fine − coarse, 1,792 (equal FLOPs), wide;
fine − coarse, 448 (equal FLOPs), narrow.

Made by ``python -m helpers.moe_granularity --results`` (about 15 minutes on one CPU thread), which writes
``helpers/data/moe_granularity.json``, and ``--results --steps 300`` (about 5 minutes), which writes
``helpers/data/moe_granularity_300.json``; ``--arms NAME ...`` runs only those arms and merges them into the file.
Both files were made on the AVX2 kernel (``ATEN_CPU_CAPABILITY=avx2``): a run this short at these rates moves with
the CPU kernel (seed 0 of ``fine, narrow`` by 0.07 to 0.10 nats on DEFAULT and AVX512), so the tests retrain
seed 0 on AVX2.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from helpers.fact_lookup import LookupData, build_lookup, lookup_data, train_lookup
from helpers.stats import holm, paired_difference

__all__ = ["ARMS", "COMPARISONS", "LRS", "LRS_300", "GRANULARITY_PATH", "GRANULARITY_300_PATH", "Granularity", "multiply_adds", "router_share", "run",
           "save", "load", "merge", "verdicts", "verdict_line", "equal_flops_lines", "expert_weights",
           "main"]

_BASE = {"ffn": "moe", "n_experts": 8, "top_k": 1, "d_ff": 64, "balance_coef": 0.1, "z_coef": 0.0}
_NARROW = {**_BASE, "d_ff": 8}                     # section 4's top-1 MoE (helpers.moe_race's "MoE")
#: coarse and fine: the same active expert parameters (3 · 8 · 64 = 1,536 per fact), cut once or four ways; the
#: "coarse, N" arms: top-1 of the multiply-adds N of the fine arm they face.
ARMS: dict[str, dict] = {"coarse": _BASE, "fine": {**_BASE, "granularity": 4}, "coarse, 1,792": {**_BASE, "d_ff": 72},
                         "fine, narrow": {**_NARROW, "granularity": 4}, "coarse, 448": {**_NARROW, "d_ff": 16}}
#: The section's granularity family: (name, first arm, second arm), judged on first − second.
COMPARISONS: tuple[tuple[str, str, str], ...] = (
    ("wide, equal expert parameters: fine − coarse", "fine", "coarse"),
    ("wide, equal FLOPs: fine − coarse 8 × 72", "fine", "coarse, 1,792"),
    ("narrow, equal FLOPs: fine − coarse 8 × 16", "fine, narrow", "coarse, 448"))
LRS: tuple[float, ...] = (0.02, 0.04, 0.08, 0.16)
#: At 300 steps the grid reaches one doubling lower (longer runs want lower rates).
LRS_300: tuple[float, ...] = (0.01, 0.02, 0.04, 0.08, 0.16)
SWEEP_SEEDS: tuple[int, ...] = (100, 101, 102)
SEEDS: tuple[int, ...] = tuple(range(10))
STEPS = 100
D_MODEL = 8
GRANULARITY_PATH = Path(__file__).parent / "data" / "moe_granularity.json"
GRANULARITY_300_PATH = Path(__file__).parent / "data" / "moe_granularity_300.json"


def multiply_adds(spec: dict, d_model: int = D_MODEL) -> int:
    """An MoE layer's multiply-adds per token: ``3 d_model k w`` for its chosen SwiGLU experts plus ``d_model E`` for
    the router (after the cut by ``granularity``; no shared experts)."""
    m = spec.get("granularity", 1)
    n, k, w = spec["n_experts"] * m, spec["top_k"] * m, spec["d_ff"] // m
    return 3 * d_model * k * w + d_model * n


def router_share(spec: dict) -> float:
    """The router's share of an MoE layer's multiply-adds per token: ``E / (E + 3 k w)`` with ``E`` routed experts
    of width ``w`` (after the cut by ``granularity``) and ``k`` picked (SwiGLU experts, no shared ones)."""
    m = spec.get("granularity", 1)
    n, k, w = spec["n_experts"] * m, spec["top_k"] * m, spec["d_ff"] // m
    return n / (n + 3 * k * w)


@dataclass
class Granularity:
    """``sweep[arm][lr]``: mean loss over ``SWEEP_SEEDS`` after ``steps``; ``lr[arm]``: the rate picked;
    ``loss[arm]``: ``(len(seeds),)`` float64 answer loss (nats) after ``steps`` at that rate; ``right[arm]``: the
    share of facts answered right."""

    steps: int
    seeds: list[int]
    sweep: dict[str, dict[float, float]]
    lr: dict[str, float]
    loss: dict[str, torch.Tensor]
    right: dict[str, torch.Tensor]


def _train(data: LookupData, arm: str, seed: int, lr: float, steps: int) -> tuple[float, float]:
    model = build_lookup(data, ARMS[arm], d_model=D_MODEL, seed=seed)
    _, _, evals = train_lookup(model, data, steps=steps, lr=lr, eval_at=[steps])
    return evals[steps]


def run(seeds: Sequence[int] = SEEDS, sweep_seeds: Sequence[int] = SWEEP_SEEDS, lrs: Sequence[float] = LRS,
        steps: int = STEPS, data: LookupData | None = None, arms: Sequence[str] = tuple(ARMS)) -> Granularity:
    """Sweep each of ``arms``' rate on ``sweep_seeds``, then train ``seeds`` at each arm's best rate."""
    data = data or lookup_data()
    sweep = {arm: {lr: sum(_train(data, arm, s, lr, steps)[0] for s in sweep_seeds) / len(sweep_seeds)
                   for lr in lrs} for arm in arms}
    best = {arm: min(sweep[arm], key=sweep[arm].get) for arm in arms}
    loss, right = {}, {}
    for arm in arms:
        runs = [_train(data, arm, s, best[arm], steps) for s in seeds]
        loss[arm] = torch.tensor([r[0] for r in runs], dtype=torch.float64)
        right[arm] = torch.tensor([r[1] for r in runs], dtype=torch.float64)
    return Granularity(steps, list(seeds), sweep, best, loss, right)


def save(result: Granularity, path: str | Path = GRANULARITY_PATH) -> Path:
    """Write ``result`` as JSON (losses rounded to 6 decimals)."""
    path = Path(path)
    command = "python -m helpers.moe_granularity --results" + ("" if result.steps == STEPS else f" --steps {result.steps}")
    record = {"command": command, "steps": result.steps, "seeds": result.seeds,
              "sweep": {a: {str(lr): round(v, 6) for lr, v in s.items()} for a, s in result.sweep.items()},
              "lr": result.lr, "loss": {a: [round(float(v), 6) for v in t] for a, t in result.loss.items()},
              "right": {a: [round(float(v), 6) for v in t] for a, t in result.right.items()}}
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def load(path: str | Path = GRANULARITY_PATH) -> Granularity:
    """Read a file written by ``save``."""
    r = json.loads(Path(path).read_text())
    return Granularity(r["steps"], r["seeds"], {a: {float(lr): v for lr, v in s.items()} for a, s in r["sweep"].items()},
                       r["lr"], {a: torch.tensor(v, dtype=torch.float64) for a, v in r["loss"].items()},
                       {a: torch.tensor(v, dtype=torch.float64) for a, v in r["right"].items()})


def merge(old: Granularity, new: Granularity) -> Granularity:
    """``old`` with ``new``'s arms added or replaced (the same steps and seeds)."""
    assert old.steps == new.steps and old.seeds == new.seeds, "merge needs the same steps and seeds"
    return Granularity(old.steps, old.seeds, {**old.sweep, **new.sweep}, {**old.lr, **new.lr},
                       {**old.loss, **new.loss}, {**old.right, **new.right})


def verdicts(*results: Granularity) -> list:
    """``COMPARISONS`` at each of ``results``' budgets, judged together with Holm's step-down
    (``helpers.stats.holm``); a name starts with its budget when there is more than one."""
    prefix = (lambda r: f"{r.steps} steps, ") if len(results) > 1 else (lambda r: "")
    return holm({prefix(r) + name: paired_difference(r.loss[a], r.loss[b])
                 for r in results for name, a, b in COMPARISONS})


def expert_weights(arm: str, d_model: int = D_MODEL) -> int:
    """All of ``ARMS[arm]``'s expert weights (SwiGLU: three matrices of ``d_model × d_ff`` per expert)."""
    spec = ARMS[arm]
    return 3 * d_model * spec["d_ff"] * spec["n_experts"]


def equal_flops_lines(*results: Granularity) -> list[str]:
    """The equal-FLOPs comparisons of ``COMPARISONS`` at the first budget, one line each with its verdict (Holm over
    every comparison at every budget of ``results``, as ``verdict_line``) and the two arms' expert weights."""
    found = {v.name: v for v in verdicts(*results)}
    prefix = f"{results[0].steps} steps, " if len(results) > 1 else ""
    rows = []
    for name, fine, coarse in COMPARISONS:
        if "equal FLOPs" not in name:
            continue
        v = found[prefix + name]
        c = v.comparison
        rows.append(f"{prefix}{name}: {c.mean:+.3f} nats, lower in {c.lower} of {c.n} seeds, t {c.t:+.2f} vs "
                    f"{v.threshold:.2f} (Holm over these {len(found)}) → {v.verdict}; expert weights "
                    f"{expert_weights(fine):,} vs {expert_weights(coarse):,}")
    return rows


def verdict_line(*results: Granularity) -> str:
    """Per arm: its experts, multiply-adds and router share per fact; at each budget its rate, mean loss and share of
    facts answered right; then one line per comparison of ``COMPARISONS`` at each budget (Holm over them all)."""
    first = results[0]
    rows = [f"seeds {first.seeds[0]}–{first.seeds[-1]}, each arm at its best rate on seeds 100–102 of "
            + "; ".join(f"{', '.join(f'{lr:g}' for lr in next(iter(r.sweep.values())))} ({r.steps} steps)"
                        for r in results),
            f"{'arm':<15}{'experts':>14}{'multiply-adds':>15}{'router':>8}"
            + "".join(f"{f'{r.steps} steps: lr':>16}{'loss':>7}{'right':>7}" for r in results)]
    for a, spec in ARMS.items():
        m = spec.get("granularity", 1)
        shape = f"{spec['n_experts'] * m} × {spec['d_ff'] // m}, top-{spec['top_k'] * m}"
        rows.append(f"{a:<15}{shape:>14}{multiply_adds(spec):>15,}{router_share(spec):>8.0%}"
                    + "".join(f"{r.lr[a]:>16g}{float(r.loss[a].mean()):>7.3f}{float(r.right[a].mean()):>7.1%}"
                              for r in results))
    found = verdicts(*results)
    rows.append(f"paired t, Holm over these {len(found)} comparisons:")
    for v in found:
        c = v.comparison
        rows.append(f"{v.name}: {c.mean:+.3f} nats, lower in {c.lower} of {c.n} seeds, t {c.t:+.2f} vs "
                    f"{v.threshold:.2f} → {v.verdict}")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """``--results``: run the experiment and write ``GRANULARITY_PATH`` (``--steps 300``: ``GRANULARITY_300_PATH``);
    ``--out`` another path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", action="store_true", help="run the sweep and the ten seeds, write the JSON")
    parser.add_argument("--steps", type=int, choices=(STEPS, 300), default=STEPS)
    parser.add_argument("--out", help="default: the shipped file of --steps")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), help="run only these arms, merged into --out")
    args = parser.parse_args(argv)
    if not args.results:
        parser.print_help()
        return 0
    torch.set_num_threads(1)
    args.out = args.out or str(GRANULARITY_PATH if args.steps == STEPS else GRANULARITY_300_PATH)
    result = run(arms=args.arms or tuple(ARMS), steps=args.steps, lrs=LRS if args.steps == STEPS else LRS_300)
    if args.arms:
        result = merge(load(args.out), result)
    print(save(result, args.out))
    print(verdict_line(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
