r"""Shipped runs of notebook 09's sections 1 and 2: the toy models of superposition and their dictionaries.

Section 1 trains 4 sparsities × 5 seeds of ``helpers.superposition``'s toy (20 features, 5 dimensions, 1,000
AdamW steps); section 2 trains TopK-1 autoencoders with 40 directions on the hidden vectors of the S = 0.99 toys,
from the data start and from the random start (``toy_recovery``). Both are the costliest live runs of the
notebook, so ``python -m helpers.toy_runs`` writes them to ``helpers/data/toy_runs.json`` (about 40 s): every
toy's weights and bias, and ``toy_recovery``'s counts for seeds 0-4. The notebook trains seed 0 of each live
(``train_toy_models(..., train_seeds=[0])`` draws the same data as the full run) and prints it beside the file.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.superposition import ToyModels, train_toy_models

__all__ = ["TOY_RUNS", "TOY_RUNS_PATH", "toy_runs", "load_toy_runs", "toy_models"]

TOY_RUNS_PATH = Path(__file__).resolve().parent / "data" / "toy_runs.json"
TOY_RUNS = {"n_features": 20, "n_hidden": 5, "sparsities": [0.0, 0.7, 0.9, 0.99], "seeds": [0, 1, 2, 3, 4],
            "recovery_sparsity": 0.99, "n_directions": 40, "dictionary_steps": 2000, "lr": 1e-2}


def toy_runs(config: dict = TOY_RUNS) -> dict:
    """The toys (weights, biases, in instance order) and ``toy_recovery``'s counts, for ``config``'s seeds."""
    from helpers.dictionary_study import toy_recovery          # imports this package's heavier modules
    c = config
    toys = train_toy_models(n_features=c["n_features"], n_hidden=c["n_hidden"], sparsities=c["sparsities"],
                            seeds=c["seeds"], progress=False)
    found = toy_recovery(toys, c["recovery_sparsity"], c["seeds"], n_directions=c["n_directions"],
                         steps=c["dictionary_steps"], lr=c["lr"], progress=False)
    return {"sparsity": toys.sparsity.tolist(), "seed": toys.seed.tolist(), "W": toys.W.tolist(),
            "b": toys.b.tolist(), "importance": toys.importance.tolist(),
            "recovery": {key: found[key] for key in ("represented", "recovered", "used")}}


def load_toy_runs(path: Path = TOY_RUNS_PATH) -> dict:
    """The shipped runs (``python -m helpers.toy_runs``)."""
    return json.loads(Path(path).read_text())


def toy_models(runs: dict) -> ToyModels:
    """The shipped toys as a ``ToyModels`` (float64; no loss curves: ``losses`` is empty)."""
    return ToyModels(torch.tensor(runs["W"], dtype=torch.float64), torch.tensor(runs["b"], dtype=torch.float64),
                     torch.tensor(runs["sparsity"]), torch.tensor(runs["seed"]),
                     torch.tensor(runs["importance"], dtype=torch.float64), torch.empty(0, len(runs["seed"])))


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=TOY_RUNS_PATH)
    args = parser.parse_args(argv)
    out = {"config": TOY_RUNS, **toy_runs()}
    args.out.write_text(json.dumps(out) + "\n")
    return args.out


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(main())
