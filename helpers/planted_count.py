"""Can section 6.1's count see superposition? Its recipe on data where superposition is planted (notebook 09).

Section 6.1 counts the features a TopK autoencoder (256 features, k = 8, random start, the study's batches) uses on
the fact model's 192 neuron activations, 1,345 training rows. A count below 192 says "no more features than
neurons" only if the recipe would use more than 192 where there are more. This control plants them: rows of
192 numbers built from random unit directions (``helpers.superposition.planted_features``: each on with
probability 4 / n, a size uniform on [0, 1]), split like the real data (1,345 rows to fit, 336 held out):

* ``uniform``: 256 directions in 192 dimensions, all alike;
* ``strong and weak``: 288 directions, the first 48 five times larger, the real activations' shape (a few
  directions carry most of the variance).

The controls without superposition (``CONTROLS``, ``runs_centred_controls``: centred only): 96 and 192 uniform
directions in 192 dimensions, no more directions than dimensions. If they use about as many features as the 256,
the count cannot tell superposition from its absence.

For each set, 5 data seeds, trained as in section 6.1 (1,000 steps at 0.03) and 10× longer (10,000 at 0.01):
features used (active on some row), planted directions recovered (a value at cosine > 0.95), held-out FVU; on
the rows as they are (``runs``) and minus their training mean (``runs_centred``: the standard recipe's
pre-encoder bias, fixed at the data mean).

Made by ``python -m helpers.planted_count`` (about fifteen minutes on one CPU thread), which writes
``helpers/data/planted_count.json``; ``--controls-only`` recomputes the controls alone into the existing file
(about five minutes).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.dictionary import fvu, train_dictionaries
from helpers.dictionary_study import RECIPE
from helpers.superposition import best_cosines

__all__ = ["PLANTED_COUNT_PATH", "SETS", "CONTROLS", "BUDGETS", "planted_rows", "run", "load", "summary_lines", "count_table", "count_line", "main"]

PLANTED_COUNT_PATH = Path(__file__).resolve().parent / "data" / "planted_count.json"
#: name -> (directions, of them strong, strong scale)
SETS: dict[str, tuple[int, int, float]] = {"uniform": (256, 0, 1.0), "strong and weak": (288, 48, 5.0)}
#: the controls without superposition: no more directions than dimensions
CONTROLS: dict[str, tuple[int, int, float]] = {"uniform 96": (96, 0, 1.0), "uniform 192": (192, 0, 1.0)}
#: (steps, rate): section 6.1's recipe and its 10× longer run
BUDGETS: tuple[tuple[int, float], ...] = ((1000, 0.03), (10000, 0.01))
D, N_ROWS, N_FIT = 192, 1681, 1345


def planted_rows(n_true: int, n_strong: int, scale: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(X, T)``: ``X (1681, 192)`` float64 rows, ``T (192, n_true)`` the planted unit directions; each direction
    on with probability 4 / n_true, a size uniform on [0, 1], the first ``n_strong`` sizes times ``scale``."""
    gen = torch.Generator().manual_seed(200 + seed)
    T = torch.nn.functional.normalize(torch.randn(D, n_true, generator=gen, dtype=torch.float64), dim=0)
    on = torch.rand(N_ROWS, n_true, generator=gen, dtype=torch.float64) < 4.0 / n_true
    sizes = torch.rand(N_ROWS, n_true, generator=gen, dtype=torch.float64)
    sizes[:, :n_strong] *= scale
    return (on * sizes) @ T.T, T


def run(seeds: Sequence[int] = range(5), budgets: Sequence[tuple[int, float]] = BUDGETS, center: bool = False,
        sets: dict[str, tuple[int, int, float]] | None = None) -> dict:
    """``{set: {steps: [{"used", "recovered", "strong", "held_out"} per seed]}}``; ``strong``: of the strong
    directions recovered (``None`` where there are none). ``sets``: ``SETS`` unless given."""
    out: dict = {}
    for name, (n_true, n_strong, scale) in (SETS if sets is None else sets).items():
        rows = [planted_rows(n_true, n_strong, scale, s) for s in seeds]
        if center:                                                 # the pre-encoder bias, fixed at the data mean
            rows = [(X - X[:N_FIT].mean(0), T) for X, T in rows]
        fit = torch.stack([X[:N_FIT] for X, _ in rows])
        out[name] = {}
        for steps, lr in budgets:
            trained = train_dictionaries(fit, fit, RECIPE["n_features"], RECIPE["k"], list(seeds), steps=steps,
                                         lr=lr, batch_size=RECIPE["batch_size"], start="random",
                                         dtype=torch.float64, desc=f"{name}, {steps} steps")
            entries = []
            with torch.no_grad():
                for (X, T), d in zip(rows, trained):
                    found = best_cosines(T, d.W_dec) > 0.95                      # (n_true,)
                    entries.append({"used": int((d.encode(X) > 0).any(0).sum()), "recovered": int(found.sum()),
                                    "strong": int(found[:n_strong].sum()) if n_strong else None,
                                    "held_out": round(fvu(X[N_FIT:], d(X[N_FIT:])), 6)})
            out[name][str(steps)] = entries
    return out


def load(path: str | Path = PLANTED_COUNT_PATH) -> dict:
    """The shipped file."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def summary_lines(record: dict, centred: bool = False) -> list[str]:
    """One line per planted set and budget: features used, directions recovered (min–max over the data seeds; of
    the strong and of the weak ones apart where there are both), held-out FVU. ``centred``: the runs on rows minus
    their training mean (``runs_centred``), after the controls without superposition where the file has them."""
    def span(values: list, fmt: str = "") -> str:
        low, high = format(min(values), fmt), format(max(values), fmt)
        return low if low == high else f"{low}–{high}"

    lines = []
    sets = [("runs_centred" if centred else "runs", name, spec) for name, spec in SETS.items()]
    if centred and "runs_centred_controls" in record:                       # the controls come first
        sets = [("runs_centred_controls", name, spec) for name, spec in CONTROLS.items()] + sets
    for key, name, (n_true, n_strong, _) in sets:
        for steps, lr in BUDGETS:
            runs = record[key][name][str(steps)]
            fit = [r["held_out"] for r in runs]
            strong = (f" ({span([r['strong'] for r in runs])} of the {n_strong} strong, "
                      f"{span([r['recovered'] - r['strong'] for r in runs])} of the {n_true - n_strong} weak)"
                      if n_strong else "")
            label = f"{n_true} planted in {D} dims, {name.split()[0] if key.endswith('controls') else name}"
            lines.append(f"  {label}{', centred' if centred else ''}, {steps:,} steps at {lr:g}: used "
                         f"{span([r['used'] for r in runs])}, recovered {span([r['recovered'] for r in runs])}{strong}, "
                         f"held-out FVU {span(fit, '.0%')}")
    return lines


def count_table(record: dict, neurons: Sequence[dict]) -> str:
    """Section 6.1's count beside its planted controls, on centred rows, at both budgets: features used (of 256,
    min–max) by the dictionary on the real neurons (``neurons``: one ``helpers.neuron_dictionary`` file per
    budget, in ``BUDGETS``' order; every model and seed in it) and on each planted set (every data seed): first
    the sets without superposition (``CONTROLS``, where the file has them), then ``SETS``."""
    def span(values: list[int]) -> str:
        return f"{min(values)}–{max(values)}"

    head = "".join(f"{f'{steps:,} steps at {lr:g}':>22s}" for steps, lr in BUDGETS)
    title = f"features used of {RECIPE['n_features']}, input centred"
    lines = [f"{title:46s}{head}"]
    cells = []
    for runs in neurons:
        used = [e["used"] for v in runs["models"].values() for e in v]
        seeds = len(next(iter(runs["models"].values())))
        cells.append(f"{span(used)} ({len(runs['models'])}×{seeds})")
    lines.append(f"  {'the 192 real neurons (models × seeds)':44s}" + "".join(f"{c:>22s}" for c in cells))
    sets = [("runs_centred", name, spec) for name, spec in SETS.items()]
    if "runs_centred_controls" in record:                  # no more planted directions than dimensions, first
        sets = [("runs_centred_controls", name, spec) for name, spec in CONTROLS.items()] + sets
    for key, name, (n_true, _, _) in sets:
        label = f"{n_true} planted, {name.split()[0] if key.endswith('controls') else name}"
        label += f" ({len(record['seeds'])} data seeds)"
        lines.append(f"  {label:44s}" + "".join(
            f"{span([r['used'] for r in record[key][name][str(steps)]]):>22s}" for steps, _ in BUDGETS))
    return "\n".join(lines)


def count_line(record: dict, neurons: dict) -> str:
    """``count_table``'s longest budget in one line: features used by the dictionary on the real neurons
    (``neurons``: that budget's ``helpers.neuron_dictionary`` file) beside each planted set (min–max)."""
    steps, lr = BUDGETS[-1]
    def span(values: list[int]) -> str:
        return f"{min(values)}–{max(values)}"
    real = span([e["used"] for v in neurons["models"].values() for e in v])
    sets = [("runs_centred_controls", n, spec) for n, spec in CONTROLS.items() if "runs_centred_controls" in record]
    sets += [("runs_centred", n, spec) for n, spec in SETS.items()]
    planted = ", ".join(f"{n_true}{'' if name.startswith('uniform') else ' ' + name}: "
                        f"{span([r['used'] for r in record[key][name][str(steps)]])}"
                        for key, name, (n_true, _, _) in sets)
    return (f"features used of {RECIPE['n_features']} ({steps:,} steps at {lr:g}, centred): the {D} real neurons "
            f"{real}; planted directions {planted}")


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=PLANTED_COUNT_PATH)
    parser.add_argument("--controls-only", action="store_true", help="recompute only the controls, into --out")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    seeds = range(args.seeds)
    if args.controls_only:
        record = load(args.out)
        assert record["seeds"] == list(seeds)
    else:
        record = {"command": "python -m helpers.planted_count", "seeds": list(seeds),
                  "runs": run(seeds), "runs_centred": run(seeds, center=True)}
    record["runs_centred_controls"] = run(seeds, center=True, sets=CONTROLS)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return args.out


if __name__ == "__main__":
    print(main())
