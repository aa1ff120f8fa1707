r"""What a capacity factor costs in fit: notebook 05's trained MoE language models evaluated with and without one.

A run is ``helpers.moe_runs.train_run`` (15 steps at lr 1e-2, top-1, trained dropless). ``capacity_cost`` then
scores the same model on all 608 sentences as one batch (``helpers.moe_runs.evaluate``: cross-entropy over every
target) with every MoE layer set to each factor of ``FACTORS`` in turn (``None``: dropless), and restores the
model. A dropped slot leaves its token's FFN output at 0 (the residual carries it on), so the extra cross-entropy
against dropless is what the drops cost. Shipped for α = 0 and α = 0.1, seeds 0-19, in ``COST_PATH``, made by::

    python -m helpers.moe_capacity_cost --results      # about two minutes of one CPU core

Seeds 10-19 were added after looking at seeds 0-9 (whose gap between the two arms' costs was not resolved), to
both files with the same commands (the drops keep ten seeds).

``--trained`` trains the same arms and seeds with every MoE layer at capacity factor ``TRAIN_FACTOR`` (1) instead,
and also keeps the share of slots dropped at each step (``run_trained``, shipped in ``TRAINED_PATH``)::

    python -m helpers.moe_capacity_cost --trained

``--seeds`` and ``--out`` make a smaller file (the tests make one). The notebook evaluates its five live runs of
each arm the same way and checks them against the file.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from helpers.facts import FactDataset, load_facts, make_dataset
from helpers.moe import MoE
from helpers.moe_runs import evaluate, train_run
from helpers.progress import progress as progress_bar
from helpers.stats import paired_difference

#: capacity factors of the evaluation, dropless first
FACTORS: tuple[float | None, ...] = (None, 2.0, 1.25, 1.0)
ARMS: tuple[str, ...] = ("MoE, α = 0", "MoE, α = 0.1")
SEEDS: tuple[int, ...] = tuple(range(10))
#: the seeds of both shipped files (10-19 added after looking at 0-9)
COST_SEEDS: tuple[int, ...] = tuple(range(20))
LR = 1e-2
#: Where ``python -m helpers.moe_capacity_cost --results`` writes and ``load_cost`` reads.
COST_PATH = Path(__file__).parent / "data" / "moe_capacity_cost.json"
#: the capacity factor of the runs trained with the capacity on (``run_trained``), and where they are shipped
TRAIN_FACTOR = 1.0
TRAINED_PATH = Path(__file__).parent / "data" / "moe_capacity_trained.json"
_DIGITS = 5


def capacity_cost(model: nn.Module, data: FactDataset, factors: Sequence[float | None] = FACTORS) -> list[float]:
    """Cross-entropy over every target of ``data`` (one batch), one value per capacity factor of ``factors``
    applied to every ``MoE`` layer of ``model``; each layer's own factor is restored afterwards."""
    layers = [m for m in model.modules() if isinstance(m, MoE)]
    if not layers:
        raise ValueError("model must contain at least one helpers.moe.MoE layer")
    saved = [m.capacity_factor for m in layers]
    try:
        out = []
        for factor in factors:
            for m in layers:
                m.capacity_factor = factor
            out.append(evaluate(model, data)[0])
        return out
    finally:
        for m, factor in zip(layers, saved):
            m.capacity_factor = factor


def run_cost(seeds: Sequence[int] = COST_SEEDS, *, progress: bool = True) -> dict:
    """``{"factors": [...], "ce": {arm: {seed: [ce at each factor]}}}`` for ``ARMS`` (seeds as strings)."""
    data = make_dataset(load_facts())
    out: dict = {"factors": list(FACTORS), "lr": LR, "ce": {}}
    for arm, seed in progress_bar([(a, s) for a in ARMS for s in seeds], desc="runs", disable=not progress):
        ce = capacity_cost(train_run(arm, seed, data, lr=LR).model, data)
        out["ce"].setdefault(arm, {})[str(seed)] = [round(v, _DIGITS) for v in ce]
    return out


def run_trained(seeds: Sequence[int] = COST_SEEDS, factor: float = TRAIN_FACTOR, *, progress: bool = True) -> dict:
    """The same arms and seeds (same initial weights and batches) trained with every MoE layer at ``factor``, then
    scored like ``run_cost``: ``{"factor", "lr", "factors", "ce": {arm: {seed: [ce at each of FACTORS]}},
    "dropped": {arm: {seed: [share of slots dropped at each training step, mean of the layers]}}}``."""
    data = make_dataset(load_facts())
    out: dict = {"factor": factor, "lr": LR, "factors": list(FACTORS), "ce": {}, "dropped": {}}
    for arm, seed in progress_bar([(a, s) for a in ARMS for s in seeds], desc="runs", disable=not progress):
        run = train_run(arm, seed, data, lr=LR, capacity_factor=factor)
        out["ce"].setdefault(arm, {})[str(seed)] = [round(v, _DIGITS) for v in capacity_cost(run.model, data)]
        out["dropped"].setdefault(arm, {})[str(seed)] = [round(v, _DIGITS) for v in run.log.dropped.mean(1).tolist()]
    return out


def load_cost(path: str | Path | None = None, *, trained: bool = False) -> dict:
    """The file written by ``main`` (default: the shipped ``COST_PATH``, or ``TRAINED_PATH`` if ``trained``)."""
    path = (TRAINED_PATH if trained else COST_PATH) if path is None else Path(path)
    if not path.is_file():
        flag = "--trained" if trained else "--results"
        raise FileNotFoundError(f"no capacity costs at {path}; make them with python -m helpers.moe_capacity_cost "
                                f"{flag}")
    return json.loads(path.read_text(encoding="utf-8"))


def cost_values(cost: dict, arm: str, factor: float | None, seeds: Sequence[int] | None = None) -> torch.Tensor:
    """``(seeds,)`` float64: the cross-entropy of ``arm`` at ``factor``, seeds in the file's order unless given."""
    table = cost["ce"][arm]
    column = cost["factors"].index(factor)
    return torch.tensor([table[k][column] for k in (list(table) if seeds is None else [str(s) for s in seeds])],
                        dtype=torch.float64)


def cost_table(cost: dict, trained: dict | None = None, fixed: dict[str, float] | None = None) -> str:
    """Printable lines: mean cross-entropy over the file's seeds per arm (rows) and factor (columns); with
    ``trained`` (``run_trained``'s file), its arms follow as rows "…, trained at c = 1"; ``fixed`` adds rows of a
    model no factor changes (name → its cross-entropy, printed in every column), e.g. the model with no FFN."""
    names = ["dropless" if f is None else f"c = {f:g}" for f in cost["factors"]]
    rows = [(arm if trained is None else f"{arm}, trained dropless", cost, arm) for arm in cost["ce"]]
    if trained is not None:
        rows += [(f"{arm}, trained at c = {trained['factor']:g}", trained, arm) for arm in trained["ce"]]
    fixed = dict(fixed or {})
    width = max(16, *(len(name) + 2 for name in [*(r[0] for r in rows), *fixed]))
    lines = [f"{'':<{width}}" + "".join(f"{n:>10}" for n in names)]
    for name, table, arm in rows:
        lines.append(f"{name:<{width}}" + "".join(f"{cost_values(table, arm, f).mean():>10.3f}" for f in cost["factors"]))
    for name, value in fixed.items():
        lines.append(f"{name:<{width}}" + f"{value:>10.3f}" * len(cost["factors"]))
    return "\n".join(lines)


def trained_family(trained: dict, cost: dict, *, compare_arms: bool = False) -> dict:
    """The Holm family's rows for ``run_trained``'s file, seed by seed, per arm: cross-entropy at the training
    factor of the runs trained at it − of the same seeds trained dropless (``cost``), both scored at that factor.
    With ``compare_arms``, one more row: among the runs trained at the factor, the last arm (α = 0.1) − the first
    (α = 0), scored at that factor."""
    f = trained["factor"]
    family = {f"{arm.split(', ')[1]}, CE at c = {f:g}: trained at c = {f:g} − dropless": paired_difference(
        cost_values(trained, arm, f), cost_values(cost, arm, f, [int(s) for s in trained["ce"][arm]]))
        for arm in trained["ce"]}
    if compare_arms:
        first, *_, last = list(trained["ce"])
        family[f"trained at c = {f:g}, CE at c = {f:g}: {last.split(', ')[1]} − {first.split(', ')[1]}"] = (
            paired_difference(cost_values(trained, last, f), cost_values(trained, first, f)))
    return family


def trained_scored_family(trained: dict) -> dict:
    """Per arm, seed by seed, the runs trained at the training factor: cross-entropy scored at that factor −
    scored dropless (the same models)."""
    f = trained["factor"]
    return {f"{arm.split(', ')[1]}, trained at c = {f:g}: CE at c = {f:g} − dropless": paired_difference(
        cost_values(trained, arm, f), cost_values(trained, arm, None)) for arm in trained["ce"]}


def dropped_in_training(trained: dict, steps: Sequence[int] = (1, 5, 10, 15)) -> str:
    """One printable line per arm of ``run_trained``'s file: the share of slots dropped at the given training
    steps (counted from 1), mean over the file's seeds."""
    lines = []
    for arm, table in trained["dropped"].items():
        share = torch.tensor(list(table.values()), dtype=torch.float64).mean(0)
        lines.append(f"  {arm}: " + ", ".join(f"step {s} {share[s - 1]:.2f}" for s in steps))
    return "\n".join(lines)


def trained_again(arm: str, seed: int, data: FactDataset, trained: dict) -> float:
    """Train ``arm``'s ``seed`` again at the file's factor; the largest |live − file| over its cross-entropies
    (``capacity_cost``) and its shares dropped per training step."""
    run = train_run(arm, seed, data, lr=trained["lr"], capacity_factor=trained["factor"])
    ce = largest_cost_difference({(arm, seed): capacity_cost(run.model, data)}, trained)
    dropped = run.log.dropped.mean(1).double() - torch.tensor(trained["dropped"][arm][str(seed)], dtype=torch.float64)
    return max(ce, float(dropped.abs().max()))


def cost_family(cost: dict, factors: Sequence[float] = (1.25, 1.0)) -> dict:
    """The Holm family, seed by seed: per arm and factor, cross-entropy at the factor − dropless; then per factor,
    that extra cross-entropy of the last arm (α = 0.1) − the first (α = 0)."""
    extra = {(arm, f): cost_values(cost, arm, f) - cost_values(cost, arm, None) for arm in cost["ce"] for f in factors}
    family = {f"{arm.split(', ')[1]}: CE at c = {f:g} − dropless": paired_difference(
        cost_values(cost, arm, f), cost_values(cost, arm, None)) for arm, f in extra}
    first, last = list(cost["ce"])[0], list(cost["ce"])[-1]
    for f in factors:
        family[f"extra CE at c = {f:g}: {last.split(', ')[1]} − {first.split(', ')[1]}"] = paired_difference(
            extra[last, f], extra[first, f])
    return family


def largest_cost_difference(live: dict[tuple[str, int], Sequence[float]], cost: dict) -> float:
    """Largest |live − file| over ``live``'s {(arm, seed): ``capacity_cost`` values}."""
    return max(abs(v - f) for (arm, seed), row in live.items() for v, f in zip(row, cost["ce"][arm][str(seed)]))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.moe_capacity_cost --results``: train, evaluate at each capacity factor, store."""
    parser = argparse.ArgumentParser(prog="python -m helpers.moe_capacity_cost", description=main.__doc__)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--results", action="store_true", help="train dropless, evaluate at each factor, write")
    which.add_argument("--trained", action="store_true", help=f"train at c = {TRAIN_FACTOR:g} instead (run_trained)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="default: 0 to 19")
    parser.add_argument("--out", default=None, help=f"default: {COST_PATH} (--trained: {TRAINED_PATH})")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                        # as in the notebooks (helpers.env.setup)
    try:
        flag = "--trained" if args.trained else "--results"
        seeds = args.seeds or list(COST_SEEDS)
        made = run_trained(seeds) if args.trained else run_cost(seeds)
        record = {"made_by": f"python -m helpers.moe_capacity_cost {flag}", **made}
    finally:
        torch.set_num_threads(threads)
    out = Path(args.out or (TRAINED_PATH if args.trained else COST_PATH))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
