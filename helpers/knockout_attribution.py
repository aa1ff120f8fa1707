"""Section 6 of notebook 03 with an attribution-ranked set beside the activation-ranked one.

Section 6's "own" set is a fact's 40 *most active* neurons. Dai et al. (2022) pick knowledge neurons by
*attribution* instead: integrated gradients of P(answer) along each neuron's activation. Its cheap first-order
version is **gradient × activation**: ``a_i = m_i · ∂ log P(answer) / ∂m_i`` at the site, a linear estimate of
how much log P(answer) falls when neuron ``i`` is zeroed. This module ranks neurons by ``a_i`` and knocks them
out with section 6's protocol (``knockout_runs.sites``, the same facts, donors and "other" sets):

- **attribution**: the fact's 40 neurons of highest ``a_i``, against **own** (its 40 most active);
- **attribution size-matched**: the firing neurons in order of ``a_i``, the last in part, until the vector
  removed ``‖Σ m_i v_i‖`` is as long as "other"'s, against **size-matched** (the same in order of activity).

The second pair asks whether attribution finds neurons whose removal hurts more *per length removed*. Ten seeds
take about half a minute of CPU; made by

    python -m helpers.knockout_attribution     # writes helpers/data/knockout_attribution.json

and checked in the notebook by recomputing seed 0.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn as nn

from helpers.facts import RELATIONS, FactDataset, load_facts, make_dataset
from helpers.interventions import _size_matched, knockout_drops, knockout_sets, removed_write, same_group_donors
from helpers.knockout_runs import N_OFF, max_difference, sites
from helpers.memory import collect, find_ffns, logits_of

DATA_PATH = Path(__file__).parent / "data" / "knockout_attribution.json"
SETS = ("own", "other", "size-matched", "attribution", "attribution size-matched")
PAIRS = {"attribution − own (40 each)": ("attribution", "own"),
         "attribution size-matched − size-matched": ("attribution size-matched", "size-matched")}
"""The comparisons the notebook reads, name -> (set, set it is compared with)."""


def attribution_scores(model: nn.Module, layer: int, ids: torch.Tensor, answer_pos: torch.Tensor,
                       answer_id: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``(N, d_ff)`` gradient × activation: ``m_i · ∂ log P(answer_n) / ∂m_i`` for every neuron of ``layer`` at
    position ``positions[n]`` of row ``n`` (``ids`` ``(N, T)``; ``answer_pos``, ``answer_id``, ``positions``
    ``(N,)`` long). Each row's log-probability depends only on its own row, so one backward pass gives all."""
    ffn = find_ffns(model).layer(layer)
    seen: dict[str, torch.Tensor] = {}

    def grab(module, inputs):
        seen["m"] = inputs[0]

    handle = ffn.value_module.register_forward_pre_hook(grab)
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            logits = logits_of(model, ids)                                           # (N, T, vocab)
            rows = torch.arange(ids.shape[0])
            logp = logits[rows, answer_pos].log_softmax(-1)[rows, answer_id]         # (N,)
            grad = torch.autograd.grad(logp.sum(), seen["m"])[0]                     # (N, T, d_ff)
    finally:
        handle.remove()
        model.train(was_training)
    m = seen["m"].detach()
    return (m * grad)[rows, positions] if positions is not None else m * grad


def attribution_sets(activity: torch.Tensor, attribution: torch.Tensor, donor: torch.Tensor, values: torch.Tensor,
                     n_off: int = N_OFF) -> dict[str, torch.Tensor]:
    """The sets of ``SETS`` at one site, ``{name: (N, d_ff) share of each coefficient removed}``.

    ``activity``, ``attribution``: ``(N, d_ff)`` at each fact's site; ``donor``: ``(N,)`` long
    (``same_group_donors``); ``values``: ``(d_ff, d_model)``, the layer's values (``W2.T``). "own", "other" and
    "size-matched" are ``knockout_sets``' (no random draw involved)."""
    base = knockout_sets(activity, donor, n_off, generator=torch.Generator().manual_seed(0), values=values)
    top = attribution.topk(n_off, dim=1).indices
    by_attribution = torch.zeros_like(activity).scatter_(1, top, 1.0)
    target = removed_write(activity, base["other"], values)                          # (N,) "other"'s length
    lowest = attribution.min() - 1
    priority = torch.where(activity > 0, attribution, lowest)                        # firing first, by attribution
    matched = _size_matched(activity.double(), values.double(), target.double(), first=activity.shape[1],
                            priority=priority.double()).float()
    return {"own": base["own"], "other": base["other"], "size-matched": base["size-matched"],
            "attribution": by_attribution, "attribution size-matched": matched}


@torch.no_grad()
def summarise(model: nn.Module, data: FactDataset, seed: int, n_off: int = N_OFF,
              site_names: Sequence[str] | None = None) -> dict:
    """One model: ``{site: {set: [drop in P(right answer), length removed, neurons touched], "overlap": share of
    the attribution set also in own}}``, means over the 608 facts; donors drawn as ``knockouts_at_sites`` does.
    ``site_names``: only these sites (default: all three)."""
    relation_of = torch.tensor([list(RELATIONS).index(f.relation) for f in data.facts])
    n = len(data.facts)
    g = torch.Generator().manual_seed(seed)                   # the draws of knockouts_at_sites, in its order
    torch.randperm(n, generator=g)
    donor = same_group_donors(relation_of, g)
    trace, out = collect(model, data.ids), {}
    for site, (layer, pos) in sites(data).items():
        if site_names is not None and site not in site_names:
            continue
        activity = trace.coefficients[layer][torch.arange(n), pos]                   # (N, d_ff)
        values = find_ffns(model).layer(layer).values.detach()                       # (d_ff, d_model)
        attribution = attribution_scores(model, layer, data.ids, data.answer_pos, data.answer_id, pos)
        sets = attribution_sets(activity, attribution, donor, values, n_off)
        drops = knockout_drops(model, layer, data.ids, data.answer_pos, data.answer_id, pos, sets)
        row: dict[str, object] = {name: [drops[name].mean().item(),
                                         removed_write(activity, share, values).mean().item(),
                                         (share > 0).sum(1).float().mean().item()] for name, share in sets.items()}
        row["overlap"] = ((sets["attribution"] * sets["own"]).sum(1) / n_off).mean().item()
        out[site] = row
    return out


def make(seeds: Sequence[int], path: Path = DATA_PATH) -> dict:
    """Run ``summarise`` for the fact models of ``seeds`` and write them to ``path`` as JSON."""
    from helpers.fact_model import load_fact_model
    torch.set_num_threads(1)
    data = make_dataset(load_facts())
    runs = {str(s): summarise(load_fact_model(data, seed=s)[0], data, seed=s) for s in seeds}
    result = {"made_by": "python -m helpers.knockout_attribution", "n_off": N_OFF, "runs": runs,
              "environment": {"torch": torch.__version__, "python": platform.python_version()}}
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def load(path: Path = DATA_PATH) -> dict[int, dict]:
    """The shipped runs: ``{seed: summarise(...)}``."""
    return {int(s): r for s, r in json.loads(Path(path).read_text())["runs"].items()}


def live_gap(model: nn.Module, data: FactDataset, seed: int = 0, site_names: Sequence[str] = ("L1 last word",)) -> float:
    """Largest difference between ``summarise`` run now on ``model`` (the fact model of ``seed``) at
    ``site_names`` and the file's run of that seed at those sites (one site by default, to save time)."""
    fresh, shipped = summarise(model, data, seed=seed, site_names=site_names), load()[seed]
    return max_difference(fresh, {site: shipped[site] for site in fresh})


def per_seed(runs: dict, site: str, name: str, seeds: Sequence[int], j: int = 0) -> list[float]:
    """One value per seed: ``"overlap"``, or entry ``j`` (0 drop, 1 length, 2 neurons) of set ``name``."""
    return [runs[s][site][name] if name == "overlap" else runs[s][site][name][j] for s in seeds]


def family(runs: dict, site_names: Sequence[str], seeds: Sequence[int]) -> dict:
    """Each pair of ``PAIRS`` at each site: the drop in P(right answer), paired by seed (one Holm family)."""
    from helpers.stats import paired_difference
    return {f"{site}: {label}": paired_difference(per_seed(runs, site, a, seeds), per_seed(runs, site, b, seeds))
            for label, (a, b) in PAIRS.items() for site in site_names}


def lengths(runs: dict, site_names: Sequence[str], seeds: Sequence[int]) -> str:
    """Two lines, means of ``seeds`` per site: the length removed by "attribution" | "own" (40 neurons each) and
    their overlap; then the neurons touched by "attribution size-matched" | "size-matched" (at "other"'s length)."""
    def mean(name: str, site: str, j: int) -> float:
        values = per_seed(runs, site, name, seeds, j)
        return sum(values) / len(values)
    overlap = sum(mean("overlap", site, 0) for site in site_names) / len(site_names)
    return ("40 each, length removed, attribution | own: " + ", ".join(
        f"{site} {mean('attribution', site, 1):.1f} | {mean('own', site, 1):.1f}" for site in site_names)
        + f"; {overlap:.0%} shared\nat other's length, neurons touched, attribution size-matched | size-matched: " + ", ".join(
        f"{site} {mean('attribution size-matched', site, 2):.0f} | {mean('size-matched', site, 2):.0f}"
        for site in site_names))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--out", type=Path, default=DATA_PATH)
    args = parser.parse_args()
    make(args.seeds, args.out)
