"""The sparsity-reconstruction frontier of notebook 09's transcoder: held-out FVU and dead features against k.

For each of the first five shipped fact models (``helpers.fact_model`` seeds 0-4), layer 1's FFN input ``x`` and
output ``y`` at the 1,681 distinct prefixes, split as in section 3 (80 % to fit, 20 % held out): TopK
transcoders with section 3's recipe (256 features, the data start, 1,000 steps, float64, dictionary seeds 0 and
1) at k = 2, 4, 8, 16, 32 active features per prefix. Shipped per model and k: each seed's held-out FVU, its
dead features (firing on none of the 1,681 prefixes), and the held-out FVU of PCA-k of y (the best k fixed
directions, an oracle that sees y). One model's runs train side by side; the data start can begin two features on
the same example, and a wider top-k breaks their exact tie differently, so a run here is another draw of the
recipe than a lone run of the same seed (model 0, seed 0, k = 8: held-out FVU 0.65 % and 131 dead features here,
0.66 % and 134 in notebook 09's section 3).

Made by ``python -m helpers.sparsity_frontier`` (about 3 minutes of one CPU thread), which writes
``helpers/data/sparsity_frontier.json``; ``--models 0 --ks 2 8 --seeds 1 --steps 50 --out /tmp/f.json`` is a
small run to see the format.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.dictionary import fact_prefixes, firing_counts, fvu, train_dictionaries
from helpers.dictionary_study import ARM_LR, RECIPE, layer_data, pca_fvu
from helpers.facts import load_facts, make_dataset

__all__ = ["FRONTIER_PATH", "KS", "run", "load", "frontier_means", "main"]

FRONTIER_PATH = Path(__file__).resolve().parent / "data" / "sparsity_frontier.json"
KS = (2, 4, 8, 16, 32)
LAYER = 1


def run(models: Sequence[int] = range(5), ks: Sequence[int] = KS, seeds: Sequence[int] = (0, 1),
        steps: int = RECIPE["steps"], progress: bool = True) -> dict:
    """``{"ks", "models", "seeds", "steps", "runs": {model: {k: {"held_out", "dead", "pca"}}}}`` (see the module
    docstring); all of one model's transcoders train side by side."""
    data = make_dataset(load_facts())
    prefixes = fact_prefixes(data)
    out: dict = {"ks": list(ks), "models": list(models), "seeds": list(seeds), "steps": steps, "runs": {}}
    for m in models:
        x, y, train, test = layer_data(data, prefixes, m, LAYER)
        grid = [(k, s) for k in ks for s in seeds]
        dictionaries = train_dictionaries(x[train], y[train], RECIPE["n_features"], [k for k, _ in grid],
                                          [s for _, s in grid], steps=steps, lr=ARM_LR["transcoder"],
                                          batch_size=RECIPE["batch_size"], dtype=torch.float64,
                                          progress=progress, desc=f"model {m}: k = {', '.join(map(str, ks))}")
        runs = {str(k): {"held_out": [], "dead": [], "pca": round(pca_fvu(y[train], y[test], k), 6)} for k in ks}
        with torch.no_grad():
            for (k, _), d in zip(grid, dictionaries):
                runs[str(k)]["held_out"].append(round(fvu(y[test], d(x[test])), 6))
                runs[str(k)]["dead"].append(int((firing_counts(d.encode(x)) == 0).sum()))
        out["runs"][str(m)] = runs
    return out


def load(path: str | Path = FRONTIER_PATH) -> dict:
    """The shipped file."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def frontier_means(record: dict) -> dict[str, list[float]]:
    """Per k (in ``record["ks"]`` order), means over models of each model's seed mean: ``{"held_out": FVU,
    "pca": PCA-k's FVU, "dead": dead features}``, plus ``"held_out_range"``: (min, max) of the model means."""
    def per_model(k, key):
        return [sum(v) / len(v) if isinstance(v, list) else v
                for v in (record["runs"][m][str(k)][key] for m in record["runs"])]
    out: dict = {"held_out": [], "pca": [], "dead": [], "held_out_range": []}
    for k in record["ks"]:
        for key in ("held_out", "pca", "dead"):
            values = per_model(k, key)
            out[key].append(sum(values) / len(values))
        fits = per_model(k, "held_out")
        out["held_out_range"].append((min(fits), max(fits)))
    return out


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=list(range(5)))
    parser.add_argument("--ks", type=int, nargs="+", default=list(KS))
    parser.add_argument("--seeds", type=int, default=2, help="dictionary seeds per model and k")
    parser.add_argument("--steps", type=int, default=RECIPE["steps"])
    parser.add_argument("--out", type=Path, default=FRONTIER_PATH)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    record = {"command": "python -m helpers.sparsity_frontier",
              **run(args.models, args.ks, range(args.seeds), args.steps)}
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return args.out


if __name__ == "__main__":
    print(main())
