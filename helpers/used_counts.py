r"""How many features a TopK autoencoder uses depends on its training run: notebook 09's Exercise 5, as a file.

For the shipped fact models ``MODELS`` (layer 1's FFN output ``y`` on the distinct prefixes, split as in
``helpers.dictionary_study.RECIPE``) and for a Gaussian with ``y``'s mean and covariance (``gaussian_like``, the
fitting draw seed 1, the held-out draw seed 2), a TopK autoencoder (256 features, k = 8, float64, the data start)
is trained for each run in ``RUNS`` (a learning rate and a number of steps) and 2 seeds. ``--slots`` adds, at
``READ_RUN`` only, the same on ``y``'s slot mixture (``slot_mixture_like``: each prefix keeps its template slot,
within it a Gaussian with that slot's moments of ``y``; draws seeded 1 and 2): the control for structure that is
only which slot. Per model, data, run and seed the file holds ``used`` (features active on some held-out row) and
``held_out`` (the held-out FVU).

Make the file (about 4 + 3 minutes of one CPU core), or a small run to see the format::

    python -m helpers.used_counts
    python -m helpers.used_counts --slots           # the slot mixture at READ_RUN, into the existing file
    python -m helpers.used_counts --models 0 --steps 20 40 --out /tmp/used.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.dictionary import fact_labels, fact_prefixes, fvu, train_dictionaries
from helpers.dictionary_study import MODELS, RECIPE, _r, gaussian_like, layer_data, slot_mixture_like
from helpers.facts import load_facts, make_dataset
from helpers.progress import progress as progress_bar
from helpers.stats import PairedDifference, paired_difference

__all__ = ["USED_PATH", "RUNS", "used_study", "load_used", "used_table", "used_family", "count_family",
           "count_line", "slot_share", "main"]

USED_PATH = Path(__file__).resolve().parent / "data" / "used_counts.json"
#: (learning rate, steps): Exercise 5's run, the same rate 10x longer, and a 3x larger rate
RUNS = ((1e-2, 1000), (1e-2, 10000), (3e-2, 1000))
DATA = ("y", "gaussian", "slots")
#: the run whose counts are read against both controls (section 4's length and rate)
READ_RUN = "lr 0.01, 10000 steps"


def _key(lr: float, steps: int) -> str:
    return f"lr {lr:g}, {steps} steps"


@torch.no_grad()
def used_study(models: Sequence[int] = MODELS, runs: Sequence[tuple[float, int]] = RUNS,
               seeds: Sequence[int] = (0, 1), layer: int = 1, progress: bool = True,
               data_sets: Sequence[str] = DATA) -> dict:
    """``{model: {"y" | "gaussian" | "slots": {run key: {"used": [per seed], "held_out": [per seed]}}}}``; every model,
    data set and seed of one run trains side by side (each dictionary as if trained alone)."""
    data = make_dataset(load_facts())
    p = fact_prefixes(data)
    slot = fact_labels(data, p.rows, p.positions)["slot"]
    sets = []                                                          # (model, name, fit (N, 48), held out)
    for m in models:
        _, y, train, test = layer_data(data, p, m, layer)
        sets.append((m, "y", y[train], y[test]))
        sets.append((m, "gaussian", gaussian_like(y[train], len(train), seed=1).double(),
                     gaussian_like(y[train], len(test), seed=2).double()))
        fit_slots = [slot[i] for i in train.tolist()]
        sets.append((m, "slots", slot_mixture_like(y[train], fit_slots, fit_slots, seed=1).double(),
                     slot_mixture_like(y[train], fit_slots, [slot[i] for i in test.tolist()], seed=2).double()))
    sets = [s for s in sets if s[1] in data_sets]
    out: dict = {str(m): {name: {} for name in data_sets} for m in models}
    seeds = list(seeds)
    for lr, steps in progress_bar(list(runs), desc="used counts", disable=not progress):
        fit = torch.stack([f for _, _, f, _ in sets for _ in seeds])
        with torch.enable_grad():
            ds = train_dictionaries(fit, fit, RECIPE["n_features"], RECIPE["k"], seeds * len(sets), steps=steps,
                                    lr=lr, batch_size=RECIPE["batch_size"], dtype=torch.float64, progress=False)
        for i, (m, name, _, held) in enumerate(sets):
            group = ds[i * len(seeds):(i + 1) * len(seeds)]
            out[str(m)][name][_key(lr, steps)] = {
                "used": [int((d.encode(held) > 0).any(0).sum()) for d in group],
                "held_out": _r([fvu(held, d(held)) for d in group])}
    return out


def load_used(path: str | Path | None = None) -> dict:
    """The shipped file (``USED_PATH``), or the file at ``path``."""
    return json.loads(Path(path or USED_PATH).read_text(encoding="utf-8"))


NAMES = {"y": "y", "gaussian": "Gaussian", "slots": "slot mixture"}


def used_table(study: dict) -> str:
    """Printable lines: per run, the features used and the held-out FVU on y and on each control in the file (the
    Gaussian; the slot mixture where trained, else "—"), each as its range over every model and seed."""
    runs = study["models"].values()
    data = [name for name in DATA if name in next(iter(runs))]
    head = "".join(f"{NAMES[n]:>14s}" for n in data)
    lines = [f"autoencoders, 256 features, k = 8; range over {len(study['models'])} models × "
             f"{len(study['seeds'])} seeds", f"  {'':22s}{'features used':^{14 * len(data)}s}  "
             f"{'held-out FVU':^{14 * len(data)}s}".rstrip(), f"  {'run':22s}{head}  {head}"]
    for key in study["runs"]:
        def span(name, field, fmt):
            if key not in next(iter(runs))[name]:
                return "—"
            v = [u for e in runs for u in e[name][key][field]]
            return f"{fmt(min(v))}–{fmt(max(v))}"
        used = "".join(f"{span(n, 'used', str):>14s}" for n in data)
        held = "".join(f"{span(n, 'held_out', lambda v: f'{v:.2%}'):>14s}" for n in data)
        lines.append(f"  {key:22s}{used}  {held}")
    return "\n".join(lines)


def _per_model(study: dict, name: str, run: str) -> list[float]:
    return [sum(e[name][run]["used"]) / len(e[name][run]["used"]) for e in study["models"].values()]


def used_family(study: dict) -> dict[str, PairedDifference]:
    """For ``helpers.stats.holm``: per run, the features used on y minus on its Gaussian, paired over the models
    (each model: the mean over its seeds)."""
    return {f"used, y − Gaussian, {run}": paired_difference(_per_model(study, "y", run),
                                                            _per_model(study, "gaussian", run))
            for run in study["runs"]}


def count_family(study: dict, run: str = READ_RUN) -> dict[str, PairedDifference]:
    """For ``helpers.stats.holm``: at ``run``, y's count against both controls (is it more than the slot
    structure alone gives?) and the slot mixture's against the Gaussian's, paired over the models (seed means)."""
    y, g, mix = (_per_model(study, name, run) for name in DATA)
    return {"used, y − Gaussian": paired_difference(y, g), "used, y − slot mixture": paired_difference(y, mix),
            "used, slot mixture − Gaussian": paired_difference(mix, g)}


def count_line(study: dict, run: str = READ_RUN) -> str:
    """One printable line: the features used at ``run`` on y and each control, range over models and seeds."""
    spans = []
    for name in DATA:
        v = [u for e in study["models"].values() for u in e[name][run]["used"]]
        spans.append(f"{NAMES[name]} {min(v)}–{max(v)}")
    return (f"features used on held-out rows, autoencoders ({run}), {len(study['models'])} models × "
            f"{len(study['seeds'])} seeds: " + ", ".join(spans))


def slot_share(study: dict, run: str = READ_RUN) -> float:
    """The slot mixture's excess of features used over the Gaussian's, as a share of y's (means over models)."""
    y, g, mix = (sum(_per_model(study, name, run)) for name in DATA)
    return (mix - g) / (y - g)


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=list(MODELS))
    parser.add_argument("--steps", type=int, nargs="+", default=None,
                        help="a small run: these step counts at learning rate 0.01 instead of RUNS")
    parser.add_argument("--slots", action="store_true",
                        help="train the slot mixture's autoencoders at READ_RUN, into the existing file at --out")
    parser.add_argument("--out", type=Path, default=USED_PATH)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.slots:
        study = load_used(args.out)
        lr, steps = next((lr, n) for lr, n in RUNS if _key(lr, n) == READ_RUN)
        for m, entry in used_study(args.models, [(lr, steps)], data_sets=("slots",)).items():
            study["models"][m]["slots"] = entry["slots"]
        study["slots_command"] = " ".join(["python -m helpers.used_counts", *argv])
    else:
        runs = [(1e-2, n) for n in args.steps] if args.steps else list(RUNS)
        study = {"command": " ".join(["python -m helpers.used_counts", *argv]), "seeds": [0, 1],
                 "runs": [_key(lr, n) for lr, n in runs], "models": used_study(args.models, runs)}
    args.out.write_text(json.dumps(study, indent=1) + "\n", encoding="utf-8")
    return args.out

if __name__ == "__main__":
    print(main())
