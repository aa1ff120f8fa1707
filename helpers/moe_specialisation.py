"""Does the race's top-1 MoE route by relation, and more so once trained? (Notebook 07, section 4.)

DeepSeekMoE argues for expert specialisation. Section 4's facts come labelled (152 countries × 4 relations), so
one number reads it: the **relation purity** of a routing, the share of the facts whose expert (top-1) is their
relation's most common expert, ``Σ_r max_e #(relation r, expert e) / N``. 1: each relation has one expert;
about 1/8 + a little: routing unrelated to the relation.

Measured on section 4's top-1 MoE (``helpers.moe_race.ARMS["MoE"]``) trained at its race rates for 100 and for
300 steps, and on the same model before training (its starting weights: the control), seeds 0-9; and with the
relation labels shuffled among the trained routings (chance, ``SHUFFLES`` shuffles per seed). Verdicts: trained −
untrained, paired t with Holm's step-down over the two budgets (``helpers.stats``).

Made by ``python -m helpers.moe_specialisation`` (about 35 s on one CPU thread), which writes
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
SEEDS: tuple[int, ...] = tuple(range(10))
ARM = "MoE"
SHUFFLES = 20


def relation_purity(expert: torch.Tensor, groups: torch.Tensor) -> float:
    """``expert`` (N,) long, each fact's expert; ``groups`` (N,) long, its label -> the share of the facts whose
    expert is their group's most common one."""
    if expert.shape != groups.shape or expert.dim() != 1 or expert.numel() == 0:
        raise ValueError(f"expert and groups must be the same non-empty (N,) shape, got {tuple(expert.shape)} "
                         f"and {tuple(groups.shape)}")
    n_experts = int(expert.max()) + 1
    return sum(int(torch.bincount(expert[groups == g], minlength=n_experts).max())
               for g in groups.unique()) / expert.numel()


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
    """Relation purity per seed: ``untrained`` ``(seeds,)``; ``trained`` and ``shuffled`` by step budget."""

    seeds: list[int]
    lrs: dict[int, float]
    untrained: torch.Tensor
    trained: dict[int, torch.Tensor]
    shuffled: dict[int, torch.Tensor]

    def verdicts(self) -> list[Verdict]:
        """Trained − untrained at each budget, one Holm family."""
        return holm({f"{steps} steps, trained − untrained": paired_difference(self.trained[steps], self.untrained)
                     for steps in self.trained})

    def lines(self) -> list[str]:
        """The readout: mean purity of each routing, then the verdicts."""
        budgets = list(self.trained)
        means = [f"untrained {float(self.untrained.mean()):.2f}"] + [
            f"trained {s} steps {float(self.trained[s].mean()):.2f}" for s in budgets]
        chance = " and ".join(f"{float(self.shuffled[s].mean()):.2f}" for s in budgets)
        return ([f"relation purity, top-1 MoE, mean of seeds {self.seeds[0]}–{self.seeds[-1]}: " + ", ".join(means)
                 + f" (relations shuffled: {chance})",
                 f"paired t, Holm over these {len(budgets)}:"]
                + ["  " + v.line(compact=True, digits=2) for v in self.verdicts()])


def measure(data: LookupData | None = None, seeds: Sequence[int] = SEEDS, lrs: dict[int, float] | None = None
            ) -> Specialisation:
    """Train the top-1 MoE for each budget of ``lrs`` (steps -> rate; default: the race's tuned rates) on each
    seed; purity before training and after."""
    from helpers.moe_race import ARMS, load_race

    data = lookup_data() if data is None else data
    if lrs is None:
        race = load_race()
        lrs = {steps: race.runs[steps][ARM].lr for steps in race.budgets}
    groups = relations(data)
    untrained, trained, shuffled = [], {s: [] for s in lrs}, {s: [] for s in lrs}
    for seed in seeds:
        untrained.append(relation_purity(top1_experts(build_lookup(data, ARMS[ARM], 8, seed), data), groups))
        for steps, lr in lrs.items():
            model = build_lookup(data, ARMS[ARM], 8, seed)
            train_lookup(model, data, steps=steps, lr=lr)
            expert = top1_experts(model, data)
            trained[steps].append(relation_purity(expert, groups))
            g = torch.Generator().manual_seed(seed)
            shuffled[steps].append(sum(relation_purity(expert, groups[torch.randperm(len(groups), generator=g)])
                                       for _ in range(SHUFFLES)) / SHUFFLES)
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return Specialisation([int(s) for s in seeds], {int(s): float(lr) for s, lr in lrs.items()}, t(untrained),
                          {s: t(v) for s, v in trained.items()}, {s: t(v) for s, v in shuffled.items()})


def save(result: Specialisation, path: str | Path = PATH) -> Path:
    r = lambda v: [round(float(x), 5) for x in v]  # noqa: E731
    record = {"seeds": result.seeds, "lrs": {str(s): lr for s, lr in result.lrs.items()},
              "untrained": r(result.untrained), "trained": {str(s): r(v) for s, v in result.trained.items()},
              "shuffled": {str(s): r(v) for s, v in result.shuffled.items()}}
    path = Path(path)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def load(path: str | Path = PATH) -> Specialisation:
    r = json.loads(Path(path).read_text())
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return Specialisation(r["seeds"], {int(s): lr for s, lr in r["lrs"].items()}, t(r["untrained"]),
                          {int(s): t(v) for s, v in r["trained"].items()},
                          {int(s): t(v) for s, v in r["shuffled"].items()})


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
