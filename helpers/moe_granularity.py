"""Fine-grained against coarse experts where the router is cheap (notebook 07, section 4).

Section 4's race cuts experts of width 8 into 4 of width 2; there the router is 57 % of the fine-grained layer's
multiply-adds, ``E / (E + 3 (k + s) w)`` = 32 / (32 + 3 · 4 · 2). This experiment widens the experts eightfold, so the
router is a small share, and races the two cuts at the same active expert parameters:

* ``coarse``: 8 SwiGLU experts of width 64, top-1 (router share 8 / (8 + 3 · 64) = 4 %);
* ``fine``: the same cut with ``m = 4``, 32 experts of width 16, top-4 (router share 32 / (32 + 3 · 4 · 16) = 14 %).

Both use section 4's task (``helpers.fact_lookup``: 608 facts, ``d_model`` = 8, frozen embeddings, Switch loss
α = 0.1) for 100 steps. Each arm's rate is its best (lowest mean loss) of ``LRS`` on the sweep seeds 100–102; ten
other seeds (0–9) then train at those rates, and the fine − coarse loss is judged by the paired t (Holm over this
one comparison, ``helpers.stats``).

Made by ``python -m helpers.moe_granularity --results`` (about 5 minutes on one CPU thread), which writes
``helpers/data/moe_granularity.json``.
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

__all__ = ["ARMS", "LRS", "GRANULARITY_PATH", "Granularity", "router_share", "run", "save", "load",
           "verdict_line", "main"]

_BASE = {"ffn": "moe", "n_experts": 8, "top_k": 1, "d_ff": 64, "balance_coef": 0.1, "z_coef": 0.0}
#: The two arms: the same active expert parameters (3 · 8 · 64 = 1,536 per fact), cut once or four ways.
ARMS: dict[str, dict] = {"coarse": _BASE, "fine": {**_BASE, "granularity": 4}}
LRS: tuple[float, ...] = (0.02, 0.04, 0.08, 0.16)
SWEEP_SEEDS: tuple[int, ...] = (100, 101, 102)
SEEDS: tuple[int, ...] = tuple(range(10))
STEPS = 100
D_MODEL = 8
GRANULARITY_PATH = Path(__file__).parent / "data" / "moe_granularity.json"


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
        steps: int = STEPS, data: LookupData | None = None) -> Granularity:
    """Sweep each arm's rate on ``sweep_seeds``, then train ``seeds`` at each arm's best rate."""
    data = data or lookup_data()
    sweep = {arm: {lr: sum(_train(data, arm, s, lr, steps)[0] for s in sweep_seeds) / len(sweep_seeds)
                   for lr in lrs} for arm in ARMS}
    best = {arm: min(sweep[arm], key=sweep[arm].get) for arm in ARMS}
    loss, right = {}, {}
    for arm in ARMS:
        runs = [_train(data, arm, s, best[arm], steps) for s in seeds]
        loss[arm] = torch.tensor([r[0] for r in runs], dtype=torch.float64)
        right[arm] = torch.tensor([r[1] for r in runs], dtype=torch.float64)
    return Granularity(steps, list(seeds), sweep, best, loss, right)


def save(result: Granularity, path: str | Path = GRANULARITY_PATH) -> Path:
    """Write ``result`` as JSON (losses rounded to 6 decimals)."""
    path = Path(path)
    record = {"command": "python -m helpers.moe_granularity --results", "steps": result.steps, "seeds": result.seeds,
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


def verdict_line(result: Granularity) -> str:
    """Two lines: each arm's router share, picked rate and mean loss; the paired verdict on fine − coarse (Holm
    over this one comparison)."""
    (v,) = holm({"fine − coarse": paired_difference(result.loss["fine"], result.loss["coarse"])})
    c = v.comparison
    arms = "; ".join(f"{a}: router {router_share(ARMS[a]):.0%} of the multiply-adds, lr {result.lr[a]:g}, loss "
                     f"{float(result.loss[a].mean()):.3f}" for a in ARMS)
    return (f"experts 8× wider, {result.steps} steps: {arms}\n"
            f"fine − coarse {c.mean:+.3f} nats, lower in {c.lower} of {c.n} seeds, t {c.t:+.2f} vs {v.threshold:.2f} "
            f"(Holm over 1) → {v.verdict}")


def main(argv: Sequence[str] | None = None) -> int:
    """``--results``: run the experiment and write ``GRANULARITY_PATH``; ``--out`` another path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", action="store_true", help="run the sweep and the ten seeds, write the JSON")
    parser.add_argument("--out", default=str(GRANULARITY_PATH))
    args = parser.parse_args(argv)
    if not args.results:
        parser.print_help()
        return 0
    torch.set_num_threads(1)
    result = run()
    print(save(result, args.out))
    print(verdict_line(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
