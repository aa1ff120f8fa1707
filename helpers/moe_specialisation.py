"""Does the race's top-1 MoE route by relation, and more so once trained? (Notebook 07, section 4.)

DeepSeekMoE argues for expert specialisation. Section 4's facts come labelled (152 countries × 4 relations), so
one number reads it: the **relation information** of a routing, ``I(relation; expert) / H(relation)``, the share
of the relation's log 4 nats that a fact's (top-1) expert reveals. 1: each expert serves one relation; 0: the
expert says nothing about the relation. Unlike "the share of facts at their relation's most common expert" (which
an even load caps at 0.5, since each relation is 1/4 of the facts and each expert takes 1/8), an even load does
not cap it. Each routing's load (the busiest expert's facts over the mean) is kept beside it.

Measured on section 4's top-1 MoE (``helpers.moe_race.ARMS["MoE"]``) trained at its race rates for 100 and for
300 steps, and on the same model before training (its starting weights: the control), seeds 0-19; and with the
relation labels shuffled among the trained routings (chance, ``SHUFFLES`` shuffles per seed). Verdicts: trained −
untrained, paired t with Holm's step-down over the two budgets (``helpers.stats``).

Made by ``python -m helpers.moe_specialisation`` (about 70 s on one CPU thread), which writes
``helpers/data/moe_specialisation.json``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from helpers.fact_lookup import FactLookup, LookupData, build_lookup, lookup_data, train_lookup
from helpers.stats import Verdict, holm, paired_difference

PATH = Path(__file__).parent / "data" / "moe_specialisation.json"
SEEDS: tuple[int, ...] = tuple(range(20))
ARM = "MoE"
SHUFFLES = 20


def relation_information(expert: torch.Tensor, groups: torch.Tensor) -> float:
    """``expert`` (N,) long, each fact's expert; ``groups`` (N,) long, its label -> ``I(group; expert) /
    H(group)``: 0 when the expert says nothing about the group, 1 when it determines it."""
    if expert.shape != groups.shape or expert.dim() != 1 or expert.numel() == 0:
        raise ValueError(f"expert and groups must be the same non-empty (N,) shape, got {tuple(expert.shape)} "
                         f"and {tuple(groups.shape)}")
    _, g = groups.unique(return_inverse=True)
    _, e = expert.unique(return_inverse=True)
    joint = torch.zeros(int(g.max()) + 1, int(e.max()) + 1, dtype=torch.float64)
    joint.index_put_((g, e), torch.ones(len(g), dtype=torch.float64), accumulate=True)
    joint /= joint.sum()
    pg, pe = joint.sum(1, keepdim=True), joint.sum(0, keepdim=True)
    nz = joint > 0
    mi = float((joint[nz] * (joint[nz] / (pg * pe).expand_as(joint)[nz]).log()).sum())
    h = float(-(pg[pg > 0] * pg[pg > 0].log()).sum())
    return mi / h if h > 0 else 0.0


def load_ratio(expert: torch.Tensor, n_experts: int = 8) -> float:
    """The busiest expert's facts over the mean (1: even)."""
    counts = torch.bincount(expert, minlength=n_experts).double()
    return float(counts.max() / counts.mean())


@torch.no_grad()
def top1_experts(model: FactLookup, data: LookupData) -> torch.Tensor:
    """``(N,)`` long: the expert each fact is routed to first (eval mode)."""
    model.eval()
    return model.ffn.route(model.ln(model.inputs(data.ids))).expert_index[:, 0]


def relations(data: LookupData) -> torch.Tensor:
    """``(N,)`` long: each fact's relation."""
    return data.ids[:, 0] % len(data.relations)


@dataclass
class Specialisation:
    """Relation information per seed: ``untrained`` ``(seeds,)``; ``trained`` and ``shuffled`` by step budget;
    ``load`` (busiest / mean) by routing: ``0`` untrained, else the step budget."""

    seeds: list[int]
    lrs: dict[int, float]
    untrained: torch.Tensor
    trained: dict[int, torch.Tensor]
    shuffled: dict[int, torch.Tensor]
    load: dict[int, torch.Tensor]

    def verdicts(self) -> list[Verdict]:
        """Trained − untrained at each budget, one Holm family."""
        return holm({f"{steps} steps, trained − untrained": paired_difference(self.trained[steps], self.untrained)
                     for steps in self.trained})

    def lines(self) -> list[str]:
        """The readout: mean information and load of each routing, then the verdicts."""
        budgets = list(self.trained)
        rows = [("untrained", self.untrained, self.load[0])] + [
            (f"trained {s} steps", self.trained[s], self.load[s]) for s in budgets]
        chance = " and ".join(f"{float(self.shuffled[s].mean()):.2f}" for s in budgets)
        return ([f"top-1 MoE, mean of seeds {self.seeds[0]}–{self.seeds[-1]}:  relation information   "
                 "busiest expert / mean load"]
                + [f"  {name:<18}{float(v.mean()):>24.2f}{float(ld.mean()):>28.2f}" for name, v, ld in rows]
                + [f"  relations shuffled among the trained routings: {chance}",
                   f"paired t, Holm over these {len(budgets)}:"]
                + ["  " + v.line(compact=True, digits=2) for v in self.verdicts()])


def measure(data: LookupData | None = None, seeds: Sequence[int] = SEEDS, lrs: dict[int, float] | None = None
            ) -> Specialisation:
    """Train the top-1 MoE for each budget of ``lrs`` (steps -> rate; default: the race's tuned rates) on each
    seed; relation information and load before training and after."""
    from helpers.moe_race import ARMS, load_race

    data = lookup_data() if data is None else data
    if lrs is None:
        race = load_race()
        lrs = {steps: race.runs[steps][ARM].lr for steps in race.budgets}
    groups = relations(data)
    untrained, trained, shuffled = [], {s: [] for s in lrs}, {s: [] for s in lrs}
    load: dict[int, list[float]] = {0: [], **{s: [] for s in lrs}}
    for seed in seeds:
        expert = top1_experts(build_lookup(data, ARMS[ARM], 8, seed), data)
        untrained.append(relation_information(expert, groups))
        load[0].append(load_ratio(expert))
        for steps, lr in lrs.items():
            model = build_lookup(data, ARMS[ARM], 8, seed)
            train_lookup(model, data, steps=steps, lr=lr)
            expert = top1_experts(model, data)
            trained[steps].append(relation_information(expert, groups))
            load[steps].append(load_ratio(expert))
            g = torch.Generator().manual_seed(seed)
            shuffled[steps].append(sum(
                relation_information(expert, groups[torch.randperm(len(groups), generator=g)])
                for _ in range(SHUFFLES)) / SHUFFLES)
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return Specialisation([int(s) for s in seeds], {int(s): float(lr) for s, lr in lrs.items()}, t(untrained),
                          {s: t(v) for s, v in trained.items()}, {s: t(v) for s, v in shuffled.items()},
                          {s: t(v) for s, v in load.items()})


def save(result: Specialisation, path: str | Path = PATH) -> Path:
    r = lambda v: [round(float(x), 5) for x in v]  # noqa: E731
    record = {"seeds": result.seeds, "lrs": {str(s): lr for s, lr in result.lrs.items()},
              "untrained": r(result.untrained), "trained": {str(s): r(v) for s, v in result.trained.items()},
              "shuffled": {str(s): r(v) for s, v in result.shuffled.items()},
              "load": {str(s): r(v) for s, v in result.load.items()}}
    path = Path(path)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def load(path: str | Path = PATH) -> Specialisation:
    r = json.loads(Path(path).read_text())
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return Specialisation(r["seeds"], {int(s): lr for s, lr in r["lrs"].items()}, t(r["untrained"]),
                          {int(s): t(v) for s, v in r["trained"].items()},
                          {int(s): t(v) for s, v in r["shuffled"].items()}, {int(s): t(v) for s, v in r["load"].items()})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(PATH))
    args = parser.parse_args(argv)
    result = measure()
    print("\n".join(result.lines()))
    print("written:", save(result, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
