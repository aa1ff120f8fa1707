"""Notebook 07's long run: do the MoEs' dense twins store the facts given many more steps?

The race (``helpers.moe_race``) compares arms after 100 and 300 steps. Here the two dense FFNs the MoEs raced
(width 11, the top-1 MoE's FLOPs per fact; width 19, the top-2 MoE's) train for ``STEPS`` steps, ten times the
race's longer budget, with the race's recipe (frozen embeddings, ``d_model`` = 8, AdamW at a constant rate),
scored at each step of ``MARKS``. A sweep (``LRS`` on ``SWEEP_SEEDS``, answer loss after ``STEPS`` steps) shows
which rates suit each arm at this length; ``SEEDS`` then train at each rate of ``SEED_LRS``. The two MoEs they raced
train as long on the same seeds (``MOE_LONG_PATH``): whether the MoE's per-step lead lasts once both are trained
ten times longer. The file is made by::

    python -m helpers.moe_long_run --results        # about five minutes of CPU

and the notebook trains the first seed of width 11 (rate 0.04) for ``MARKS[0]`` steps live and checks it against the
file.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from helpers.fact_lookup import build_lookup, lookup_data, train_lookup
from helpers.moe_race import ARMS
from helpers.progress import progress as progress_bar

LONG_ARMS: tuple[str, ...] = ("dense, width 11", "dense, width 19")
STEPS = 3_000
MARKS: tuple[int, ...] = (100, 300, 1_000, 3_000)
LRS: tuple[float, ...] = (0.01, 0.02, 0.04, 0.08)
SWEEP_SEEDS: tuple[int, ...] = (100,)
#: the rates every arm's seeds train at: the best of the sweep for width 11, the best two for width 19
SEED_LRS: tuple[float, ...] = (0.04, 0.08)
SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
D_MODEL = 8
LONG_RUN_PATH = Path(__file__).parent / "data" / "moe_long_run.json"
#: DeepSeekMoE trained 300 steps at two rates fixed in advance (its 100-step rate and fine-grained's 300-step rate
#: in the race), on the race's seeds 0-19; its tuned 300-step rate blew up in some seeds. The one-rate sweep is a
#: formality of the command::
#:     python -m helpers.moe_long_run --results --arms DeepSeekMoE --lrs 0.02 --sweep-seeds 100 \
#:         --seeds 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 \
#:         --seed-lrs 0.08 0.02 --steps 300 --out helpers/data/moe_deepseek_300.json
DEEPSEEK_300_PATH = Path(__file__).parent / "data" / "moe_deepseek_300.json"
#: DeepSeekMoE at 0.08, fixed in advance, 300 steps, on the race's fresh seeds 300-319 (paired with width 19 in
#: ``helpers.moe_race.RACE_FRESH_SEEDS_PATH``, where DeepSeekMoE's tuned 0.16 diverges on some seeds); no sweep::
#:     python -m helpers.moe_long_run --results --arms DeepSeekMoE --sweep-seeds --seeds $(seq 300 319) \
#:         --seed-lrs 0.08 --steps 300 --out helpers/data/moe_deepseek_300_fresh.json     # about 2 minutes of CPU
DEEPSEEK_300_FRESH_PATH = Path(__file__).parent / "data" / "moe_deepseek_300_fresh.json"
#: The two MoEs the dense twins raced, trained as long on the same seeds (0-4), each at its race rate for 300 steps,
#: fixed in advance (no sweep at 3,000 steps)::
#:     python -m helpers.moe_long_run --results --arms MoE "MoE, top-2" --sweep-seeds --arm-lrs 0.02 0.04 \
#:         --out helpers/data/moe_long_run_moes.json      # about 30 minutes of CPU
MOE_LONG_PATH = Path(__file__).parent / "data" / "moe_long_run_moes.json"
#: Seeds 5-9 of the same runs (the race's next five seeds), the rates of seeds 0-4 fixed in advance, no sweep; with
#: seeds 0-4 they make the ten seeds notebook 07 reads (``load_ten_seeds``)::
#:     python -m helpers.moe_long_run --results --sweep-seeds --seeds 5 6 7 8 9 \
#:         --out helpers/data/moe_long_run_seeds_5_9.json
#:     python -m helpers.moe_long_run --results --arms MoE --sweep-seeds --arm-lrs 0.02 --seeds 5 6 7 8 9 \
#:         --out /tmp/moe1.json      # and "MoE, top-2" at 0.04 to /tmp/moe2.json; then, in Python:
#:     save_long_run(combine(load_long_run("/tmp/moe1.json"), load_long_run("/tmp/moe2.json")),
#:                   "helpers/data/moe_long_run_moes_seeds_5_9.json")   # about 20 minutes of CPU in all
LONG_SEEDS_5_9_PATH = Path(__file__).parent / "data" / "moe_long_run_seeds_5_9.json"
MOE_LONG_SEEDS_5_9_PATH = Path(__file__).parent / "data" / "moe_long_run_moes_seeds_5_9.json"
#: The per-step curves of two of the long run's keys, seeds 0-9 (notebook 07's "steps to the dense model's loss"):
#: the top-1 MoE at 0.02 and width 11 at 0.04, each seed trained again on the CPU kernel its shipped file was made on
#: (so the curves are the same runs as the files' marks), then averaged; about 4 minutes of CPU::
#:     ATEN_CPU_CAPABILITY=avx512 python -m helpers.moe_long_run --results --curves --arms "dense, width 11" \
#:         --arm-lrs 0.04 --seeds 0 1 2 3 4 --out /tmp/c1.json
#:     ATEN_CPU_CAPABILITY=avx2 python -m helpers.moe_long_run --results --curves --arms "dense, width 11" \
#:         --arm-lrs 0.04 --seeds 5 6 7 8 9 --out /tmp/c2.json
#:     ATEN_CPU_CAPABILITY=avx2 python -m helpers.moe_long_run --results --curves --arms MoE --arm-lrs 0.02 \
#:         --seeds 0 1 2 3 4 5 6 7 8 9 --out /tmp/c3.json
#:     python -c "from helpers.moe_long_run import merge_curves; merge_curves(['/tmp/c1.json', '/tmp/c2.json', '/tmp/c3.json'])"
#: and the dense control (``helpers.moe_audit.STEPS_SAVED_CONTROL``: width 64 at its tuned 300-step rate in the
#: race), added with the two curves above kept as they are; about 2 more minutes::
#:     ATEN_CPU_CAPABILITY=avx2 python -m helpers.moe_long_run --results --curves --arms "dense, width 64" \
#:         --arm-lrs 0.08 --seeds 0 1 2 3 4 5 6 7 8 9 --out /tmp/c4.json
#:     python -c "from helpers.moe_long_run import CURVES_PATH as P, merge_curves; merge_curves(['/tmp/c4.json'], keep=P)"
CURVES_PATH = Path(__file__).parent / "data" / "moe_long_run_curves.json"


@dataclass
class LongRun:
    """Per arm: ``sweep[arm]``, the answer loss after ``steps`` steps at each of ``lrs`` (mean over
    ``sweep_seeds``) and ``lr[arm]``, the sweep's best rate. Per arm and rate of the seeds, keyed
    ``"<arm>, lr <rate>"``: ``loss[key]`` and ``right[key]``, ``(len(marks), len(seeds))`` float64, the answer loss
    (nats) and share of facts right after each step of ``marks``."""

    steps: int
    marks: list[int]
    lrs: list[float]
    sweep_seeds: list[int]
    seeds: list[int]
    lr: dict[str, float]
    sweep: dict[str, list[float]]
    loss: dict[str, torch.Tensor]
    right: dict[str, torch.Tensor]
    environment: dict = field(default_factory=dict)

    def lines(self) -> list[str]:
        """Per arm and scored step: the share of facts right, mean over seeds (lowest to highest seed)."""
        head = f"{'share of facts right after':<27}" + "".join(f"{f'{m:,}':>13}" for m in self.marks)
        rows = [head]
        for key, right in self.right.items():
            rows.append(f"{key:<27}" + "".join(
                f"{float(r.mean()):>6.0%} ({float(r.min()) * 100:.0f}–{float(r.max()) * 100:.0f})"
                .rjust(13) for r in right))
        return rows


    def sweep_lines(self) -> list[str]:
        """The rate sweep: each arm's answer loss after ``steps`` steps at each rate, the best one starred."""
        seeds = ", ".join(map(str, self.sweep_seeds))
        rows = [f"{f'rates tried (seed {seeds}, loss after {self.steps:,} steps)':<45}"
                + "".join(f"{lr:>8g}" for lr in self.lrs)]
        for arm, losses in self.sweep.items():
            if not losses:   # an arm trained at rates fixed in advance
                continue
            rows.append(f"{arm:<45}" + "".join(f"{v:>7.3f}{'*' if lr == self.lr[arm] else ' '}"
                                               for lr, v in zip(self.lrs, losses)))
        return rows

def _train(arm: str, seed: int, lr: float, steps: int, marks: Sequence[int], data) -> list[tuple[float, float]]:
    model = build_lookup(data, ARMS[arm], D_MODEL, seed)
    _, _, evals = train_lookup(model, data, steps=steps, lr=lr, eval_at=[m for m in marks if m <= steps])
    return [evals[m] for m in marks if m <= steps]


def run_long(arms: Sequence[str] = LONG_ARMS, seeds: Sequence[int] = SEEDS, *, steps: int = STEPS,
             marks: Sequence[int] = MARKS, lrs: Sequence[float] = LRS, sweep_seeds: Sequence[int] = SWEEP_SEEDS,
             seed_lrs: Sequence[float] = SEED_LRS, progress: bool = True, reuse: LongRun | None = None,
             arm_lrs: dict[str, Sequence[float]] | None = None) -> LongRun:
    """Sweep each arm's rate on ``sweep_seeds`` (answer loss after ``steps``; no ``sweep_seeds``: no sweep, the
    arm's first seed rate counts as chosen), then train ``seeds`` at each rate of ``seed_lrs`` (``arm_lrs[arm]``
    instead, where given). ``reuse``: a run of the same steps, marks and seeds; the sweep losses and seed runs it has are
    kept, not trained again, which gives the same file as a full run on the same machine (runs are
    deterministic)."""
    marks = sorted({int(m) for m in marks if m <= steps} | {steps})
    if reuse is not None and (reuse.steps, reuse.marks, reuse.seeds, reuse.sweep_seeds) != (
            steps, marks, [int(s) for s in seeds], [int(s) for s in sweep_seeds]):
        raise ValueError("reuse must have the same steps, marks, seeds and sweep seeds as this run")
    data, chosen, swept, loss, right = lookup_data(), {}, {}, {}, {}
    for arm in progress_bar(list(arms), desc="long run", disable=not progress):
        known = {} if reuse is None or arm not in reuse.sweep else dict(zip(reuse.lrs, reuse.sweep[arm]))
        rates = list((arm_lrs or {}).get(arm, seed_lrs))
        if not sweep_seeds:  # no sweep: the rates are fixed in advance, the first counts as chosen
            swept[arm], chosen[arm] = [], float(rates[0])
        else:
            swept[arm] = [known[lr] if lr in known else
                          sum(_train(arm, s, lr, steps, [steps], data)[0][0] for s in sweep_seeds) / len(sweep_seeds)
                          for lr in lrs]
            chosen[arm] = float(lrs[min(range(len(lrs)), key=swept[arm].__getitem__)])
        for lr in rates:
            key = f"{arm}, lr {lr:g}"
            if reuse is not None and key in reuse.loss:
                loss[key], right[key] = reuse.loss[key], reuse.right[key]
                continue
            evals = [_train(arm, s, lr, steps, marks, data) for s in seeds]
            loss[key] = torch.tensor([[e[i][0] for e in evals] for i in range(len(marks))], dtype=torch.float64)
            right[key] = torch.tensor([[e[i][1] for e in evals] for i in range(len(marks))], dtype=torch.float64)
    return LongRun(steps, marks, [float(x) for x in lrs], [int(s) for s in sweep_seeds], [int(s) for s in seeds],
                   chosen, swept, loss, right)


def combine(*runs: LongRun) -> LongRun:
    """One ``LongRun`` holding the arms of ``runs`` (the same steps, marks and seeds), e.g. the dense twins and the
    MoEs they raced."""
    first = runs[0]
    if any((r.steps, r.marks, r.seeds) != (first.steps, first.marks, first.seeds) for r in runs):
        raise ValueError("combine needs runs of the same steps, marks and seeds")
    merged = LongRun(first.steps, first.marks, first.lrs, first.sweep_seeds, first.seeds, {}, {}, {}, {},
                     first.environment)
    for r in runs:
        merged.lr.update(r.lr)
        merged.sweep.update({a: v if r.lrs == first.lrs else [] for a, v in r.sweep.items()})
        merged.loss.update(r.loss)
        merged.right.update(r.right)
    return merged


def concat_seeds(*runs: LongRun) -> LongRun:
    """One ``LongRun`` holding the seeds of ``runs`` in order (the same steps, marks and arm-rate keys); the sweep and
    chosen rates are the first run's."""
    first = runs[0]
    if any((r.steps, r.marks, list(r.loss)) != (first.steps, first.marks, list(first.loss)) for r in runs):
        raise ValueError("concat_seeds needs runs of the same steps, marks and arms")
    seeds = [s for r in runs for s in r.seeds]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"concat_seeds needs different seeds, got {seeds}")
    return LongRun(first.steps, first.marks, first.lrs, first.sweep_seeds, seeds, dict(first.lr), dict(first.sweep),
                   {k: torch.cat([r.loss[k] for r in runs], 1) for k in first.loss},
                   {k: torch.cat([r.right[k] for r in runs], 1) for k in first.right}, first.environment)


def load_ten_seeds() -> LongRun:
    """Notebook 07's 3,000-step family: the dense twins and the two MoEs, seeds 0-9 (four shipped files)."""
    return combine(concat_seeds(load_long_run(LONG_RUN_PATH), load_long_run(LONG_SEEDS_5_9_PATH)),
                   concat_seeds(load_long_run(MOE_LONG_PATH), load_long_run(MOE_LONG_SEEDS_5_9_PATH)))


def save_long_run(run: LongRun, path: str | Path = LONG_RUN_PATH) -> Path:
    """Write ``run`` as JSON (losses and shares rounded to 1e-5), with the machine it ran on."""
    record = {"made_by": "python -m helpers.moe_long_run --results",
              "environment": {"torch": torch.__version__, "python": platform.python_version(),
                              "cpu_capability": torch.backends.cpu.get_cpu_capability()},
              "steps": run.steps, "marks": run.marks, "lrs": run.lrs, "sweep_seeds": run.sweep_seeds,
              "seeds": run.seeds, "lr": run.lr, "sweep": {a: [round(v, 5) for v in s] for a, s in run.sweep.items()},
              "loss": {a: t.round(decimals=5).tolist() for a, t in run.loss.items()},
              "right": {a: t.round(decimals=5).tolist() for a, t in run.right.items()}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def load_long_run(path: str | Path = LONG_RUN_PATH) -> LongRun:
    """Read a long run written by ``save_long_run`` (default: notebook 07's, ``LONG_RUN_PATH``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no long run at {path}; make it with python -m helpers.moe_long_run --results")
    r = json.loads(path.read_text(encoding="utf-8"))
    as_t = {a: torch.tensor(v, dtype=torch.float64) for a, v in r["loss"].items()}
    return LongRun(r["steps"], r["marks"], r["lrs"], r["sweep_seeds"], r["seeds"], r["lr"], r["sweep"], as_t,
                   {a: torch.tensor(v, dtype=torch.float64) for a, v in r["right"].items()}, r["environment"])


def run_curves(arm: str, lr: float, seeds: Sequence[int], steps: int = STEPS, progress: bool = True) -> dict:
    """``arm`` trained ``steps`` steps at ``lr`` on each of ``seeds``: the answer loss of every step (before that
    step's update, as ``train_lookup`` returns it) per seed, and the loss after each step of ``MARKS`` (to check
    against the long run's files)."""
    data, curves, marks = lookup_data(), [], [m for m in MARKS if m <= steps]
    for s in progress_bar(list(seeds), desc=f"{arm}, lr {lr:g}", disable=not progress):
        model = build_lookup(data, ARMS[arm], D_MODEL, s)
        curve, _, evals = train_lookup(model, data, steps=steps, lr=lr, eval_at=marks)
        curves.append({"seed": int(s), "curve": [round(float(v), 5) for v in curve],
                       "marks": {str(m): round(evals[m][0], 5) for m in marks}})
    return {"key": f"{arm}, lr {lr:g}", "kernel": torch.backends.cpu.get_cpu_capability(), "runs": curves}


def merge_curves(paths: Sequence[str | Path], out: str | Path = CURVES_PATH, keep: str | Path | None = None) -> Path:
    """Average the per-seed curves of the files ``run_curves`` wrote (``--curves``), key by key, into ``out``: per
    key the mean curve (rounded to 1e-5), its seeds, the kernel of each seed and the per-seed losses at the marks.
    With ``keep``, that merged file's keys come first, unchanged, and ``paths`` add keys it does not have."""
    kept = {} if keep is None else json.loads(Path(keep).read_text(encoding="utf-8"))["curves"]
    merged: dict[str, dict] = {}
    for p in paths:
        r = json.loads(Path(p).read_text(encoding="utf-8"))
        entry = merged.setdefault(r["key"], {"seeds": [], "kernels": [], "marks": [], "curves": []})
        for run in r["runs"]:
            entry["seeds"].append(run["seed"]), entry["kernels"].append(r["kernel"])
            entry["marks"].append(run["marks"]), entry["curves"].append(run["curve"])
    if set(kept) & set(merged):
        raise ValueError(f"{keep} already has {sorted(set(kept) & set(merged))}")
    record = {"made_by": "python -m helpers.moe_long_run --results --curves (see CURVES_PATH)", "curves": dict(kept)}
    for key, e in merged.items():
        mean = torch.tensor(e.pop("curves"), dtype=torch.float64).mean(0)
        record["curves"][key] = {**e, "mean": [round(float(v), 5) for v in mean]}
    out = Path(out)
    out.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return out


def load_curves(path: str | Path = CURVES_PATH) -> dict[str, tuple[torch.Tensor, list[int]]]:
    """The shipped mean curves: per ``"<arm>, lr <rate>"``, the mean answer loss of every step and its seeds."""
    r = json.loads(Path(path).read_text(encoding="utf-8"))
    return {k: (torch.tensor(v["mean"], dtype=torch.float64), v["seeds"]) for k, v in r["curves"].items()}


def speed_or_room_figure(run: LongRun, moes: dict[str, tuple[str, torch.Tensor, str]] | None, colors: Sequence[str],
                         styles: Sequence[str], title: str | None = None, loss_panel: bool = False):
    """Speed or room, as a picture: the share of facts right against training steps (log scale) for each
    ``"<arm>, lr <rate>"`` of ``run`` (mean over its seeds, band from the lowest to the highest seed), and per
    dense arm the MoE it raced after 300 steps: ``moes[arm] = (label, right, color)``, ``right`` ``(seeds,)`` the MoE's
    share right on the same seeds, drawn as a star at 300 steps (bar: lowest to highest seed) and a dotted line
    across (``None``: no stars). ``colors``, ``styles``: one per key of ``run.right``; ``title``: instead of the
    default (the seeds are named in either). ``loss_panel``: a second panel (``fig.axes[1]``) with the answer loss
    on a log scale, the line the arithmetic mean over the seeds (the mean the paired verdicts test), the band the
    lowest to the highest seed (the notebook's text says so: no prose in the titles)."""
    import matplotlib.pyplot as plt

    if loss_panel:
        fig, (ax, ax_loss) = plt.subplots(1, 2, figsize=(12, 4.4))
    else:
        fig, ax = plt.subplots(figsize=(8.5, 4.6))
    marks = torch.tensor(run.marks).numpy()
    for (key, right), color, style in zip(run.right.items(), colors, styles):
        ax.plot(marks, 100 * right.mean(1).numpy(), color=color, ls=style, marker="o", ms=4,
                label=key.replace("MoE, top-2", "top-2 MoE") if key.startswith("MoE, top-2") else
                key.replace("MoE", "top-1 MoE", 1) if key.startswith("MoE, lr") else key)
        ax.fill_between(marks, 100 * right.min(1).values.numpy(), 100 * right.max(1).values.numpy(), color=color,
                        alpha=0.12)
    for i, (arm, (label, right, color)) in enumerate((moes or {}).items()):
        mean = 100 * float(right.mean())
        ax.axhline(mean, color=color, ls=":", lw=1.2)
        ax.errorbar([300 * 1.08 ** (i - (len(moes) - 1) / 2)], [mean], yerr=[[mean - 100 * float(right.min())], [100 * float(right.max()) - mean]],
                    fmt="*", ms=11, color=color, capsize=3, label=f"{label} after 300 steps (vs {arm})")
    ax.set_xscale("log")
    ax.set_xticks(marks, [f"{m:,}" for m in run.marks])
    ax.set(xlabel="training step (log scale)", ylabel="facts answered right (%)",
           title=(title or "Dense FFNs trained longer against the MoEs at 300 steps")
           + f" (seeds {run.seeds[0]}–{run.seeds[-1]})")
    if not loss_panel:
        ax.legend(frameon=False, fontsize=8, loc="lower right")
    if loss_panel:
        for (key, loss), color, style in zip(run.loss.items(), colors, styles):
            ax_loss.plot(marks, loss.mean(1).numpy(), color=color, ls=style, marker="o", ms=4, label=key)
            ax_loss.fill_between(marks, loss.min(1).values.numpy(), loss.max(1).values.numpy(), color=color, alpha=0.12)
        ax_loss.set(xscale="log", yscale="log", xlabel="training step (log scale)",
                    ylabel="answer loss (nats, log scale)", title="the same runs' answer loss")
        ax_loss.set_xticks(marks, [f"{m:,}" for m in run.marks])
        fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=3, frameon=False, fontsize=9)
        fig.tight_layout(rect=(0, 0.13, 1, 1))                  # the legend below both panels, clear of the bands
        return fig
    fig.tight_layout()
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.moe_long_run --results``: notebook 07's long run of the MoEs' dense twins."""
    parser = argparse.ArgumentParser(prog="python -m helpers.moe_long_run", description=main.__doc__)
    parser.add_argument("--results", action="store_true", required=True, help="run the sweep and the seeds")
    parser.add_argument("--arms", nargs="+", default=list(LONG_ARMS), choices=list(ARMS), metavar="ARM")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--sweep-seeds", type=int, nargs="*", default=list(SWEEP_SEEDS),
                        help="none: no sweep (the rates of --seed-lrs are fixed in advance)")
    parser.add_argument("--lrs", type=float, nargs="+", default=list(LRS))
    parser.add_argument("--seed-lrs", type=float, nargs="+", default=list(SEED_LRS))
    parser.add_argument("--arm-lrs", type=float, nargs="+", metavar="LR",
                        help="one rate per arm of --arms, in order: each arm's only seed rate (instead of --seed-lrs)")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--out", default=str(LONG_RUN_PATH))
    parser.add_argument("--reuse", metavar="PATH", help="keep this file's sweep losses and seeds (see run_long)")
    parser.add_argument("--curves", action="store_true",
                        help="no sweep: each arm's per-step curves at its --arm-lrs rate (see CURVES_PATH)")
    args = parser.parse_args(argv)
    if args.curves:
        if len(args.arms) != 1:
            raise ValueError(f"--curves trains one arm per file, got {len(args.arms)}")
        arm, lr = args.arms[0], (args.arm_lrs or args.seed_lrs)[0]
        Path(args.out).write_text(json.dumps(run_curves(arm, lr, args.seeds, args.steps)) + "\n", encoding="utf-8")
        print(f"wrote {arm} at lr {lr:g} × {len(args.seeds)} seeds × {args.steps} steps to {args.out}")
        return 0
    if args.steps < 1:
        raise ValueError(f"--steps must be at least 1, got {args.steps}")
    if args.arm_lrs is not None and len(args.arm_lrs) != len(args.arms):
        raise ValueError(f"--arm-lrs needs one rate per arm: {len(args.arms)} arms, {len(args.arm_lrs)} rates")
    run = run_long(args.arms, args.seeds, steps=args.steps, lrs=args.lrs, sweep_seeds=args.sweep_seeds,
                   seed_lrs=args.seed_lrs, arm_lrs=None if args.arm_lrs is None else
                   {arm: [lr] for arm, lr in zip(args.arms, args.arm_lrs)},
                   reuse=None if args.reuse is None else load_long_run(args.reuse))
    print(f"wrote {len(args.arms)} arms × {len(args.seeds)} seeds × {args.steps} steps to "
          f"{save_long_run(run, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
