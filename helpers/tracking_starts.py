r"""Section 6's start control (notebook 09): do a dictionary's features track labels because of training, or
because of where training started?

Every dictionary of the study (``helpers.dictionary_study``) starts from the *data start*: feature i's key is one
remembered training prefix, ``x_r/‖x_r‖``. A TopK code over such keys is already a nearest-neighbour code, so its
strongest prefixes share a label before any training. Two rows settle what training adds, on layer 1 of the
shipped fact models ``MODELS`` (the study's prefixes, split and recipe: 256 features, k = 8, float64):

* ``data_start``: the data start itself, never trained (seed s is the start of the study's transcoder seed s);
* ``random_start``: transcoders trained from the *random* start (random unit keys and values), 1,000 steps at
  the transcoder's rate, with their held-out FVU.

Per model and seed the file holds ``tracking_rates`` (share of judged units whose 10 strongest prefixes share a
relation, an answer, a slot; and how many were judged). ``start_family`` compares, paired over the models (each
model: the mean over its seeds), the random-start features with the neurons and the trained data-start features
with their untrained start.

Make the file (about 2 minutes of one CPU core), or a small run to see the format::

    python -m helpers.tracking_starts
    python -m helpers.tracking_starts --models 0 --seeds 2 --steps 20 --out /tmp/starts.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.dictionary import STARTS, TopKDictionary, fact_prefixes, fvu, tracking_rates, train_dictionaries
from helpers.dictionary_study import ARM_LR, MODELS, RECIPE, _r, layer_data, model_means
from helpers.facts import load_facts, make_dataset
from helpers.stats import PairedDifference, paired_difference

__all__ = ["STARTS_PATH", "LABELS", "data_start", "start_runs", "load_starts", "start_table", "start_family", "main"]

STARTS_PATH = Path(__file__).resolve().parent / "data" / "tracking_starts.json"
LABELS = ("relation", "answer", "slot")
ROWS = {"data_start": "data start, untrained", "transcoder": "transcoder (data start, trained)",
        "random_start": "transcoder (random start, trained)", "neurons": "neurons"}


def data_start(x_train: torch.Tensor, y_train: torch.Tensor, seed: int = 0) -> TopKDictionary:
    """The untrained data start of the recipe's dictionary ``seed``: keys = remembered rows of ``x_train``
    ``(N, d_in)``, values = their ``y_train`` ``(N, d_out)`` rows, 256 features, k = 8."""
    return TopKDictionary(*STARTS["data"](x_train, y_train, RECIPE["n_features"], seed), RECIPE["k"]).eval()


@torch.no_grad()
def start_runs(models: Sequence[int] = MODELS, seeds: Sequence[int] = range(5), steps: int = RECIPE["steps"],
               layer: int = 1) -> dict:
    """``{model: {"data_start": [rates per seed], "random_start": [rates per seed], "random_start_fvu": [...]}}``;
    rates: ``{"relation", "answer", "slot": share, "judged": int}``. Every random-start transcoder of every model
    and seed trains side by side (each as if trained alone)."""
    data = make_dataset(load_facts())
    p = fact_prefixes(data)
    seeds, sets = list(seeds), [layer_data(data, p, m, layer) for m in models]
    fit_x = torch.stack([x[train] for x, _, train, _ in sets for _ in seeds])      # (models × seeds, N, d)
    fit_y = torch.stack([y[train] for _, y, train, _ in sets for _ in seeds])
    trained = train_dictionaries(fit_x, fit_y, RECIPE["n_features"], RECIPE["k"], seeds * len(sets), steps=steps,
                                 lr=ARM_LR["transcoder"], batch_size=RECIPE["batch_size"], start="random",
                                 dtype=torch.float64, desc="random-start transcoders")

    def rates(d: TopKDictionary, x: torch.Tensor) -> dict:
        r, judged = tracking_rates(d.encode(x[p.named]), p.labels)
        return {**{label: r[label] for label in LABELS}, "judged": judged}

    out: dict = {}
    for i, (m, (x, y, train, test)) in enumerate(zip(models, sets)):
        group = trained[i * len(seeds):(i + 1) * len(seeds)]
        out[str(m)] = {"data_start": [rates(data_start(x[train], y[train], s), x) for s in seeds],
                       "random_start": [rates(d, x) for d in group],
                       "random_start_fvu": [fvu(y[test], d(x[test])) for d in group]}
    return _r(out)


def load_starts(path: str | Path | None = None) -> dict:
    """The shipped file (``STARTS_PATH``), or the file at ``path``."""
    return json.loads(Path(path or STARTS_PATH).read_text(encoding="utf-8"))


def _per_model(study: dict, starts: dict, unit: str, label: str, n_seeds: int | None = None) -> list[float]:
    """One value per model (the study's model order): the mean over seeds of ``unit``'s share tracking ``label``;
    ``n_seeds``: only the first seeds (the data start of the study's own transcoder seeds)."""
    if unit in ("transcoder", "neurons"):
        return model_means(study, 1, lambda e: [r[label] for r in e["tracking"][unit]])
    runs = [starts["models"][m][unit][:n_seeds] for m in study["models"]]
    return [sum(r[label] for r in rs) / len(rs) for rs in runs]


def start_table(study: dict, starts: dict) -> str:
    """Printable lines: per row of ``ROWS``, the share (%) tracking each label, mean over models, and the judged
    units' range; then the random-start transcoders' held-out FVU range."""
    lines = [f"{'share tracking, mean over 5 models':38s}" + "".join(f"{label:>10s}" for label in LABELS)
             + "   judged units"]
    for unit, name in ROWS.items():
        cells = "".join(f"{100 * sum(v) / len(v):9.0f}%" for v in (_per_model(study, starts, unit, label)
                                                                    for label in LABELS))
        judged = _per_model(study, starts, unit, "judged")
        lines.append(f"  {name:36s}{cells}   {min(judged):.0f}–{max(judged):.0f}")
    held = [v for e in starts["models"].values() for v in e["random_start_fvu"]]
    n = len(next(iter(starts["models"].values()))["random_start"])
    lines.append(f"random-start transcoders ({n} seeds per model): held-out FVU {min(held):.2%} to {max(held):.2%}")
    return "\n".join(lines)


def start_family(study: dict, starts: dict) -> dict[str, PairedDifference]:
    """For ``helpers.stats.holm``, per label: random-start features − neurons, and the trained transcoder − its
    untrained data start (the study's transcoder seeds only), paired over the models."""
    n = len(next(iter(study["models"].values()))["1"]["tracking"]["transcoder"])
    family = {}
    for label in LABELS:
        family[f"{label}: random-start features − neurons"] = paired_difference(
            _per_model(study, starts, "random_start", label), _per_model(study, starts, "neurons", label))
        family[f"{label}: trained − untrained data start"] = paired_difference(
            _per_model(study, starts, "transcoder", label), _per_model(study, starts, "data_start", label, n))
    return family


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=list(MODELS))
    parser.add_argument("--seeds", type=int, default=5, help="dictionary seeds per model")
    parser.add_argument("--steps", type=int, default=RECIPE["steps"])
    parser.add_argument("--out", type=Path, default=STARTS_PATH)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs = start_runs(args.models, range(args.seeds), args.steps)
    out = {"command": "python -m helpers.tracking_starts", "seeds": list(range(args.seeds)), "steps": args.steps,
           "lr": ARM_LR["transcoder"], "models": runs}
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return args.out


if __name__ == "__main__":
    print(main())
