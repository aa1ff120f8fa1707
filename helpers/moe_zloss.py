r"""Notebook 05's z-loss study: section 8's MoE (α = 0.1) trained with ST-MoE's router z-loss and without it.

The recipe is ``helpers.moe_runs``'s (``make_model("MoE, α = 0.1", seed, ...)``, ``train_lm`` at lr 1e-2, 32
sentences a step), with every MoE layer's ``z_coef`` either ST-MoE's 1e-3 (the course's default, as in every arm
of ``helpers.moe_runs``) or 0. After ``CHECKPOINTS`` steps each run is scored on all 608 sentences in eval mode
(``router_stats``): the z-loss itself, the mean logsumexp of the router logits, the largest router logit, the
mean logit and the router's mean top probability (its confidence), averaged over the two layers (the largest
logit: the larger of the two), and the cross-entropy.

The shipped file ``ZLOSS_PATH`` is made by::

    python -m helpers.moe_zloss --results --jobs 2   # about 10 minutes of CPU time, split over 2 processes

``--seeds``, ``--steps`` and ``--out`` make a smaller file (the tests make one). The learning rate is constant, so
a run's state after 15 steps is the 15-step run's: the notebook checks the file's step-15 values of the z-loss
arm against its live section-7 runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from helpers.facts import FactDataset, load_facts, make_dataset
from helpers.moe import MoE, moe_aux_loss, router_z_loss
from helpers.moe_runs import BATCH, evaluate, lm_config, make_model, read_results, write_results
from helpers.progress import progress as progress_bar
from helpers.stats import PairedDifference, paired_difference
from helpers.transformer import train_lm

ARM, LR = "MoE, α = 0.1", 1e-2
Z_COEFS: tuple[float, ...] = (1e-3, 0.0)
CHECKPOINTS: tuple[int, ...] = (15, 300)
SEEDS: tuple[int, ...] = tuple(range(10))
KEYS = ("z_loss", "lse", "max_logit", "mean_logit", "top_prob", "ce")
#: Where ``python -m helpers.moe_zloss --results`` writes the runs and ``load_zloss`` reads them.
ZLOSS_PATH = Path(__file__).parent / "data" / "moe_zloss.json"
_DIGITS = 5


def router_stats(records: Sequence) -> dict[str, float]:
    """The router's logits over every position, from the MoE layers' records of an evaluation pass (``evaluate``):
    the z-loss, the mean logsumexp, the mean logit and the mean top probability (each averaged over layers), and
    the largest logit."""
    logits = [r.routing.logits.double() for r in records]
    return {"z_loss": sum(router_z_loss(l).item() for l in logits) / len(logits),
            "lse": sum(torch.logsumexp(l, -1).mean().item() for l in logits) / len(logits),
            "max_logit": max(l.max().item() for l in logits),
            "mean_logit": sum(l.mean().item() for l in logits) / len(logits),
            "top_prob": sum(torch.softmax(l, -1).amax(-1).mean().item() for l in logits) / len(logits)}


def zloss_run(seed: int, z_coef: float, data: FactDataset, *, checkpoints: Sequence[int] = CHECKPOINTS) -> dict:
    """One run of the recipe (module docstring) to ``max(checkpoints)`` steps: {step: ``router_stats`` + ce}."""
    model = make_model(ARM, seed, lm_config(data))
    for m in model.modules():
        if isinstance(m, MoE):
            m.z_coef = z_coef
    out: dict[int, dict] = {}

    def on_step(step: int, m: nn.Module, loss: float) -> None:
        if step + 1 in checkpoints:
            ce, _, _, records = evaluate(m, data)
            out[step + 1] = {**router_stats(records), "ce": ce}
            m.train()

    train_lm(model, data.ids, data.targets, steps=max(checkpoints), lr=LR, batch_size=BATCH, seed=seed,
             progress=False, extra_loss=moe_aux_loss, on_step=on_step)
    return out


def _job(args: tuple[float, int, tuple[int, ...]]) -> dict:
    """One (z_coef, seed) run in a worker process, on one thread (as in the notebooks)."""
    z, seed, checkpoints = args
    torch.set_num_threads(1)
    return zloss_run(seed, z, make_dataset(load_facts()), checkpoints=checkpoints)


def run_study(*, seeds: Sequence[int] = SEEDS, checkpoints: Sequence[int] = CHECKPOINTS,
              progress: bool = True, jobs: int = 1) -> dict:
    """``{z_coef: {step: {seed: stats}}}`` (keys as strings, JSON keys); ``jobs`` > 1 runs that many processes
    (each run is seeded, so the file does not depend on it)."""
    data = make_dataset(load_facts())
    out: dict = {}
    work = [(z, s) for z in Z_COEFS for s in seeds]
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(jobs) as pool:
            results = list(progress_bar(pool.map(_job, [(z, s, tuple(checkpoints)) for z, s in work]),
                                        total=len(work), desc="z-loss runs", disable=not progress))
    else:
        results = [zloss_run(s, z, data, checkpoints=checkpoints)
                   for z, s in progress_bar(work, desc="z-loss runs", disable=not progress)]
    for (z, seed), result in zip(work, results):
        for step, stats in result.items():
            out.setdefault(f"{z:g}", {}).setdefault(str(step), {})[str(seed)] = {
                k: round(v, _DIGITS) for k, v in stats.items()}
    return out


def save_zloss(study: dict, path: str | Path, *, checkpoints: Sequence[int] = CHECKPOINTS) -> Path:
    """Write ``run_study``'s result as JSON with its settings and the machine it ran on."""
    return write_results(path, "python -m helpers.moe_zloss --results",
                         {"arm": ARM, "lr": LR, "batch": BATCH, "checkpoints": list(checkpoints)}, {"runs": study})


def load_zloss(path: str | Path | None = None) -> dict:
    """The file written by ``save_zloss`` (default: the shipped ``ZLOSS_PATH``), as a dict."""
    return read_results(ZLOSS_PATH if path is None else path, "z-loss runs", "python -m helpers.moe_zloss --results")


def zloss_values(study: dict, z_coef: float, step: int, key: str) -> torch.Tensor:
    """``(seeds,)`` float64: ``key`` (one of ``KEYS``) after ``step`` steps at ``z_coef``, seeds in the file's order."""
    table = study["runs"][f"{z_coef:g}"][str(step)]
    return torch.tensor([table[s][key] for s in table], dtype=torch.float64)


def zloss_family(study: dict, step: int | None = None) -> dict[str, PairedDifference]:
    """With − without the z-loss, seed by seed, after ``step`` steps (default: the last checkpoint): the z-loss, the
    mean logsumexp, the largest logit, the mean logit and the cross-entropy."""
    step = max(study["settings"]["checkpoints"]) if step is None else step
    names = {"z_loss": "z-loss", "lse": "mean logsumexp", "max_logit": "largest logit",
             "mean_logit": "mean logit", "top_prob": "mean top probability", "ce": "CE, all targets"}
    return {f"{name}: with − without": paired_difference(zloss_values(study, Z_COEFS[0], step, key),
                                                         zloss_values(study, 0.0, step, key))
            for key, name in names.items()}


def zloss_table(study: dict) -> str:
    """Printable lines: each checkpoint's mean over seeds of the router statistics, with and without the z-loss."""
    steps = study["settings"]["checkpoints"]
    lines = [f"{'':<22}{'z-loss':>9}{'mean lse':>10}{'max logit':>11}{'mean logit':>12}{'top prob':>10}"]
    for step in steps:
        for z in Z_COEFS:
            row = [float(zloss_values(study, z, step, k).mean()) for k in KEYS[:5]]
            label = f"step {step}, z_coef {z:g}"
            lines.append(f"{label:<22}{row[0]:>9.2f}{row[1]:>10.2f}{row[2]:>11.2f}{row[3]:>12.2f}{row[4]:>10.2f}")
    return "\n".join(lines)


def largest_live_difference(live: dict[int, dict[str, float]], study: dict, step: int = 15) -> float:
    """Largest |difference| between live ``router_stats`` of z-loss runs ({seed: stats}, after ``step`` steps)
    and the file's."""
    table = study["runs"][f"{Z_COEFS[0]:g}"][str(step)]
    return max(abs(stats[k] - table[str(seed)][k]) for seed, stats in live.items() for k in stats)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.moe_zloss --results``: train notebook 05's z-loss study and store it."""
    parser = argparse.ArgumentParser(prog="python -m helpers.moe_zloss", description=main.__doc__)
    parser.add_argument("--results", action="store_true", required=True, help="train the study, write the file")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="default: 0 to 9")
    parser.add_argument("--steps", type=int, nargs="+", default=list(CHECKPOINTS),
                        help=f"checkpoints, default: {list(CHECKPOINTS)}")
    parser.add_argument("--out", default=str(ZLOSS_PATH), help=f"default: {ZLOSS_PATH}")
    parser.add_argument("--jobs", type=int, default=1, help="processes to run the runs in (default: 1)")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                        # as in the notebooks (helpers.env.setup)
    try:
        study = run_study(seeds=args.seeds, checkpoints=args.steps, jobs=args.jobs)
    finally:
        torch.set_num_threads(threads)
    print(f"wrote {save_zloss(study, args.out, checkpoints=args.steps)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
