"""Does another seed's transcoder find the same features? Notebook 09's quick check 2, measured.

Five transcoders (seeds 0-4) trained with section 3's recipe (256 features, k = 8, the data start, 1,000 steps,
float64) from layer 1's FFN input to its output in the fact model (seed 0), on the same 1,345 training prefixes.
For each of seed 0's used features (active on some of the 1,681 prefixes): the largest cosine between its value
(column of ``W_dec``) and the value of any used feature of another seed. Shipped: how many of seed 0's used
features have a match above 0.9 and above 0.99 in each other seed, the median best cosine, and each seed's
held-out FVU (336 prefixes).

Made by ``python -m helpers.feature_match`` (under a minute on one CPU thread), which writes
``helpers/data/feature_match.json``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.dictionary import fact_prefixes, ffn_io, fvu, held_out_split, train_dictionaries
from helpers.dictionary_study import RECIPE
from helpers.fact_model import load_fact_model
from helpers.facts import load_facts, make_dataset

__all__ = ["FEATURE_MATCH_PATH", "run", "load", "match_line", "main"]

FEATURE_MATCH_PATH = Path(__file__).resolve().parent / "data" / "feature_match.json"
LAYER = 1


def run(seeds: Sequence[int] = range(5)) -> dict:
    """``{"used": [per seed], "held_out": [FVU per seed], "above_0.9": [per other seed], "above_0.99": [...], "median_best": [...]}``, the
    matches of seed ``seeds[0]``'s used features against each other seed's used features."""
    data = make_dataset(load_facts())
    model = load_fact_model(data, seed=0)[0].double()
    prefixes = fact_prefixes(data)
    inputs, outputs = ffn_io(model, data.ids)
    x, y = (t[LAYER][prefixes.rows, prefixes.positions] for t in (inputs, outputs))
    train, test = held_out_split(len(x), held_out=0.2)
    dictionaries = train_dictionaries(x[train], y[train], RECIPE["n_features"], RECIPE["k"], list(seeds),
                                      steps=RECIPE["steps"], dtype=torch.float64, desc="transcoders, seeds")
    with torch.no_grad():
        values = []
        for d in dictionaries:
            used = (d.encode(x) > 0).any(0)
            values.append(torch.nn.functional.normalize(d.W_dec[:, used], dim=0))
        out: dict = {"seeds": list(seeds), "used": [v.shape[1] for v in values],
                     "held_out": [round(fvu(y[test], d(x[test])), 6) for d in dictionaries],
                     "above_0.9": [], "above_0.99": [], "median_best": []}
        for other in values[1:]:
            best = (values[0].T @ other).max(1).values                  # seed 0's used features: best match
            out["above_0.9"].append(int((best > 0.9).sum()))
            out["above_0.99"].append(int((best > 0.99).sum()))
            out["median_best"].append(round(float(best.median()), 2))
    return out


def load(path: str | Path = FEATURE_MATCH_PATH) -> dict:
    """The shipped file."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def match_line(record: dict) -> str:
    """Two lines: the seeds' held-out FVU; how many of seed 0's used features have a value at cosine > 0.9 (and > 0.99) in each other seed."""
    others = ", ".join(str(s) for s in record["seeds"][1:])
    fit = record["held_out"]
    return (f"transcoders, seeds 0-4: held-out FVU {min(fit):.2%} to {max(fit):.2%}\n  of seed 0's "
            f"{record['used'][0]} features that fire on some prefix, with a value at cosine > 0.9 in seed {others}: "
            f"{', '.join(map(str, record['above_0.9']))} (> 0.99: {', '.join(map(str, record['above_0.99']))}; "
            f"median best cosine {min(record['median_best']):.2f}–{max(record['median_best']):.2f})")


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=FEATURE_MATCH_PATH)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    record = {"command": "python -m helpers.feature_match", **run()}
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return args.out


if __name__ == "__main__":
    print(main())
