r"""How many features a TopK autoencoder uses depends on its training run: notebook 09's Exercise 5, as a file.

For the shipped fact models ``MODELS`` (layer 1's FFN output ``y`` on the distinct prefixes, split as in
``helpers.dictionary_study.RECIPE``) and for a Gaussian with ``y``'s mean and covariance (``gaussian_like``, the
fitting draw seed 1, the held-out draw seed 2), a TopK autoencoder (256 features, k = 8, float64, the data start)
is trained for each run in ``RUNS`` (a learning rate and a number of steps) and 2 seeds. Per model, data, run and
seed the file holds ``used`` (features active on some held-out row) and ``held_out`` (the held-out FVU).

Make the file (about 4 minutes of one CPU core), or a small run to see the format::

    python -m helpers.used_counts
    python -m helpers.used_counts --models 0 --steps 20 40 --out /tmp/used.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.dictionary import fact_prefixes, fvu, train_dictionaries
from helpers.dictionary_study import MODELS, RECIPE, _r, gaussian_like, layer_data
from helpers.facts import load_facts, make_dataset
from helpers.progress import progress as progress_bar
from helpers.stats import PairedDifference, paired_difference

__all__ = ["USED_PATH", "RUNS", "used_study", "load_used", "used_table", "used_family", "main"]

USED_PATH = Path(__file__).resolve().parent / "data" / "used_counts.json"
#: (learning rate, steps): Exercise 5's run, the same rate 10x longer, and a 3x larger rate
RUNS = ((1e-2, 1000), (1e-2, 10000), (3e-2, 1000))
DATA = ("y", "gaussian")


def _key(lr: float, steps: int) -> str:
    return f"lr {lr:g}, {steps} steps"


@torch.no_grad()
def used_study(models: Sequence[int] = MODELS, runs: Sequence[tuple[float, int]] = RUNS,
               seeds: Sequence[int] = (0, 1), layer: int = 1, progress: bool = True) -> dict:
    """``{model: {"y" | "gaussian": {run key: {"used": [per seed], "held_out": [per seed]}}}}``; every model,
    data set and seed of one run trains side by side (each dictionary as if trained alone)."""
    data = make_dataset(load_facts())
    p = fact_prefixes(data)
    sets = []                                                          # (model, name, fit (N, 48), held out)
    for m in models:
        _, y, train, test = layer_data(data, p, m, layer)
        sets.append((m, "y", y[train], y[test]))
        sets.append((m, "gaussian", gaussian_like(y[train], len(train), seed=1).double(),
                     gaussian_like(y[train], len(test), seed=2).double()))
    out: dict = {str(m): {name: {} for name in DATA} for m in models}
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


def used_table(study: dict) -> str:
    """Printable lines: per run, the features used and the held-out FVU on y and on the Gaussian, each as its
    range over every model and seed, and in how many runs y uses more features than its Gaussian."""
    runs = study["models"].values()
    lines = [f"autoencoders, 256 features, k = 8; range over {len(study['models'])} models × "
             f"{len(study['seeds'])} seeds", f"  {'run':24s}{'used: y':>10s}{'Gaussian':>10s}"
             f"{'FVU: y':>16s}{'Gaussian':>16s}   y uses more"]
    for key in study["runs"]:
        def pooled(name, field):
            return [v for e in runs for v in e[name][key][field]]

        def span(v, fmt):
            return f"{fmt(min(v))}–{fmt(max(v))}"
        uy, ug = pooled("y", "used"), pooled("gaussian", "used")
        fy, fg = pooled("y", "held_out"), pooled("gaussian", "held_out")
        pct = lambda v: f"{v:.2%}"
        lines.append(f"  {key:24s}{span(uy, str):>10s}{span(ug, str):>10s}{span(fy, pct):>16s}{span(fg, pct):>16s}"
                     f"   {sum(a > b for a, b in zip(uy, ug))} of {len(uy)}")
    return "\n".join(lines)


def used_family(study: dict) -> dict[str, PairedDifference]:
    """For ``helpers.stats.holm``: per run, the features used on y minus on its Gaussian, paired over the models
    (each model: the mean over its seeds)."""
    def per_model(name, run):
        return [sum(e[name][run]["used"]) / len(e[name][run]["used"]) for e in study["models"].values()]
    return {f"used, y − Gaussian, {run}": paired_difference(per_model("y", run), per_model("gaussian", run))
            for run in study["runs"]}


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=list(MODELS))
    parser.add_argument("--steps", type=int, nargs="+", default=None,
                        help="a small run: these step counts at learning rate 0.01 instead of RUNS")
    parser.add_argument("--out", type=Path, default=USED_PATH)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs = [(1e-2, n) for n in args.steps] if args.steps else list(RUNS)
    study = {"command": " ".join(["python -m helpers.used_counts", *argv]), "seeds": [0, 1],
             "runs": [_key(lr, n) for lr, n in runs], "models": used_study(args.models, runs)}
    args.out.write_text(json.dumps(study, indent=1) + "\n", encoding="utf-8")
    return args.out


if __name__ == "__main__":
    print(main())
