r"""Notebook 09, section 6.1's control for "the neurons are polysemantic": does a feature lie along a neuron axis?

The recipe of ``helpers.neuron_dictionary`` (random start, centred input) trains on two kinds of layer-1 activations:
the real neurons, and data built sparse in the neuron basis (``top_neurons``: per prefix the 8 neurons farthest
from their mean, the rest at it), whose features *are* neuron axes. For every feature used on the named prefixes
the reading is its best |cosine| with a neuron axis; the median of that separates the two kinds of data, where a
count of features below cosine 0.95 does not (both kinds give mostly "off-axis" features).

``python -m helpers.axis_control`` writes ``helpers/data/neuron_axis_control.json`` (models 0-4, dictionary
seeds 0 and 1; about 2 CPU-minutes).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import torch

AXIS_CONTROL_PATH = Path(__file__).resolve().parent / "data" / "neuron_axis_control.json"


def best_axis_cosines(dictionary, a: torch.Tensor) -> torch.Tensor:
    """Per feature active on some row of ``a (M, d_ff)``: its unit value's best |cosine| with a neuron axis."""
    with torch.no_grad():
        used = (dictionary.encode(a) > 0).any(0)                                   # (F,)
        values = dictionary.W_dec / dictionary.W_dec.norm(dim=0, keepdim=True)     # (d_ff, F)
        return values.abs().max(0).values[used]


def axis_control_runs(models: Sequence[int] = (0, 1, 2, 3, 4), seeds: Sequence[int] = (0, 1)) -> dict:
    from helpers.dictionary import fact_prefixes, held_out_split
    from helpers.fact_model import load_fact_model
    from helpers.facts import load_facts, make_dataset
    from helpers.neuron_dictionary import neuron_activations, top_neurons, train_neuron_dictionaries

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


def load_axis_control(path: Path = AXIS_CONTROL_PATH) -> dict:
    """The shipped runs (``python -m helpers.axis_control``)."""
    return json.loads(Path(path).read_text())


def axis_control_line(runs: dict) -> str:
    """One line: the median best axis cosine of the used features, real neurons against the axis-sparse control."""
    def span(name):
        v = [r["median best cosine"] for r in runs[name]]
        return f"{min(v):.2f}–{max(v):.2f}"
    return (f"median best cosine of a used feature with a neuron axis (input centred, models "
            f"{runs['models'][0]}-{runs['models'][-1]} × {len(runs['seeds'])} seeds): real neurons "
            f"{span('real neurons')}, data sparse on the neuron axes {span('sparse on the neuron axes')}")


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=AXIS_CONTROL_PATH)
    args = parser.parse_args(argv)
    args.out.write_text(json.dumps(axis_control_runs(), indent=1) + "\n")
    return args.out


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(main())
