"""Section 6 of notebook 03 on every fact: the knock-out family for the ten fact models.

For each seed, ``knockouts_at_sites`` (the six neuron sets of ``knockout_sets``, 40 neurons each) and
``random_direction_drops`` (a random vector as long as "other" removes) at three sites (layer 0 at the subject,
layer 0 and layer 1 at the last word), on all 608 facts, summarised as means over the facts. Ten seeds take
about 15 s of CPU, too slow for the notebook's budget; made by

    python -m helpers.knockout_runs        # writes helpers/data/knockout_runs.json

and checked in the notebook by recomputing seed 0. The same family with 20 or 80 neurons per set (is the
verdict a property of the set size?):

    python -m helpers.knockout_runs --n-off 20     # writes helpers/data/knockout_runs_20.json (80 likewise)

and with the same sets set to each neuron's mean coefficient instead of zero (does the ablation decide it?):

    python -m helpers.knockout_runs --ablation mean     # writes helpers/data/knockout_runs_mean.json
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.facts import RELATIONS, FactDataset, load_facts, make_dataset
from helpers.interventions import knockouts_at_sites, random_direction_drops
from helpers.memory import collect, token_positions

DATA_PATH = Path(__file__).parent / "data" / "knockout_runs.json"
N_OFF = 40
QUANTITIES = ("drop", "activity silenced", "size removed", "neurons off")


def sites(data: FactDataset) -> dict[str, tuple[int, torch.Tensor]]:
    """The notebook's three sites: name -> ``(layer, (N,) positions)``."""
    subject_pos = token_positions(data.ids, torch.tensor([data.vocab.stoi[f.subject] for f in data.facts]))
    return {"L0 subject": (0, subject_pos), "L0 last word": (0, data.answer_pos), "L1 last word": (1, data.answer_pos)}


@torch.no_grad()
def summarise(model: torch.nn.Module, data: FactDataset, seed: int, n_off: int = N_OFF, ablation: str = "zero") -> dict:
    """One model's family on every fact, with ``n_off`` neurons in "own", "other" and "random", as means over
    the facts (``ablation``: ``"zero"``, or ``"mean"``: see ``knockouts_at_sites``).

    Returns ``{"sets": {site: {set: [drop in P(answer), activity silenced, size removed, neurons off]}},
    "random direction": {site: drop}, "shared": {site: share of "own" also in "other"},
    "matched activity gap": max |matched − other| activity silenced over facts and sites,
    "size gap below 1e-4": [facts, facts and sites counted]}`` (size-matched − other, size removed)."""
    relation_of = torch.tensor([list(RELATIONS).index(f.relation) for f in data.facts])
    where, trace, n = sites(data), collect(model, data.ids), len(data.facts)
    ko = knockouts_at_sites(model, trace.coefficients, data.ids, data.answer_pos, data.answer_id, relation_of,
                            where, n_off, n_facts=n, seed=seed, ablation=ablation)
    rand = random_direction_drops(model, trace.outputs, data.ids, data.answer_pos, data.answer_id, where,
                                  {site: ko[site, "other"][2] for site in where}, n_facts=n, seed=seed)
    names = [name for site, name in ko if site == next(iter(where)) and name != "shared"]
    size_gap = torch.cat([(ko[site, "size-matched"][2] - ko[site, "other"][2]).abs() for site in where])
    return {"sets": {site: {name: [q.mean().item() for q in ko[site, name]] for name in names} for site in where},
            "random direction": {site: rand[site].mean().item() for site in where},
            "shared": {site: ko[site, "shared"].mean().item() for site in where},
            "matched activity gap": max((ko[site, "matched"][1] - ko[site, "other"][1]).abs().max().item()
                                        for site in where),
            "size gap below 1e-4": [int((size_gap < 1e-4).sum()), len(size_gap)]}


def data_path(n_off: int = N_OFF, ablation: str = "zero") -> Path:
    """The shipped file for ``n_off`` neurons per set (the notebook's 40, zero ablation: ``DATA_PATH``)."""
    if ablation == "mean":
        return DATA_PATH.with_name("knockout_runs_mean.json" if n_off == N_OFF else f"knockout_runs_{n_off}_mean.json")
    return DATA_PATH if n_off == N_OFF else DATA_PATH.with_name(f"knockout_runs_{n_off}.json")


def make(seeds: Sequence[int], path: Path | None = None, n_off: int = N_OFF, ablation: str = "zero") -> dict:
    """Run ``summarise`` for the fact models of ``seeds`` (each with its own seed) with ``n_off`` neurons per set
    and write them to ``path`` (default ``data_path(n_off, ablation)``)."""
    from helpers.fact_model import load_fact_model
    torch.set_num_threads(1)
    data = make_dataset(load_facts())
    runs = {str(s): summarise(load_fact_model(data, seed=s)[0], data, seed=s, n_off=n_off, ablation=ablation)
            for s in seeds}
    command = ("python -m helpers.knockout_runs" + ("" if n_off == N_OFF else f" --n-off {n_off}")
               + ("" if ablation == "zero" else f" --ablation {ablation}"))
    result = {"made_by": command, "n_off": n_off, "ablation": ablation, "runs": runs,
              "environment": {"torch": torch.__version__, "python": platform.python_version()}}
    Path(data_path(n_off, ablation) if path is None else path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def load(path: Path = DATA_PATH) -> dict[int, dict]:
    """The shipped runs: ``{seed: summarise(...)}``."""
    return {int(s): r for s, r in json.loads(Path(path).read_text())["runs"].items()}


def max_difference(a: dict, b: dict) -> float:
    """Largest absolute difference between two ``summarise`` results (every number they hold)."""
    def flat(x):
        if isinstance(x, dict):
            return [v for k in sorted(x) for v in flat(x[k])]
        return [float(v) for v in x] if isinstance(x, list) else [float(x)]
    fa, fb = flat(a), flat(b)
    if len(fa) != len(fb):
        raise ValueError(f"a and b must hold the same numbers, got {len(fa)} and {len(fb)}")
    return max(abs(x - y) for x, y in zip(fa, fb))


def live_gap(model: torch.nn.Module, data: FactDataset, seed: int = 0, n_offs: Sequence[int] = (N_OFF, 20)) -> float:
    """Largest ``max_difference`` between ``summarise`` run now on ``model`` (the fact model of ``seed``) and the
    shipped file's run of that seed, over the files of ``n_offs`` neurons per set: the notebook's live check."""
    return max(max_difference(summarise(model, data, seed=seed, n_off=n), load(data_path(n))[seed]) for n in n_offs)


COMPARED = ("own", "activity-matched", "size-matched", "random size-matched", "random direction")
"""The sets notebook 03 compares with "other" (in the files the activity-matched set is called "matched")."""


def per_seed_mean(runs: dict, site: str, name: str, seeds: Sequence[int], quantity: str = "drop") -> list[float]:
    """One value per seed from ``load()``: the mean over the facts of ``quantity`` (one of ``QUANTITIES``) when
    set ``name`` is off at ``site``; for ``"random direction"`` (a random vector as long as "other" removes),
    the drop in P(right answer)."""
    if name == "random direction":
        return [runs[s]["random direction"][site] for s in seeds]
    j = QUANTITIES.index(quantity)
    return [runs[s]["sets"][site][name.removeprefix("activity-")][j] for s in seeds]


def family(runs: dict, site_names: Sequence[str], seeds: Sequence[int]) -> dict:
    """Set − other, drop in P(right answer), paired by seed: one comparison per set of ``COMPARED`` and site."""
    from helpers.stats import paired_difference
    return {f"{site}: {name} − other": paired_difference(per_seed_mean(runs, site, name, seeds),
                                                         per_seed_mean(runs, site, "other", seeds))
            for site in site_names for name in COMPARED}


def grid(family_: dict, site_names: Sequence[str]) -> str:
    """``family``'s Holm verdicts as a grid: one line per set, one cell per site (mean set − other drop, ▲/▼
    resolved, · not), under a header naming the family's size and how many are resolved."""
    from helpers.stats import holm
    verdicts = {v.name: v for v in holm(family_)}
    mark = {"higher": "▲", "lower": "▼", "not resolved": "·"}
    width = max(len(name) for name in COMPARED) + len(" − other") + 2
    lines = [f"Holm's step-down over {len(verdicts)} comparisons (5 % two-sided): "
             f"{sum(v.resolved for v in verdicts.values())} resolved (▲ ▼), · not resolved",
             f"  {'':{width}s}" + "".join(f"{site:16s}" for site in site_names).rstrip()]
    for name in COMPARED:
        cells = [verdicts[f"{site}: {name} − other"] for site in site_names]
        lines.append(f"  {name + ' − other':{width}s}" +
                     "".join(f"{v.comparison.mean:+.3f} {mark[v.verdict]}{'':8s}" for v in cells).rstrip())
    return "\n".join(lines)


def same_verdicts(site_names: Sequence[str], seeds: Sequence[int], n_offs: Sequence[int] = (20, 80)) -> dict[int, int]:
    """``{n: how many of the family's Holm verdicts at n neurons per set equal those at N_OFF}``, from the
    shipped files of each set size."""
    from helpers.stats import holm
    verdicts = {n: {v.name: v.verdict for v in holm(family(load(data_path(n)), site_names, seeds))}
                for n in (*n_offs, N_OFF)}
    return {n: sum(verdicts[n][c] == verdicts[N_OFF][c] for c in verdicts[N_OFF]) for n in n_offs}


def mean_ablation_changes(site_names: Sequence[str], seeds: Sequence[int]) -> dict[str, tuple[str, str]]:
    """The family's rows whose Holm verdict differs between zero ablation (``DATA_PATH``) and mean ablation
    (``data_path(ablation="mean")``, the same sets): ``{row: (zero verdict, mean verdict)}``."""
    from helpers.stats import holm
    zero, mean = ({v.name: v.verdict for v in holm(family(load(p), site_names, seeds))}
                  for p in (DATA_PATH, data_path(ablation="mean")))
    return {row: (zero[row], mean[row]) for row in zero if zero[row] != mean[row]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--n-off", type=int, default=N_OFF, help="neurons per set (default 40)")
    parser.add_argument("--ablation", choices=("zero", "mean"), default="zero",
                        help="zero the chosen coefficients (default) or set them to their mean over the facts")
    parser.add_argument("--out", type=Path, default=None, help="default: helpers/data/knockout_runs[_N][_mean].json")
    args = parser.parse_args()
    make(args.seeds, args.out, args.n_off, args.ablation)


class Folded:
    """Lines shown with the rest folded: displays ``lines[:shown]`` (its ``text/plain``) and, in HTML, puts
    ``lines[shown:]`` in a ``<details>`` block labelled ``label``."""

    def __init__(self, lines: Sequence[str], shown: int = 1, label: str = "the checks behind this line (click)"):
        self.lines, self.shown, self.label = list(lines), shown, label

    def __repr__(self) -> str:
        return "\n".join(self.lines[:self.shown])

    def _repr_html_(self) -> str:
        import html
        def pre(lines: Sequence[str]) -> str:
            return "<pre>" + html.escape("\n".join(lines)) + "</pre>"
        return (pre(self.lines[:self.shown]) + f"<details><summary>{html.escape(self.label)}</summary>"
                + pre(self.lines[self.shown:]) + "</details>")


def verdict_grid(family_: dict, rows: Sequence[tuple[str, str]], columns: Sequence[str], title: str,
                 width: int = 0) -> list[str]:
    """Holm's verdicts over ``family_`` as a small grid: a header line (``title``, then ``columns``), then one line
    per ``(label, name)`` in ``rows``, each cell the mean difference of comparison ``f"{column}: {name}"`` and its
    verdict (``higher``, ``lower``, ``not resolved``). Only the rows asked for are shown; Holm runs over all of
    ``family_``. ``width`` (optional): the least width of the label column, to align several grids."""
    from helpers.stats import holm
    verdicts = {v.name: v for v in holm(family_)}
    width = max(width, len(title) + 2, *(len(label) + 4 for label, _ in rows))
    lines = [f"{title:<{width}}" + "".join(f"{c:<21s}" for c in columns).rstrip()]
    for label, name in rows:
        cells = [verdicts[f"{c}: {name}"] for c in columns]
        lines.append(f"{'  ' + label:<{width}}" + "".join(f"{v.comparison.mean:+.3f} {v.verdict:<14s}"
                                                        for v in cells).rstrip())
    return lines


def verdict_summary(family_: dict) -> str:
    """Holm's verdicts over ``family_`` in one line: ``name mean verdict`` per comparison, ``;``-separated, after
    the family's size and the number of runs (the t values and seeds: ``stats.holm_table``)."""
    from helpers.stats import holm
    verdicts = holm(family_)
    return (f"{verdicts[0].comparison.n} seeds, Holm over {len(verdicts)}: "
            + "; ".join(f"{v.name} {v.comparison.mean:+.3f} {v.verdict}" for v in verdicts))


def verdict_line(family_: dict, site_names: Sequence[str]) -> str:
    """Section 6's verdict in one line: for own, size-matched, random size-matched and random direction (each −
    other), in how many sites Holm's step-down over ``family_`` resolves it higher (lower for the random
    direction) and the range of the mean differences over the sites."""
    from helpers.stats import holm
    verdicts = {v.name: v for v in holm(family_)}

    def part(name: str, direction: str) -> str:
        cells = [verdicts[f"{site}: {name} − other"] for site in site_names]
        means = [v.comparison.mean for v in cells]
        return (f"{name} {direction} at {sum(v.verdict == direction for v in cells)} of {len(cells)} "
                f"({min(means):+.3f} to {max(means):+.3f})")
    n = next(iter(verdicts.values())).comparison.n
    return (f"set − other at 3 sites, {n} seeds, Holm over {len(verdicts)}: {part('own', 'higher')}; matched on length, "
            f"{part('size-matched', 'higher')}, {part('random size-matched', 'higher')}; "
            f"{part('random direction', 'lower')}")
