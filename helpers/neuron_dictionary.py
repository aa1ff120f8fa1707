r"""Section 6's superposition test (notebook 09): does a sparse dictionary trained on the FFN's own neuron
activations find directions in the 192-neuron space that are cleaner features than the neurons themselves?

Section 2.1 asked this of the toy with neurons: a dictionary trained from a *random* start on the activations
``h`` against the neuron axes. Here the activations are the fact model's layer-1 neurons,
``a = φ(W_1 x + b_1)`` ``(n_prefixes, 192)``, at the study's prefixes and held-out split (``dictionary_study``).
Per shipped fact model (``MODELS``) and dictionary seed, a TopK autoencoder ``a -> a`` (256 features, k = 8,
the study's recipe and its ``sae_x`` rate, ``start="random"``) is trained on the training rows, and the file
holds, for the dictionary and for two controls:

* ``held_out``: the FVU of ``a`` on the held-out rows. The neurons' own 8-sparse code keeps, per row, the 8
  neurons that deviate most from their training mean and puts the others at that mean (``top_neurons``);
* ``tracking``: ``helpers.dictionary.tracking_rates`` on the named prefixes (share of judged units whose 10
  strongest prefixes share a relation, an answer, a slot), for the dictionary's features, the neurons and a
  *random dictionary* on ``a`` (the same TopK on random keys: sparse, but blind);
* ``off_axis``: how many used features (active on some named prefix) have a value (unit column of ``W_dec``)
  with cosine below 0.95 to every neuron axis, and ``used``.

``neuron_family`` pairs each comparison over the models (each model: the mean over its seeds).

``off_axis`` cannot fail as a test of polysemanticity: on data built sparse in the neuron basis (``top_neurons``),
whose features *are* neuron axes, the centred recipe also puts most features below cosine 0.95. The **axis
control** reads instead, per used feature, its best |cosine| with a neuron axis (``best_axis_cosines``), on the
real neurons and on that axis-sparse data, input centred, models 0-4 × seeds 0-1 (``axis_control_runs``; file
``neuron_axis_control.json``, ``python -m helpers.neuron_dictionary --axis-control``, about 2 CPU-minutes).

Are the features found again in other seeds? ``seed_match_runs``: per model, seed 0's used features against
seeds 1 and 2 (best cosine of each, against as many random directions); file ``neuron_seed_match.json``,
``python -m helpers.neuron_dictionary --seed-match``, about 2 CPU-minutes.

Make the file (about a minute of one CPU core), or a small run to see the format::

    python -m helpers.neuron_dictionary
    python -m helpers.neuron_dictionary --models 0 --seeds 1 --steps 20 --out /tmp/neuron_dictionary.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.dictionary import (TopKDictionary, fact_prefixes, fvu, random_dictionary, tracking_rates,
                                train_dictionaries)
from helpers.dictionary_study import ARM_LR, MODELS, RECIPE, _r, layer_data, pca_fvu
from helpers.fact_model import load_fact_model
from helpers.facts import load_facts, make_dataset
from helpers.memory import collect
from helpers.stats import PairedDifference, paired_difference

__all__ = ["NEURON_DICTIONARY_PATH", "NEURON_DICTIONARY_LONG_PATH", "NEURON_DICTIONARY_TIED_PATH",
           "NEURON_DICTIONARY_CENTRED_PATH", "NEURON_DICTIONARY_CENTRED_LONG_PATH", "LABELS", "run_summary", "neuron_activations", "top_neurons", "off_axis",
           "train_neuron_dictionaries", "judge", "neuron_runs", "load_neuron_dictionary", "neuron_table",
           "neuron_family", "neuron_dictionary_report", "AXIS_CONTROL_PATH", "best_axis_cosines",
           "axis_control_runs", "load_axis_control", "random_axis_cosine", "axis_control_line",
           "SEED_MATCH_PATH", "used_values", "seed_match_runs", "seed_match_line", "load_seed_match", "main"]

NEURON_DICTIONARY_PATH = Path(__file__).resolve().parent / "data" / "neuron_dictionary.json"
#: the same runs 10× longer at rate 0.01 (its ``command`` inside): does the used count grow with training?
NEURON_DICTIONARY_LONG_PATH = NEURON_DICTIONARY_PATH.with_name("neuron_dictionary_long.json")
#: the same runs from the tied start (keys = values transposed, Gao et al. 2024): fewer dead features?
NEURON_DICTIONARY_TIED_PATH = NEURON_DICTIONARY_PATH.with_name("neuron_dictionary_tied.json")
#: the same runs on centred activations (the standard recipe's pre-encoder bias): does the count move?
NEURON_DICTIONARY_CENTRED_PATH = NEURON_DICTIONARY_PATH.with_name("neuron_dictionary_centred.json")
#: the centred runs 10× longer at rate 0.01, one seed per model (the budget at which the planted control's count
#: passes 185): ``python -m helpers.neuron_dictionary --seeds 1 --steps 10000 --lr 0.01 --center``
NEURON_DICTIONARY_CENTRED_LONG_PATH = NEURON_DICTIONARY_PATH.with_name("neuron_dictionary_centred_long.json")
AXIS_CONTROL_PATH = NEURON_DICTIONARY_PATH.with_name("neuron_axis_control.json")
#: section 6.1's features across seeds: ``python -m helpers.neuron_dictionary --seed-match`` (about 2 CPU-minutes)
SEED_MATCH_PATH = NEURON_DICTIONARY_PATH.with_name("neuron_seed_match.json")
LABELS = ("relation", "answer", "slot")
UNITS = {"dictionary": "dictionary on the neurons", "neurons": "the neurons themselves",
         "random": "random dictionary on the neurons"}


def neuron_activations(model: torch.nn.Module, data, prefixes, layer: int = 1) -> torch.Tensor:
    """The layer's neuron activations φ(W_1x + b_1) at the fact prefixes: ``(n_prefixes, d_ff)``, float64
    (the model is not changed: pass a float64 model for float64 arithmetic, as the file does)."""
    with torch.no_grad():
        a = collect(model, data.ids).coefficients[layer]                           # (N, T, d_ff)
    return a[prefixes.rows, prefixes.positions].double()


def top_neurons(a_train: torch.Tensor, a: torch.Tensor, k: int = RECIPE["k"]) -> torch.Tensor:
    """The neurons' own k-sparse code of ``a (M, d_ff)``: per row the k neurons farthest from their mean over
    ``a_train (N, d_ff)`` keep their value, the others get that mean. Returns ``(M, d_ff)``."""
    mean = a_train.mean(0)
    far = (a - mean).abs().topk(k, dim=1).indices                                  # (M, k)
    return mean.expand_as(a).clone().scatter(1, far, a.gather(1, far))


def off_axis(dictionary: TopKDictionary, a: torch.Tensor, threshold: float = 0.95) -> tuple[int, int]:
    """``(off, used)``: of the features active on some row of ``a (M, d_ff)``, how many have a unit value
    (column of ``W_dec (d_ff, F)``) with |cosine| below ``threshold`` to every neuron axis."""
    with torch.no_grad():
        used = (dictionary.encode(a) > 0).any(0)                                   # (F,)
        values = dictionary.W_dec / dictionary.W_dec.norm(dim=0, keepdim=True)
        best = values.abs().max(0).values                                          # (F,): best cosine with an axis
    return int((used & (best < threshold)).sum()), int(used.sum())


def train_neuron_dictionaries(activations: Sequence[torch.Tensor], train: torch.Tensor, seeds: Sequence[int],
                              steps: int = RECIPE["steps"], progress: bool = True,
                              lr: float = ARM_LR["sae_x"], start: str = "random") -> list[TopKDictionary]:
    """One TopK autoencoder per (activation set, seed), in that order, all trained side by side, from ``start``
    (``"random"``, or ``"tied"``: keys the transpose of the random values, Gao et al.'s remedy for dead features);
    ``activations``: ``(n_prefixes, d_ff)`` tensors, fitted on their ``train`` rows."""
    fit = torch.stack([a[train] for a in activations for _ in seeds])              # (sets × seeds, N, d_ff)
    return train_dictionaries(fit, fit, RECIPE["n_features"], RECIPE["k"], list(seeds) * len(activations),
                              steps=steps, lr=lr, batch_size=RECIPE["batch_size"], start=start,
                              dtype=torch.float64, progress=progress, desc="dictionaries on the neurons")


def judge(dictionary: TopKDictionary, a: torch.Tensor, train: torch.Tensor, test: torch.Tensor, prefixes,
          seed: int) -> dict:
    """One dictionary's entry of the file (see the module's doc), ``a (n_prefixes, d_ff)``."""
    named = a[prefixes.named]
    random = random_dictionary(a[train], a[train], RECIPE["n_features"], RECIPE["k"], seed=seed)

    def rates(acts: torch.Tensor) -> dict:
        r, judged = tracking_rates(acts, prefixes.labels)
        return {**{label: r[label] for label in LABELS}, "judged": judged}

    with torch.no_grad():
        off, used = off_axis(dictionary, named)
        return {"held_out": {"dictionary": fvu(a[test], dictionary(a[test])),
                             "neurons": fvu(a[test], top_neurons(a[train], a[test]))},
                "tracking": {"dictionary": rates(dictionary.encode(named)), "neurons": rates(named),
                             "random": rates(random.encode(named))},
                "off_axis": off, "used": used}


def neuron_runs(models: Sequence[int] = MODELS, seeds: Sequence[int] = range(5), steps: int = RECIPE["steps"],
                layer: int = 1, lr: float = ARM_LR["sae_x"], start: str = "random", center: bool = False) -> dict:
    """``{model: [entry per seed]}`` (entries: ``judge``), every dictionary trained side by side. ``center``: the
    activations minus their training mean, the standard recipe's pre-encoder bias (Bricken et al. 2023, Gao et al.
    2024) fixed at the data mean; the FVU is unchanged by it, the codes are not."""
    data = make_dataset(load_facts())
    p = fact_prefixes(data)
    train, test = layer_data(data, p, models[0], layer)[2:]                          # the study's split
    acts = [neuron_activations(load_fact_model(data, seed=m)[0].double(), data, p, layer) for m in models]
    if center:
        acts = [a - a[train].mean(0) for a in acts]
    trained = train_neuron_dictionaries(acts, train, seeds, steps, lr=lr, start=start)
    seeds = list(seeds)
    return {str(m): [judge(trained[i * len(seeds) + j], a, train, test, p, s) for j, s in enumerate(seeds)]
            for i, (m, a) in enumerate(zip(models, acts))}


def load_neuron_dictionary(path: str | Path | None = None) -> dict:
    """The shipped file (``NEURON_DICTIONARY_PATH``), or the file at ``path``."""
    return json.loads(Path(path or NEURON_DICTIONARY_PATH).read_text(encoding="utf-8"))


def _per_model(runs: dict, get) -> list[float]:
    """One value per model: ``get(entry)`` averaged over the model's seeds."""
    return [sum(get(e) for e in entries) / len(entries) for entries in runs["models"].values()]


def neuron_table(runs: dict) -> str:
    """Printable lines: held-out FVU, share tracking each label and judged units, mean over models; the used
    features' range."""
    lines = [f"{'layer 1, mean over ' + str(len(runs['models'])) + ' models':34s}{'held-out FVU':>13s}"
             + "".join(f"{label:>10s}" for label in LABELS) + "   judged units"]
    for unit, name in UNITS.items():
        held = (f"{100 * sum(_per_model(runs, lambda e: e['held_out'][unit])) / len(runs['models']):11.2f} %"
                if unit != "random" else f"{'—':>13s}")
        shares = "".join(f"{100 * sum(v) / len(v):9.0f}%" for v in
                         (_per_model(runs, lambda e, lb=label: e["tracking"][unit][lb]) for label in LABELS))
        judged = _per_model(runs, lambda e: e["tracking"][unit]["judged"])
        lines.append(f"  {name:32s}{held}{shares}   {min(judged):.0f}–{max(judged):.0f}")
    used = [e["used"] for v in runs["models"].values() for e in v]
    lines.append(f"features used (input not centred): {min(used)}–{max(used)} of {RECIPE['n_features']}")
    return "\n".join(lines)


def run_summary(runs: dict) -> str:
    """One printable line for a file of runs: its steps and rate, the used and off-axis features' range over
    every (model, seed), and the held-out FVU averaged over the models."""
    used = [e["used"] for v in runs["models"].values() for e in v]
    off = [e["off_axis"] for v in runs["models"].values() for e in v]
    held = _per_model(runs, lambda e: e["held_out"]["dictionary"])
    centred = ", input centred" if runs.get("center") else ""
    return (f"{runs.get('start', 'random')} start{centred}, {runs['steps']:,} steps at rate {runs['lr']:g}: features used "
            f"{min(used)}–{max(used)} "
            f"(off every neuron axis {min(off)}–{max(off)}), held-out FVU {100 * sum(held) / len(held):.2f} %")


def neuron_pca(data, prefixes, train: torch.Tensor, test: torch.Tensor, models: Sequence[int] = MODELS,
               rank: int = RECIPE["k"]) -> list[float]:
    """The dense control for the dictionary on the neurons: per model, the held-out FVU of the top ``rank``
    principal directions of the 192 neuron activations (fitted on the ``train`` prefixes, judged on ``test``).
    The activations have full rank, but their variance is concentrated in a few directions, so 8 dense ones
    already hold most of it: the dictionary must beat this, not only the neurons' own 8-sparse code."""
    return [pca_fvu(*(neuron_activations(load_fact_model(data, seed=m)[0].double(), data, prefixes, 1)[rows]
                      for rows in (train, test)), rank) for m in models]


def neuron_family(runs: dict, pca: Sequence[float] | None = None) -> dict[str, PairedDifference]:
    """For ``helpers.stats.holm``, paired over the models: held-out FVU, dictionary − the neurons' 8-sparse code
    (and − PCA-8 of the neurons, given ``pca`` from ``neuron_pca``); per label, the dictionary's share tracking −
    the neurons', and − the random dictionary's."""
    dictionary = _per_model(runs, lambda e: e["held_out"]["dictionary"])
    family = {"held-out FVU: dictionary − 8 neurons": paired_difference(
        dictionary, _per_model(runs, lambda e: e["held_out"]["neurons"]))}
    if pca is not None:
        family["held-out FVU: dictionary − PCA-8 of the neurons"] = paired_difference(dictionary, list(pca))
    for label in LABELS:
        mine = _per_model(runs, lambda e, lb=label: e["tracking"]["dictionary"][lb])
        for unit in ("neurons", "random"):
            family[f"{label}: dictionary − {unit}"] = paired_difference(
                mine, _per_model(runs, lambda e, lb=label, u=unit: e["tracking"][u][lb]))
    return family


def neuron_dictionary_report(data, prefixes, train: torch.Tensor, test: torch.Tensor, live_eight: float,
                             full: bool = False):
    """Section 6.1's printed results, read from the shipped files: in view, the dictionary on the neurons against
    the neurons and a random dictionary (``neuron_table``), PCA-8 of the neurons (live, ``neuron_pca``), the
    count beside planted directions at the longer budget (``helpers.planted_count.count_line``), the
    cross-seed match (``seed_match_line``) and one line per
    verdict (``neuron_family``, one Holm family); folded, model 0's 8-neuron code (``live_eight``: its held-out FVU
    computed live) against the file and the verdicts' t values; with ``full``, also the count at both budgets
    (``count_table``), every run on the neurons and the planted runs.
    Returns a ``helpers.folded.Folded``."""
    from helpers.dictionary_study import verdict_lines
    from helpers.folded import Folded
    from helpers.planted_count import count_line, count_table, load as load_planted, summary_lines
    from helpers.stats import holm_table

    on_neurons = load_neuron_dictionary()
    filed = on_neurons["models"]["0"][0]["held_out"]["neurons"]
    pca8 = neuron_pca(data, prefixes, train, test)
    family = neuron_family(on_neurons, pca8)
    family_text = holm_table(family, unit=" (share)", digits=2, units={k: " (FVU)" for k in family if "FVU" in k})
    pca_line = "PCA-8 of the neurons, held-out FVU, models 0-4: " + ", ".join(f"{v:.1%}" for v in pca8)
    paths = (NEURON_DICTIONARY_PATH, NEURON_DICTIONARY_TIED_PATH, NEURON_DICTIONARY_LONG_PATH,
             NEURON_DICTIONARY_CENTRED_PATH, NEURON_DICTIONARY_CENTRED_LONG_PATH)
    runs = "\n".join(run_summary(load_neuron_dictionary(p)) for p in paths)
    planted = load_planted()
    counts = count_table(planted, [load_neuron_dictionary(p) for p in paths[3:]])
    line = count_line(planted, load_neuron_dictionary(paths[-1]))
    folded = (f"model 0, 8 neurons per prefix (the rest at their mean): held-out FVU live {live_eight:.2%} (the "
              f"file: {filed:.2%})\n\n{family_text}")
    if full:
        folded += (f"\n\n{counts}\n\nevery run on the neurons:\n{runs}\n\nthe same recipe on planted directions, "
                   "5 data seeds:\n" + "\n".join(summary_lines(planted) + summary_lines(planted, centred=True)))
    return Folded(neuron_table(on_neurons) + "\n" + axis_control_line(load_axis_control()) + "\n"
                  + seed_match_line(load_seed_match()) + "\n" + pca_line + "\n"
                  + line + "\n\n" + family_text.splitlines()[0] + "\n" + verdict_lines(family), folded)

def best_axis_cosines(dictionary, a: torch.Tensor) -> torch.Tensor:
    """Per feature active on some row of ``a (M, d_ff)``: its unit value's best |cosine| with a neuron axis."""
    with torch.no_grad():
        used = (dictionary.encode(a) > 0).any(0)                                   # (F,)
        values = dictionary.W_dec / dictionary.W_dec.norm(dim=0, keepdim=True)     # (d_ff, F)
        return values.abs().max(0).values[used]


def axis_control_runs(models: Sequence[int] = (0, 1, 2, 3, 4), seeds: Sequence[int] = (0, 1)) -> dict:
    from helpers.dictionary import held_out_split

    data = make_dataset(load_facts())
    prefixes = fact_prefixes(data)
    out = {"models": list(models), "seeds": list(seeds), "real neurons": [], "sparse on the neuron axes": []}
    for m in models:
        model = load_fact_model(data, seed=m)[0].double()
        a = neuron_activations(model, data, prefixes, 1)
        train, _ = held_out_split(len(a), held_out=0.2)
        mu = a[train].mean(0)
        kinds = {"real neurons": a - mu, "sparse on the neuron axes": top_neurons(a[train], a) - mu}
        dicts = train_neuron_dictionaries(list(kinds.values()), train, list(seeds), progress=False)
        for i, (name, src) in enumerate(kinds.items()):
            for j in range(len(seeds)):
                best = best_axis_cosines(dicts[i * len(seeds) + j], src[prefixes.named])
                out[name].append({"used": len(best), "off-axis (< 0.95)": int((best < 0.95).sum()),
                                  "median best cosine": round(float(best.median()), 3)})
    return out


def used_values(dictionary, a: torch.Tensor) -> torch.Tensor:
    """The unit values (columns of ``W_dec``, ``(d_ff, used)``) of the features active on some row of ``a``."""
    with torch.no_grad():
        used = (dictionary.encode(a) > 0).any(0)                                   # (F,)
        return (dictionary.W_dec / dictionary.W_dec.norm(dim=0, keepdim=True))[:, used]


def seed_match_runs(models: Sequence[int] = MODELS, seeds: Sequence[int] = (0, 1, 2)) -> dict:
    """Are section 6.1's features found again in other seeds? Per model, the table's recipe (input not centred,
    1,000 steps) at ``seeds``; for each used feature of the first seed, its best cosine with a used feature of each
    other seed, against the same number of random directions (chance)."""
    from helpers.dictionary import held_out_split

    data = make_dataset(load_facts())
    prefixes = fact_prefixes(data)
    out = {"models": list(models), "seeds": list(seeds), "runs": []}
    for m in models:
        a = neuron_activations(load_fact_model(data, seed=m)[0].double(), data, prefixes, 1)
        train, _ = held_out_split(len(a), held_out=0.2)
        values = [used_values(d, a[prefixes.named])
                  for d in train_neuron_dictionaries([a], train, list(seeds), progress=False)]
        for s, other in zip(seeds[1:], values[1:]):
            best = (values[0].T @ other).max(1).values
            g = torch.randn(a.shape[1], other.shape[1], generator=torch.Generator().manual_seed(m), dtype=torch.float64)
            chance = (values[0].T @ (g / g.norm(dim=0))).max(1).values
            out["runs"].append({"model": m, "seed": s, "used": values[0].shape[1], "above 0.9": int((best > 0.9).sum()),
                                "median best cosine": round(float(best.median()), 3),
                                "chance median": round(float(chance.median()), 3)})
    return out


def seed_match_line(runs: dict) -> str:
    """One line: how many of the first seed's used features reappear at cosine > 0.9 in each other seed."""
    r = runs["runs"]
    def span(key, f="{:.2f}"):
        return f"{f.format(min(x[key] for x in r))}–{f.format(max(x[key] for x in r))}"
    return (f"seed {runs['seeds'][0]}'s used features found again in seed {' or '.join(map(str, runs['seeds'][1:]))} "
            f"(models {runs['models'][0]}-{runs['models'][-1]}): {span('above 0.9', '{}')} of {span('used', '{}')} "
            f"at cosine > 0.9; median best cosine {span('median best cosine')} (random directions "
            f"{span('chance median')})")


def load_seed_match(path: Path | None = None) -> dict:
    """The shipped runs (``python -m helpers.neuron_dictionary --seed-match``)."""
    return json.loads(Path(path or SEED_MATCH_PATH).read_text())


def load_axis_control(path: Path = AXIS_CONTROL_PATH) -> dict:
    """The shipped runs (``python -m helpers.axis_control``)."""
    return json.loads(Path(path).read_text())


def random_axis_cosine(d: int = 192, n: int = 10_000, seed: int = 0) -> float:
    """Chance level: the median, over ``n`` random unit directions in ``d`` dimensions, of the best |cosine| with an
    axis."""
    g = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return float((g.abs().max(1).values / g.norm(dim=1)).median())


def axis_control_line(runs: dict) -> str:
    """One line: the median best axis cosine of the used features, real neurons against the axis-sparse control
    and against chance (random unit directions in the neurons' 192 dimensions)."""
    def span(name):
        v = [r["median best cosine"] for r in runs[name]]
        return f"{min(v):.2f}–{max(v):.2f}"
    return (f"median best cosine of a used feature with a neuron axis (input centred, models "
            f"{runs['models'][0]}-{runs['models'][-1]} × {len(runs['seeds'])} seeds): real neurons "
            f"{span('real neurons')}, data sparse on the neuron axes {span('sparse on the neuron axes')}, "
            f"random directions {random_axis_cosine():.2f}")



def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=list(MODELS))
    parser.add_argument("--seeds", type=int, default=5, help="dictionary seeds per model")
    parser.add_argument("--steps", type=int, default=RECIPE["steps"])
    parser.add_argument("--lr", type=float, default=ARM_LR["sae_x"])
    parser.add_argument("--start", choices=("random", "tied"), default="random")
    parser.add_argument("--center", action="store_true", help="subtract the training mean first (pre-encoder bias)")
    parser.add_argument("--axis-control", action="store_true",
                        help=f"write the axis control instead ({AXIS_CONTROL_PATH.name}; other options ignored)")
    parser.add_argument("--seed-match", action="store_true",
                        help=f"write the cross-seed match instead ({SEED_MATCH_PATH.name}; other options ignored)")
    parser.add_argument("--out", type=Path, default=NEURON_DICTIONARY_PATH)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.axis_control:
        AXIS_CONTROL_PATH.write_text(json.dumps(axis_control_runs(), indent=1) + "\n", encoding="utf-8")
        return AXIS_CONTROL_PATH
    if args.seed_match:
        SEED_MATCH_PATH.write_text(json.dumps(seed_match_runs(), indent=1) + "\n", encoding="utf-8")
        return SEED_MATCH_PATH
    runs = neuron_runs(args.models, range(args.seeds), args.steps, lr=args.lr, start=args.start, center=args.center)
    given = sys.argv[1:] if argv is None else list(argv)
    command = " ".join(["python -m helpers.neuron_dictionary", *given])
    out = {"command": command, "seeds": list(range(args.seeds)), "steps": args.steps,
           "lr": args.lr, "start": args.start, "center": args.center, "models": _r(runs)}
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return args.out


if __name__ == "__main__":
    print(main())
