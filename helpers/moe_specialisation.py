"""Do the race's experts sort the facts by relation? (Notebook 07, section 4.)

DeepSeekMoE argues that routed experts specialise, common knowledge going to the shared one. Section 4's facts come
labelled (152 countries × 4 relations), so one number reads a routing: its **relation information**,
``I(relation; expert) / H(relation)``, the share of a fact's relation (log 4 nats) that its first-choice expert
reveals: 1 when each expert serves one relation, 0 when the expert says nothing about it. (The share of a
relation's facts on its most-used expert would be capped by an even load; this is not.)

Measured on two of the race's arms (``helpers.moe_race.ARMS``), the top-1 MoE and DeepSeekMoE, trained 100 steps
at their race rates on seeds 0-19 (the race's own runs), and on the same models before training (the control);
chance: the relation labels shuffled among the trained routings. The measure grows with the number of experts
(``untrained_share``), so the two arms' values are not compared with each other.

Verdicts, paired t with Holm's step-down over these two (``helpers.stats``): trained − untrained in each probed
arm.

Made by ``python -m helpers.moe_specialisation`` (about two minutes on one CPU thread), which writes
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
ARMS_PROBED: tuple[str, ...] = ("MoE", "DeepSeekMoE")
NAMES = {"MoE": "top-1 MoE", "DeepSeekMoE": "DeepSeekMoE"}
SEEDS: tuple[int, ...] = tuple(range(20))
STEPS = 100
SHUFFLES = 20
KEYS = ("untrained", "trained", "shuffled")


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


@torch.no_grad()
def first_experts(model: FactLookup, data: LookupData) -> torch.Tensor:
    """``(N,)`` long: the routed expert each fact goes to first (eval mode)."""
    model.eval()
    return model.ffn.route(model.ln(model.inputs(data.ids))).expert_index[:, 0]


def relations(data: LookupData) -> torch.Tensor:
    """``(N,)`` long: each fact's relation."""
    return data.ids[:, 0] % len(data.relations)


def untrained_share(data: LookupData | None = None, n_experts: int = 31, seeds: Sequence[int] = SEEDS) -> float:
    """The control for the expert count: mean relation information of an untrained top-1 MoE (the race's, with
    ``n_experts`` experts) over ``seeds``. The measure grows with the number of experts a routing splits the facts
    into: 8 experts give about 0.30, 31 (DeepSeekMoE's routed count) about 0.45, so each arm is compared only with
    its own untrained start. No training; well under a second."""
    from helpers.moe_race import ARMS

    data = lookup_data() if data is None else data
    groups, spec = relations(data), {**ARMS["MoE"], "n_experts": n_experts}
    return sum(relation_information(first_experts(build_lookup(data, spec, 8, s), data), groups)
               for s in seeds) / len(seeds)


@dataclass
class Specialisation:
    """Relation information per arm, ``(seeds,)`` each: ``untrained``, ``trained`` and ``shuffled`` (chance)."""

    seeds: list[int]
    steps: int
    lrs: dict[str, float]
    untrained: dict[str, torch.Tensor]
    trained: dict[str, torch.Tensor]
    shuffled: dict[str, torch.Tensor]

    def verdicts(self) -> list[Verdict]:
        """Trained − untrained in each probed arm: one Holm family."""
        return holm({f"{NAMES[a]}, trained − untrained": paired_difference(self.trained[a], self.untrained[a])
                     for a in self.trained})

    def lines(self) -> list[str]:
        """The readout: each arm's mean relation information untrained, trained and shuffled, then the verdicts."""
        verdicts = {v.name.split(",")[0]: v for v in self.verdicts()}
        head = (f"share of a fact's relation its first routed expert reveals, mean of seeds {self.seeds[0]}–"
                f"{self.seeds[-1]}, {self.steps} steps (Holm over the {len(verdicts)} verdicts printed)")
        rows = []
        for a in self.trained:
            v = verdicts[NAMES[a]]
            rows.append(f"  {NAMES[a]:<12} untrained {float(self.untrained[a].mean()):.2f}, trained "
                        f"{float(self.trained[a].mean()):.2f} (relations shuffled: {float(self.shuffled[a].mean()):.2f})"
                        f" | higher in {int((self.trained[a] > self.untrained[a]).sum())} of {len(self.seeds)}, "
                        f"t {v.comparison.t:+.1f} vs {v.threshold:.2f} → {v.verdict}")
        return [head] + rows


def measure(data: LookupData | None = None, seeds: Sequence[int] = SEEDS, steps: int = STEPS,
            lrs: dict[str, float] | None = None) -> Specialisation:
    """Relation information of each probed arm before and after ``steps`` of training (default rates: the race's
    for that budget), on each seed."""
    from helpers.moe_race import ARMS, load_race

    data = lookup_data() if data is None else data
    if lrs is None:
        race = load_race()
        lrs = {arm: race.runs[steps][arm].lr for arm in ARMS_PROBED}
    groups = relations(data)
    out = {key: {arm: [] for arm in ARMS_PROBED} for key in KEYS}
    for arm, lr in lrs.items():
        for seed in seeds:
            model = build_lookup(data, ARMS[arm], 8, seed)
            untrained = relation_information(first_experts(model, data), groups)
            model.train()
            train_lookup(model, data, steps=steps, lr=lr)
            expert = first_experts(model, data)
            out["untrained"][arm].append(untrained)
            out["trained"][arm].append(relation_information(expert, groups))
            g = torch.Generator().manual_seed(seed)
            out["shuffled"][arm].append(sum(
                relation_information(expert, groups[torch.randperm(len(groups), generator=g)])
                for _ in range(SHUFFLES)) / SHUFFLES)
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return Specialisation([int(s) for s in seeds], int(steps), {a: float(lr) for a, lr in lrs.items()},
                          *({a: t(v) for a, v in out[key].items()} for key in KEYS))


def save(result: Specialisation, path: str | Path = PATH) -> Path:
    r = lambda v: [round(float(x), 5) for x in v]  # noqa: E731
    record = {"seeds": result.seeds, "steps": result.steps, "lrs": result.lrs,
              **{key: {a: r(v) for a, v in getattr(result, key).items()} for key in KEYS}}
    path = Path(path)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def load(path: str | Path = PATH) -> Specialisation:
    """The shipped result (``python -m helpers.moe_specialisation`` makes it)."""
    r = json.loads(Path(path).read_text())
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return Specialisation(r["seeds"], r["steps"], r["lrs"],
                          *({a: t(v) for a, v in r[key].items()} for key in KEYS))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help="seeds 0 .. n-1 (default: 20)")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--out", default=str(PATH))
    args = parser.parse_args(argv)
    result = measure(seeds=range(args.seeds), steps=args.steps)
    print("\n".join(result.lines()))
    print(f"wrote {save(result, args.out)}")


if __name__ == "__main__":
    main()
