r"""What the number of active features k buys: notebook 09's sparsity-reconstruction frontier, shipped as a file.

For the shipped fact models ``MODELS``, layer 1, split as in ``helpers.dictionary_study.RECIPE``, a TopK
transcoder with 256 features (learning rate 0.03, the data start, float64) is trained with each k in ``KS``, 2 seeds,
for each number of steps in ``STEPS``. Per model, steps, k and seed the file holds ``held_out`` (the held-out FVU)
and ``l0`` (the mean number of active features per held-out prefix, at most k).

Make the file (about 5 minutes of one CPU core), or a small run to see the format::

    python -m helpers.dictionary_k
    python -m helpers.dictionary_k --models 0 --ks 2 4 --steps 20 --out /tmp/k.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.dictionary import fact_prefixes, fvu, l0, train_dictionaries
from helpers.dictionary_study import MODELS, RECIPE, _r, layer_data, pca_fvu
from helpers.facts import load_facts, make_dataset
from helpers.progress import progress as progress_bar
from helpers.stats import PairedDifference, paired_difference

__all__ = ["K_PATH", "KS", "STEPS", "k_study", "pca_k", "load_k", "k_table", "k_family", "main"]

K_PATH = Path(__file__).resolve().parent / "data" / "dictionary_k.json"
KS = (1, 2, 4, 8, 16, 32)
STEPS = (1000, 3000)


@torch.no_grad()
def k_study(models: Sequence[int] = MODELS, ks: Sequence[int] = KS, steps: Sequence[int] = STEPS,
            seeds: Sequence[int] = (0, 1), layer: int = 1, progress: bool = True) -> dict:
    """``{model: {str(steps): {str(k): {"held_out": [per seed], "l0": [per seed]}}}}``; per model, length and k,
    the seeds train side by side, as ``helpers.dictionary_sizes`` does."""
    data = make_dataset(load_facts())
    p = fact_prefixes(data)
    seeds = list(seeds)
    out: dict = {}
    for m in progress_bar(list(models), desc="k sweep", disable=not progress):
        x, y, train, test = layer_data(data, p, m, layer)
        out[str(m)] = {str(n): {} for n in steps}
        for n in steps:
            for k in ks:
                with torch.enable_grad():
                    ds = train_dictionaries(x[train], y[train], RECIPE["n_features"], k, seeds, steps=n, lr=3e-2,
                                            batch_size=RECIPE["batch_size"], dtype=torch.float64, progress=False)
                out[str(m)][str(n)][str(k)] = _r({"held_out": [fvu(y[test], d(x[test])) for d in ds],
                                                  "l0": [float(l0(d.encode(x[test]))) for d in ds]})
    return out


@torch.no_grad()
def pca_k(models: Sequence[int] = MODELS, ks: Sequence[int] = KS, layer: int = 1) -> dict[int, list[float]]:
    """Per k, each model's held-out FVU of PCA-k of the FFN output y (fitted on the training prefixes): the best
    any code confined to k fixed directions does, an oracle beside the TopK-k transcoders. Under a second of CPU."""
    data = make_dataset(load_facts())
    p = fact_prefixes(data)
    splits = [layer_data(data, p, m, layer)[1:] for m in models]          # (y, train, test) per model
    return {k: [pca_fvu(y[train], y[test], k) for y, train, test in splits] for k in ks}


def load_k(path: str | Path | None = None) -> dict:
    """The shipped sweep (``K_PATH``), or the file at ``path``."""
    return json.loads(Path(path or K_PATH).read_text(encoding="utf-8"))


def k_table(study: dict, pca: dict[int, list[float]] | None = None) -> str:
    """Printable lines: per k, the mean L0 and the held-out FVU at each length, mean (range) over the models
    (each model: the mean over its seeds); with ``pca`` (from ``pca_k``), PCA-k's held-out FVU, mean over models."""
    runs = study["models"].values()

    def per_model(n, k, key):
        return [sum(e[str(n)][str(k)][key]) / len(e[str(n)][str(k)][key]) for e in runs]
    last = study["steps"][-1]
    lines = [f"layer 1 transcoders, 256 features; mean (range) over {len(study['models'])} models",
             "     k    L0" + "".join(f"{f'held-out FVU, {n:,} steps':>28s}" for n in study["steps"])
             + ("   PCA-k of y" if pca else "")]
    for k in study["ks"]:
        cells = [per_model(n, k, "held_out") for n in study["steps"]]
        l0s = per_model(last, k, "l0")
        lines.append(f"  {k:4d}  {sum(l0s) / len(l0s):4.1f}" + "".join(
            f"{f'{sum(v) / len(v):.2%} ({min(v):.2%}–{max(v):.2%})':>28s}" for v in cells)
            + (f"{sum(pca[k]) / len(pca[k]):13.2%}" if pca else ""))
    return "\n".join(lines)


def k_family(study: dict, pca: dict[int, list[float]], steps: int | None = None) -> dict[str, PairedDifference]:
    """For ``helpers.stats.holm``: per k, the transcoders' held-out FVU minus PCA-k's, in units of PCA-k's (as
    section 4 measures against PCA-8), paired over the models (each model: the mean over its seeds), at ``steps``
    (default: the longest run)."""
    n = str(steps or study["steps"][-1])

    def ratio(e, k, p):
        return sum(e[n][str(k)]["held_out"]) / len(e[n][str(k)]["held_out"]) / p
    return {f"transcoder − PCA-{k}": paired_difference(
        [ratio(e, k, p) for e, p in zip(study["models"].values(), pca[k])], [1.0] * len(pca[k]))
        for k in study["ks"]}

def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=list(MODELS))
    parser.add_argument("--ks", type=int, nargs="+", default=list(KS))
    parser.add_argument("--steps", type=int, nargs="+", default=list(STEPS))
    parser.add_argument("--out", type=Path, default=K_PATH)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    study = {"command": " ".join(["python -m helpers.dictionary_k", *argv]), "ks": args.ks, "steps": args.steps,
             "models": k_study(args.models, args.ks, args.steps)}
    args.out.write_text(json.dumps(study, indent=1) + "\n", encoding="utf-8")
    return args.out


if __name__ == "__main__":
    print(main())
