"""What the "other" control of notebook 03's section 6 is made of, and the comparison it stands for.

Section 6 compares a fact's own 40 most active neurons ("own") with another subject's 40 of the same relation
("other"). About half of "other" are also among the fact's own neurons, so "size-matched own ≈ other" compares
mostly the same neurons. This module splits the two sets, per fact and site (``knockout_runs.sites``):

- **other only** (``other \\ own``): does the part of "other" that is not among the fact's own neurons do anything?
- **own only** (``own \\ other``, the fact-specific neurons) against **shared size-matched**: the shared neurons
  (``own ∩ other``, the ones another subject of the relation also uses) in order of activity, the last in part,
  until the vector removed is as long as the one own-only removes. Facts whose shared neurons cannot reach that
  length are left out of both (``rows matched`` says how many are kept).

Ten seeds take about a minute of CPU; made by

    python -m helpers.knockout_split       # writes helpers/data/knockout_split.json

The own/other sets and donors are those of ``helpers.knockout_runs`` (same generator order), so the file's
"other" rows are the notebook's.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.facts import RELATIONS, FactDataset, load_facts, make_dataset
from helpers.interventions import _size_matched, knockout_drops, knockout_sets, removed_write, same_group_donors
from helpers import knockout_runs as _ko
from helpers.knockout_runs import N_OFF, sites
from helpers.memory import collect, find_ffns

DATA_PATH = Path(__file__).parent / "data" / "knockout_split.json"
PARTS = ("other only", "own only", "shared size-matched")


def split_sets(activity: torch.Tensor, donor: torch.Tensor, values: torch.Tensor,
               n_off: int = N_OFF) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The split of ``knockout_sets``' "own" and "other" at one site.

    Args:
        activity: ``(N, d_ff)`` each fact's coefficients where it is read.
        donor: ``(N,)`` long, each fact's donor (``same_group_donors``).
        values: ``(d_ff, d_model)`` the layer's values (``W2.T``).
    Returns:
        ``({name: (N, d_ff) share of each coefficient removed} for "own", "other", and each of ``PARTS``,
        (N,) bool: the facts whose shared neurons remove a vector as long as own-only's (to 1e-3))``.
    """
    base = knockout_sets(activity, donor, n_off, generator=torch.Generator().manual_seed(0))   # own, other: no draw
    own, other = base["own"], base["other"]
    own_only, shared = own * (1 - other), own * other
    target = removed_write(activity, own_only, values)                                   # (N,)
    priority = shared * (2 + activity.clamp_min(0)) + (activity > 0).float() * 1e-3      # shared first, by activity
    matched = _size_matched(activity.double(), values.double(), target.double(), first=activity.shape[1],
                            priority=priority.double()).float()
    only_shared = ~((matched > 0) & (shared == 0)).any(1)
    reached = (removed_write(activity, matched, values) - target).abs() < 1e-3
    return ({"own": own, "other": other, "other only": other * (1 - own), "own only": own_only,
             "shared size-matched": matched}, only_shared & reached)


@torch.no_grad()
def summarise(model: torch.nn.Module, data: FactDataset, seed: int, n_off: int = N_OFF) -> dict:
    """One model: ``{site: {"overlap": share of own also in other, "rows matched": share of facts kept for the
    own-only vs shared comparison, part: [drop in P(right answer), length removed, neurons touched]}}`` for each
    of ``PARTS``, means over the facts (the own-only and shared rows over the matched facts only)."""
    relation_of = torch.tensor([list(RELATIONS).index(f.relation) for f in data.facts])
    n = len(data.facts)
    g = torch.Generator().manual_seed(seed)                   # the draws of knockouts_at_sites, in its order
    torch.randperm(n, generator=g)
    donor = same_group_donors(relation_of, g)
    trace, out = collect(model, data.ids), {}
    for site, (layer, pos) in sites(data).items():
        activity = trace.coefficients[layer][torch.arange(n), pos]
        values = find_ffns(model).layer(layer).values.detach()
        sets, ok = split_sets(activity, donor, values, n_off)
        parts = {name: sets[name] for name in PARTS}
        drops = knockout_drops(model, layer, data.ids, data.answer_pos, data.answer_id, pos, parts)
        row = {"overlap": ((sets["own"] * sets["other"]).sum(1) / n_off).mean().item(),
               "rows matched": ok.float().mean().item()}
        for name, share in parts.items():
            keep = torch.ones(n, dtype=torch.bool) if name == "other only" else ok
            row[name] = [drops[name][keep].mean().item(), removed_write(activity, share, values)[keep].mean().item(),
                         (share > 0).sum(1).float()[keep].mean().item()]
        out[site] = row
    return out


def make(seeds: Sequence[int], path: Path = DATA_PATH) -> dict:
    """Run ``summarise`` for the fact models of ``seeds`` and write them to ``path`` as JSON."""
    from helpers.fact_model import load_fact_model
    torch.set_num_threads(1)
    data = make_dataset(load_facts())
    runs = {str(s): summarise(load_fact_model(data, seed=s)[0], data, seed=s) for s in seeds}
    result = {"made_by": "python -m helpers.knockout_split", "n_off": N_OFF, "runs": runs,
              "environment": {"torch": torch.__version__, "python": platform.python_version()}}
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def load(path: Path = DATA_PATH) -> dict[int, dict]:
    """The shipped runs: ``{seed: summarise(...)}``."""
    return {int(s): r for s, r in json.loads(Path(path).read_text())["runs"].items()}


def per_seed(runs: dict, site: str, name: str, seeds: Sequence[int], j: int = 0) -> list[float]:
    """One value per seed: ``"overlap"``/``"rows matched"``, or entry ``j`` (0 drop, 1 length, 2 neurons) of
    part ``name``."""
    return [runs[s][site][name] if isinstance(runs[s][site][name], float) else runs[s][site][name][j] for s in seeds]


def family(runs: dict, site_names: Sequence[str], seeds: Sequence[int]) -> dict:
    """Own only − shared size-matched, drop in P(right answer), paired by seed, one comparison per site."""
    from helpers.stats import paired_difference
    return {f"{site}: own only − shared": paired_difference(per_seed(runs, site, "own only", seeds),
                                                            per_seed(runs, site, "shared size-matched", seeds))
            for site in site_names}


def report(runs: dict, site_names: Sequence[str], seeds: Sequence[int]) -> str:
    """The split as printed lines: per site the overlap, what "other only" removes and does, and own only
    against shared size-matched (means of ``seeds``)."""
    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    lines = [f"  {'':14s}own ∩ other   other only: length, drop   own only | shared at its length: drop (facts kept)"]
    for site in site_names:
        m = {k: mean(per_seed(runs, site, k, seeds)) for k in ("overlap", "rows matched")}
        o_len, o_drop = (mean(per_seed(runs, site, "other only", seeds, j)) for j in (1, 0))
        a, b = (mean(per_seed(runs, site, k, seeds)) for k in ("own only", "shared size-matched"))
        lines.append(f"  {site:14s}{m['overlap']:>11.0%}   {o_len:18.1f}, {o_drop:.3f}   "
                     f"{a:.3f} | {b:.3f} ({m['rows matched']:.0%})")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--out", type=Path, default=DATA_PATH)
    args = parser.parse_args()
    make(args.seeds, args.out)


def readout(runs: dict, split: dict, site_names: Sequence[str], seeds: Sequence[int]) -> _ko.Folded:
    """Section 6 read in short: shown, the verdict grid (``knockout_runs.verdict_grid``) of set − other for own,
    size-matched and random direction zeroed (Holm over ``knockout_runs.family``, 15); folded: the same grid for
    activity-matched and for own and size-matched mean-ablated (``knockout_runs.data_path(ablation="mean")``,
    Holm over 12), the full zeroing table (t, seeds, thresholds), the mean-ablation table, the
    length activity-matched and other remove, activity silenced by own and other, what "other" is made of
    (``split``: ``load()``), how well the matched sets match, the widest gap the unresolved cells allow, the same
    verdicts at 20 and 80 neurons per set, and own's fact-specific neurons against its shared ones."""
    import statistics
    from helpers.precision import bound
    from helpers.stats import holm, holm_table, interval
    fam = _ko.family(runs, site_names, seeds)

    def mean_of_seeds(site: str, name: str, quantity: str) -> float:
        return statistics.mean(_ko.per_seed_mean(runs, site, name, seeds, quantity))
    shared = sum(runs[s]["shared"][site] for s in seeds for site in site_names) / (len(seeds) * len(site_names))
    rest = [statistics.mean(per_seed(split, site, "other only", seeds, j)) for site in site_names
            for j in (1, 0)]                                      # "other" minus own's neurons: length, drop in P
    size_gap = [sum(runs[s]["size gap below 1e-4"][j] for s in seeds) for j in (0, 1)]
    widest = max(abs(x) for v in holm(fam) if not v.resolved for x in interval(v.comparison, 0.05 / len(fam)))
    same = _ko.same_verdicts(site_names, seeds)
    mean_runs = _ko.load(_ko.data_path(ablation="mean"))
    mean_fam = {k: v for k, v in _ko.family(mean_runs, site_names, seeds).items() if "random direction" not in k}
    shown = [f"drop in P(right answer), set − other, paired over {len(seeds)} seeds (Holm over {len(fam)} tests: "
             f"these {3 * len(site_names)}, and {len(fam) - 3 * len(site_names)} more in the table behind the fold "
             f"with every test's t and seeds):",
             *_ko.verdict_grid(fam, [(n, f"{n} − other") for n in ("own", "size-matched", "random direction")],
                               site_names, "zeroed", width=33)]
    lines = [*shown, *_ko.verdict_grid(fam, [("activity-matched", "activity-matched − other")], site_names,
                                       "zeroed, activity-matched", width=33),
             *_ko.verdict_grid(mean_fam, [("own", "own − other"),
                                          ("size-matched (zeroing's sets)", "size-matched − other")],
                               site_names, f"mean-ablated (Holm over {len(mean_fam)})", width=33),
             "zeroed, every set − other:", holm_table(fam, compact=True),
             "length removed, activity-matched | other: " + ", ".join(
                 f"{site} {mean_of_seeds(site, 'activity-matched', 'size removed'):.1f} | "
                 f"{mean_of_seeds(site, 'other', 'size removed'):.1f}" for site in site_names),
             "activity silenced, own | other: " + ", ".join(
                 f"{site} {mean_of_seeds(site, 'own', 'activity silenced'):.0f} | "
                 f"{mean_of_seeds(site, 'other', 'activity silenced'):.0f}" for site in site_names),
             f"own ∩ other: {shared:.0%} of their neurons; other minus own: length {min(rest[0::2]):.1f}–"
             f"{max(rest[0::2]):.1f}, drop in P ≤ {max(rest[1::2]):.3f}",
             f"matched sets: activity-matched − other, activity silenced: max "
             f"{bound(max(runs[s]['matched activity gap'] for s in seeds), 1e-4)}; size-matched − other, size "
             f"removed: < 1e-4 in {size_gap[0] / size_gap[1]:.1%} of fact-site pairs",
             f"  not resolved: the seeds allow gaps within ±{widest:.3f} (95 % jointly)",
             "  the same verdict as at 40 neurons per set: " + ", ".join(f"{k} of {len(fam)} at {n}"
                                                                        for n, k in same.items()),
             "mean ablation, every set − other (random direction left out: its length is zero ablation's):",
             holm_table(mean_fam, compact=True),
             "Among own's neurons, do the fact-specific ones hurt more? Own only − shared, at equal length:",
             holm_table(family(split, site_names, seeds), compact=True)]
    return _ko.Folded(lines, shown=len(shown), label="the full tables and the checks behind them (click)")
