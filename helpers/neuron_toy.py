r"""Elhage et al.'s (2022) "ReLU hidden layer" toy model: superposition in a layer with neurons (notebook 09).

The toy of ``helpers.superposition`` has no neurons: any rotation of its hidden space gives the same model. This
one puts a ReLU on the hidden layer, which gives it a privileged basis, as an FFN's neurons have:

    h  = ReLU(W x)            (m,)   W: (m, n); W[j, i] is the weight from feature i to neuron j
    x' = ReLU(Wᵀ h + b)       (n,)

trained on the same sparse data (each feature 0 with probability ``S``, else uniform on [0, 1]) with importances
``decay**i``. The paper's setting: ``n = 10`` features, ``m = 5`` neurons, ``decay = 0.75``.

What is read off it:

* ``features_per_neuron``: the features with weight above a threshold into each neuron (> 1: polysemantic);
* the **neuron direction** of feature i, ``ReLU(W[:, i])``: the neurons' activations when feature i alone is on
  at 1. A feature is **represented** when that direction has length above 0.5 (section 1's test, through the ReLU);
* how many of the represented features a sparse dictionary trained on ``h`` recovers (some direction at cosine
  above 0.95), from the random start and from the data start, against three controls: the neurons themselves (the
  basis vectors), as many random directions as the dictionary has, drawn where the activations live (``|Gaussian|``
  entries, normalised: the positive orthant, since ``h >= 0``), and the data start at step 0 (each direction one
  input ``h``, never trained; at S = 0.9 most inputs have one feature on, so this start already recovers almost
  every represented feature).

``neuron_toy_runs`` does this for several seeds; ``python -m helpers.neuron_toy`` writes
``helpers/data/neuron_toy.json`` (fifteen seeds, about 10 CPU-seconds), which notebook 09 reads beside a live seed 0.
``python -m helpers.neuron_toy --contrast`` writes ``helpers/data/neuron_toy_sparsity.json`` (about 20 CPU-seconds):
the same fifteen seeds at the less sparse settings of ``SPARSITY_CONTRAST``, each dictionary's ``k`` the expected
number of features on per input, ``n (1 - S)``. ``sparsity_table`` reads the two files side by side.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers import validate
from helpers.dictionary import STARTS, train_dictionaries
from helpers.superposition import best_cosines

__all__ = ["NEURON_TOY", "NEURON_TOY_PATH", "train_neuron_toys", "neuron_hidden", "features_per_neuron",
           "neuron_directions", "represented", "recovered_features", "recovery_arms", "neuron_toy_runs", "load_neuron_toy",
           "SPARSITY_CONTRAST", "K_SWEEP", "NEURON_TOY_SPARSITY_PATH", "k_sweep_line", "load_neuron_toy_sparsity", "sparsity_table"]

NEURON_TOY_PATH = Path(__file__).resolve().parent / "data" / "neuron_toy.json"
NEURON_TOY_SPARSITY_PATH = Path(__file__).resolve().parent / "data" / "neuron_toy_sparsity.json"
NEURON_TOY = {"n_features": 10, "n_hidden": 5, "importance_decay": 0.75, "sparsity": 0.9, "steps": 1000,
              "n_inputs": 2000, "n_directions": 40, "k": 1, "dictionary_steps": 2000, "lr": 1e-2,
              "weight_threshold": 0.5, "cosine": 0.95}
SPARSITY_CONTRAST = ((0.5, 5), (0.7, 3))     # (S, k): the less sparse settings; S = 0.9 (k = 1) is NEURON_TOY
K_SWEEP = (1, 2, 3)                           # smaller k at the densest setting (k = 5 equals the 5 neurons)


def train_neuron_toys(seeds: Sequence[int], *, sparsity: float = 0.9, n_features: int = 10, n_hidden: int = 5,
                      importance_decay: float = 0.75, steps: int = 1000, batch_size: int = 256,
                      lr: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor]:
    """Train one ReLU-hidden-layer toy per seed, side by side (AdamW, fresh data every step, float64).

    Each seed draws its start (Xavier-normal) and its data from its own generators, so a seed's model is the same
    whichever seeds train beside it. Returns ``(W, W_start)``, each ``(len(seeds), m, n)``: trained and untrained.
    """
    seeds = [validate.non_negative_int("seed", s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    sparsity = validate.probability("sparsity", sparsity)
    n, m = validate.positive_int("n_features", n_features), validate.positive_int("n_hidden", n_hidden)
    std = (2.0 / (n + m)) ** 0.5
    start = torch.stack([torch.randn(m, n, generator=torch.Generator().manual_seed(s), dtype=torch.float64) * std
                         for s in seeds])
    W = start.clone().requires_grad_()
    b = torch.zeros(len(seeds), n, dtype=torch.float64, requires_grad=True)
    importance = importance_decay ** torch.arange(n, dtype=torch.float64)
    gens = [torch.Generator().manual_seed(1_000 + s) for s in seeds]
    opt = torch.optim.AdamW([W, b], lr=lr)
    for _ in range(validate.positive_int("steps", steps)):
        u = torch.stack([torch.rand(batch_size, n, generator=g, dtype=torch.float64) for g in gens])
        x = torch.where(u < 1 - sparsity, u / (1 - sparsity), 0.0)   # on with probability 1 - S, uniform on [0, 1)
        h = torch.relu(torch.bmm(x, W.transpose(1, 2)))                                     # (S, B, m)
        loss = (importance * (x - torch.relu(torch.bmm(h, W) + b[:, None, :])) ** 2).mean(1).sum(-1)
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        opt.step()
    return W.detach(), start


def neuron_hidden(W: torch.Tensor, sparsity: float, n: int, seed: int = 0) -> torch.Tensor:
    """``(n, m)``: the neuron activations ``ReLU(W x)`` of ``n`` inputs with at least one feature on."""
    validate.float_tensor("W", W, min_dims=2)
    gen = torch.Generator().manual_seed(validate.non_negative_int("seed", seed))
    kept: list[torch.Tensor] = []
    while sum(len(k) for k in kept) < n:
        shape = (4 * n, W.shape[1])
        x = torch.rand(shape, generator=gen, dtype=torch.float64) * (
            torch.rand(shape, generator=gen, dtype=torch.float64) >= sparsity)
        kept.append(x[(x > 0).any(1)])
    return torch.relu(torch.cat(kept)[:n].to(W.dtype) @ W.T)


def features_per_neuron(W: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """``(..., m)``: for each neuron, how many features reach it with a weight above ``threshold``."""
    return (W > threshold).sum(-1)


def neuron_directions(W: torch.Tensor) -> torch.Tensor:
    """``(m, n)``: column i is ``ReLU(W[:, i])``, the neurons' activations when feature i alone is on at 1."""
    return torch.relu(W)


def represented(W: torch.Tensor) -> torch.Tensor:
    """``(n,)`` bool: the features whose neuron direction ``ReLU(W[:, i])`` is longer than 0.5."""
    return neuron_directions(W).norm(dim=0) > 0.5


def recovered_features(W: torch.Tensor, found: torch.Tensor, cosine: float = 0.95) -> int:
    """How many represented features (neuron direction longer than 0.5) some column of ``found (m, F)`` matches
    at a cosine above ``cosine``."""
    d, keep = neuron_directions(W), represented(W)
    return int((best_cosines(d[:, keep], found) > cosine).sum()) if keep.any() else 0


def recovery_arms(W: torch.Tensor, hidden: torch.Tensor, trained: Sequence[torch.Tensor], seed: int,
                  config: dict = NEURON_TOY) -> dict[str, int]:
    """One seed's recovered counts: the data start at step 0 (its directions, from ``hidden``), the dictionaries
    trained from the data start and from the random start (``trained``: their ``W_dec``, in that order), the
    neurons themselves, and ``n_directions`` random positive-orthant directions (``|Gaussian|``, normalised; seeded
    by ``3000 + seed``)."""
    c = config
    start = STARTS["data"](hidden, hidden, c["n_directions"], seed)[2]
    gen = torch.Generator().manual_seed(3_000 + seed)
    orthant = torch.randn(W.shape[0], c["n_directions"], generator=gen, dtype=torch.float64).abs()
    arms = {"data start, step 0": start, "data start, trained": trained[0], "random start, trained": trained[1],
            "the neurons themselves": torch.eye(W.shape[0], dtype=W.dtype),
            "random directions": orthant / orthant.norm(dim=0)}
    return {name: recovered_features(W, D.to(W.dtype), c["cosine"]) for name, D in arms.items()}


def neuron_toy_runs(seeds: Sequence[int] = range(5), config: dict = NEURON_TOY) -> dict:
    """Per seed: features per neuron, represented features (trained and untrained toy), and ``recovery_arms``'
    counts; the dictionaries train ``dictionary_steps`` from the data start and from the random start."""
    seeds = list(seeds)
    c = config
    W, W0 = train_neuron_toys(seeds, sparsity=c["sparsity"], n_features=c["n_features"], n_hidden=c["n_hidden"],
                              importance_decay=c["importance_decay"], steps=c["steps"], lr=c["lr"])
    hidden = torch.stack([neuron_hidden(w, c["sparsity"], c["n_inputs"], seed=s) for s, w in zip(seeds, W)])
    dicts = train_dictionaries(torch.cat([hidden, hidden]), torch.cat([hidden, hidden]), c["n_directions"], c["k"],
                               seeds * 2, steps=c["dictionary_steps"], lr=c["lr"], dtype=torch.float64,
                               progress=False, start=["data"] * len(seeds) + ["random"] * len(seeds))
    arms = [recovery_arms(w, h, (dicts[i].W_dec.detach(), dicts[len(seeds) + i].W_dec.detach()), s, c)
            for i, (s, w, h) in enumerate(zip(seeds, W, hidden))]
    return {"seeds": seeds,
            "features_per_neuron": features_per_neuron(W, c["weight_threshold"]).tolist(),
            "represented": {"trained": [int(represented(w).sum()) for w in W],
                            "untrained": [int(represented(w).sum()) for w in W0]},
            "recovered": {name: [a[name] for a in arms] for name in arms[0]}}


def load_neuron_toy(path: Path = NEURON_TOY_PATH) -> dict:
    """The shipped runs (``python -m helpers.neuron_toy``)."""
    return json.loads(Path(path).read_text())


def load_neuron_toy_sparsity(path: Path = NEURON_TOY_SPARSITY_PATH) -> dict:
    """The shipped contrast (``python -m helpers.neuron_toy --contrast``): ``{"runs": {"S": {"k": .., runs..}},
    "k_sweep": {"sparsity": S, "recovered, random start": {"k": per seed}}}``."""
    return json.loads(Path(path).read_text())


def _span(values: Sequence[int]) -> str:
    return f"{sum(values) / len(values):.1f} ({min(values)}-{max(values)})"


def sparsity_table(runs: dict) -> str:
    """One column per sparsity (``runs``: ``{S: neuron_toy_runs output with its "k"}``), ranges over the seeds:
    single-feature neurons, represented features, and the recovered counts of three arms."""
    cols = sorted(runs, key=float)
    head = "".join(f"S = {float(s):g} (k = {runs[s]['k']})".rjust(18) for s in cols)
    rows = [("neurons with a single feature", lambda r: [sum(n == 1 for n in f) for f in r["features_per_neuron"]]),
            ("represented features, of 10", lambda r: r["represented"]["trained"]),
            ("recovered: random start", lambda r: r["recovered"]["random start, trained"]),
            ("recovered: the neurons", lambda r: r["recovered"]["the neurons themselves"]),
            ("recovered: random directions", lambda r: r["recovered"]["random directions"])]
    seeds = runs[cols[0]]["seeds"]
    lines = [f"seeds {seeds[0]}-{seeds[-1]}: mean (range)".ljust(32) + head]
    lines += [f"  {name:30s}" + "".join(_span(get(runs[s])).rjust(18) for s in cols) for name, get in rows]
    return "\n".join(lines)


def k_sweep_line(contrast: dict, neurons: Sequence[int], random: Sequence[int] | None = None) -> str:
    """One line: at the sweep's sparsity, the random-start dictionary's mean recovered count at each smaller k,
    beside ``neurons`` (the neurons' own recovered counts there, per seed) and, if given, ``random`` (the random
    directions' counts there, per seed: they do not depend on k)."""
    sweep = contrast["k_sweep"]
    mean = lambda v: sum(v) / len(v)
    runs = sweep["recovered, random start"].values()
    line = (f"S = {sweep['sparsity']:g}, random start with k = " + ", ".join(sweep["recovered, random start"])
            + ": mean recovered " + ", ".join(f"{mean(v):.1f}" for v in runs)
            + f" (the neurons: {mean(neurons):.1f}; the dictionary lower in "
            + ", ".join(f"{sum(a < b for a, b in zip(v, neurons))}" for v in runs) + f" of {len(neurons)} seeds)")
    if random is not None:
        line += (f"; random directions {mean(random):.1f}, the dictionary higher in "
                 + ", ".join(f"{sum(a > b for a, b in zip(v, random))}" for v in runs)
                 + f" of {len(random)} seeds (descriptive, no verdict)")
    return line


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--contrast", action="store_true", help="the less sparse settings of SPARSITY_CONTRAST")
    args = parser.parse_args(argv)
    if args.contrast:
        out = {"runs": {str(s): {"k": k, **neuron_toy_runs(range(15), {**NEURON_TOY, "sparsity": s, "k": k})}
                        for s, k in SPARSITY_CONTRAST}}
        s = SPARSITY_CONTRAST[0][0]                 # the densest setting: does a smaller k change who wins?
        out["k_sweep"] = {"sparsity": s, "recovered, random start": {
            str(k): neuron_toy_runs(range(15), {**NEURON_TOY, "sparsity": s, "k": k})["recovered"]["random start, trained"]
            for k in K_SWEEP}}
        path = args.out or NEURON_TOY_SPARSITY_PATH
        path.write_text(json.dumps(out, indent=1) + "\n")
        return path
    args.out = args.out or NEURON_TOY_PATH
    out = {"config": NEURON_TOY, **neuron_toy_runs(range(15))}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return args.out


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(main())
