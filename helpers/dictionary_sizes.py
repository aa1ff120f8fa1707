r"""How a transcoder's size F changes what it finds: notebook 09's F-sweep, shipped as a file.

For the shipped fact models ``MODELS`` (``helpers.fact_model`` seeds 0-4), layer 1, on the distinct prefixes
split once into 80 % for fitting and 20 % held out (``helpers.dictionary_study.RECIPE``), a TopK transcoder
(``x -> y``, k = 8, 1,000 steps, learning rate 0.03, the data start, float64) is trained with ``F`` features for
each ``F`` in ``SIZES`` and 2 seeds. Per model, size and seed the file holds:

* ``held_out``: the fraction of variance unexplained (FVU) on the held-out prefixes;
* ``dead``: how many of the F features are active on none of the held-out prefixes (*dead latents*);
* ``dead_fit``: how many are active on none of the fitting prefixes.

Make the file (about 1.5 minutes of one CPU core), or a small run to see the format::

    python -m helpers.dictionary_sizes
    python -m helpers.dictionary_sizes --models 0 --sizes 16 64 --steps 50 --out /tmp/sizes.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from helpers import validate
from helpers.dictionary import TopKDictionary, fact_prefixes, firing_counts, fvu, train_dictionaries
from helpers.dictionary_study import MODELS, RECIPE, _r, layer_data
from helpers.facts import load_facts, make_dataset
from helpers.plotting import PALETTE
from helpers.progress import progress as progress_bar
from helpers.stats import PairedDifference, paired_difference

__all__ = ["SIZES", "SIZES_PATH", "SIZES_3X_PATH", "size_scores", "size_study", "load_sizes", "size_table",
           "size_family", "size_means", "draw_sizes", "main"]

SIZES_PATH = Path(__file__).resolve().parent / "data" / "dictionary_sizes.json"
#: the same sweep trained 3x longer: ``python -m helpers.dictionary_sizes --steps 3000 --out <this path>``
SIZES_3X_PATH = SIZES_PATH.with_name("dictionary_sizes_3000.json")
#: the dictionary sizes swept: below, at and above the layer's 48 dimensions, up to 4× the recipe's 256
SIZES = (16, 48, 128, 256, 512, 1024)


@torch.no_grad()
def size_scores(dictionary: TopKDictionary, x_fit: torch.Tensor, x_test: torch.Tensor,
                y_test: torch.Tensor) -> dict:
    """One dictionary's scores: ``{"held_out": FVU on (x_test, y_test), "dead": features active on no row of
    x_test, "dead_fit": features active on no row of x_fit}``; ``x_* (N, d_in)``, ``y_test (N, d_out)``."""
    return {"held_out": fvu(y_test, dictionary(x_test)),
            "dead": int((firing_counts(dictionary.encode(x_test)) == 0).sum()),
            "dead_fit": int((firing_counts(dictionary.encode(x_fit)) == 0).sum())}


def size_study(models: Sequence[int] = MODELS, sizes: Sequence[int] = SIZES, seeds: Sequence[int] = (0, 1),
               layer: int = 1, steps: int = RECIPE["steps"], progress: bool = True) -> dict:
    """The sweep (see the module docstring): ``{model: {str(F): {"held_out": [per seed], "dead": [...],
    "dead_fit": [...]}}}``; each model's seeds train side by side, one run per size."""
    sizes = [validate.int_in_range("size", F, RECIPE["k"], 1 << 20) for F in sizes]      # F >= k
    data = make_dataset(load_facts())
    p = fact_prefixes(data)
    out: dict = {}
    for m in progress_bar(list(models), desc="dictionary sizes", disable=not progress):
        x, y, train, test = layer_data(data, p, m, layer)
        out[str(m)] = {}
        for F in sizes:
            ds = train_dictionaries(x[train], y[train], F, RECIPE["k"], list(seeds), steps=steps, lr=3e-2,
                                    batch_size=RECIPE["batch_size"], dtype=torch.float64, progress=False)
            scores = [size_scores(d, x[train], x[test], y[test]) for d in ds]
            out[str(m)][str(F)] = {key: _r([s[key] for s in scores]) for key in scores[0]}
    return out


def load_sizes(path: str | Path | None = None) -> dict:
    """The shipped sweep (``SIZES_PATH``), or the file at ``path``."""
    return json.loads(Path(path or SIZES_PATH).read_text(encoding="utf-8"))


def size_table(sizes: dict) -> str:
    """The sweep as printable lines: per F, the held-out FVU and the features used on the held-out prefixes, mean
    (range) over models (each model: the mean over its seeds), and the mean dead features on the held-out and on
    the fitting prefixes."""
    def spread(values, fmt):
        return f"{fmt(sum(values) / len(values))} ({fmt(min(values))}–{fmt(max(values))})"

    runs = sizes["models"]
    lines = [f"layer 1 transcoders, k = 8, {sizes['steps']:,} steps; mean (range) over {len(runs)} models\n"
             f"     F   held-out FVU            used (held out)    dead: held out / fitting"]
    for F in sizes["sizes"]:
        def per_model(key):
            return [sum(e[str(F)][key]) / len(e[str(F)][key]) for e in runs.values()]
        used = [F - v for v in per_model("dead")]
        lines.append(f"  {F:4d}   {spread(per_model('held_out'), lambda v: f'{v:.2%}'):22s}  "
                     f"{spread(used, lambda v: f'{v:.0f}'):17s}  "
                     f"{sum(per_model('dead')) / len(runs):5.0f} / {sum(per_model('dead_fit')) / len(runs):.0f}")
    return "\n".join(lines)


def size_family(sizes: dict, pairs: Sequence[tuple[int, int]] = ((48, 16), (256, 48), (1024, 256))
                ) -> dict[str, PairedDifference]:
    """For ``helpers.stats.holm``: per pair ``(F, G)``, the held-out FVU at F minus at G in percentage points,
    paired over the models (each model: the mean over its seeds)."""
    def per_model(F):
        return [100 * sum(e[str(F)]["held_out"]) / len(e[str(F)]["held_out"]) for e in sizes["models"].values()]
    return {f"held-out FVU, F = {F} − F = {G}": paired_difference(per_model(F), per_model(G)) for F, G in pairs}


def size_means(sizes: dict) -> dict[str, list[float]]:
    """Per F in ``sizes["sizes"]``, the mean over models (each: the mean over its seeds) of the held-out FVU in %
    (``"held_out"``) and of the features used, active on some held-out prefix (``"used"``)."""
    runs = sizes["models"].values()

    def mean(F, key):
        return sum(sum(e[str(F)][key]) / len(e[str(F)][key]) for e in runs) / len(runs)
    return {"held_out": [100 * mean(F, "held_out") for F in sizes["sizes"]],
            "used": [F - mean(F, "dead") for F in sizes["sizes"]]}


def draw_sizes(sweeps: Sequence[dict], d: int = 48):
    """Two panels against F (log scale), one line per sweep (labelled by its steps): the held-out FVU and the
    features used on the held-out prefixes (log scale, beside the diagonal "all F used"), means over models; a
    dotted line at ``d`` (y's nominal dimension)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for sweep, colour in zip(sweeps, PALETTE):
        means = size_means(sweep)
        for ax, key in zip(axes, ("held_out", "used")):
            ax.plot(sweep["sizes"], means[key], "o-", color=colour, label=f"{sweep['steps']:,} steps")
    for ax, ylabel in zip(axes, ("held-out FVU (%)", "features used (on held-out prefixes)")):
        ax.axvline(d, color="grey", ls=":", label=f"F = {d} (y's nominal dimension)")
        ax.set(xscale="log", xlabel="dictionary size F (features)", ylabel=ylabel, ylim=(0, None))
        ax.set_xticks(sweeps[0]["sizes"], [str(F) for F in sweeps[0]["sizes"]])
        ax.minorticks_off()
    F = sweeps[0]["sizes"]
    axes[1].plot(F, F, color="grey", ls="--", label="all F used")
    axes[1].set(yscale="log", ylim=(10, 2 * max(F)))
    axes[1].set_yticks(F, [str(v) for v in F])
    axes[1].minorticks_off()
    axes[0].legend()
    axes[1].legend()
    fig.suptitle("Layer 1 transcoders (k = 8), mean over 5 models")
    fig.tight_layout()
    return fig


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=list(MODELS))
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--steps", type=int, default=RECIPE["steps"])
    parser.add_argument("--out", type=Path, default=SIZES_PATH)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    study = {"command": " ".join(["python -m helpers.dictionary_sizes", *argv]), "steps": args.steps,
             "sizes": args.sizes, "models": size_study(args.models, args.sizes, steps=args.steps)}
    args.out.write_text(json.dumps(study, indent=1) + "\n", encoding="utf-8")
    return args.out


if __name__ == "__main__":
    print(main())
