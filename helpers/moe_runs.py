r"""Notebook 05's training runs: a tiny MoE language model beside two dense baselines, over seeds and learning rates.

The model is the course's ``TinyGPT`` (d = 64, 2 blocks, 4 heads) on the fact sentences of ``helpers.facts``,
with one FFN per block chosen by the arm (``ARMS``):

==================  ==================================================================================
arm                 FFN of each block
==================  ==================================================================================
``MoE, α = 0``      ``MoE(64, 8, 1, d_ff=96, balance_coef=0)``: 8 SwiGLU experts of width 96, top-1
``MoE, α = 0.01``   the same with Switch's balancing coefficient
``MoE, α = 0.1``    the same with ten times it (the ST-MoE z-loss, 1e-3, is on in every MoE arm)
``dense, width 96``  SwiGLU of width 96: the MoE's FLOPs per token (plus its router's), 1/8 of its FFN parameters
``dense, width 768``  SwiGLU of width 768: the MoE's FFN parameters (147,456 against 147,968), 8 times its FLOPs
==================  ==================================================================================

A run: ``torch.manual_seed(seed)``, build the model, ``train_lm`` (AdamW, 32 sentences a step drawn with
``seed``, next-token cross-entropy plus the MoE layers' ``aux_loss``), then ``evaluate`` on all 608 sentences
(the training set) in eval mode: the cross-entropy over every target, over the answer tokens alone, and the
share of answers predicted right.

Two studies are shipped in ``RUNS_PATH``, made by::

    python -m helpers.moe_runs --results          # about 10 minutes of one CPU core

* ``short``: every arm for ``SHORT_STEPS`` = 15 steps at each learning rate of ``LRS``, seeds 0-9 (the notebook
  trains seeds 0-4 of the best learning rate live and checks them against the file);
* ``long``: the MoE (α = 0.1) and both dense arms for ``LONG_STEPS`` = 1,000 steps at lr 3e-3, seeds 0-9: every
  arm within 0.02 nats of the data's loss floor (``helpers.facts.loss_floor``), but a snapshot, not converged
  (``long_table`` prints how far each arm still fell over the last quarter).

``--seeds``, ``--lrs``, ``--long-steps`` and ``--out`` make a smaller file (the tests make one); ``--only short``
(or ``long``) retrains one study and keeps the other from the existing file.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from helpers.facts import FactDataset, load_facts, make_dataset
from helpers.ffn import FFN
from helpers.moe import MoE, RoutingLog, arrival_rank, expert_capacity, moe_aux_loss, moe_layers_stats
from helpers.progress import progress as progress_bar
from helpers.stats import Comparison, holm, paired_difference
from helpers.transformer import GPTConfig, TinyGPT, train_lm

ARMS: dict[str, dict] = {
    "MoE, α = 0": {"ffn": "moe", "alpha": 0.0},
    "MoE, α = 0.01": {"ffn": "moe", "alpha": 0.01},
    "MoE, α = 0.1": {"ffn": "moe", "alpha": 0.1},
    "dense, width 96": {"ffn": "dense", "d_ff": 96},
    "dense, width 768": {"ffn": "dense", "d_ff": 768},
}
LONG_ARMS = ("MoE, α = 0.1", "dense, width 96", "dense, width 768")
N_EXPERTS, EXPERT_WIDTH, D_MODEL, BATCH = 8, 96, 64, 32
SHORT_STEPS, LONG_STEPS, LONG_LR = 15, 1000, 3e-3
#: capacity factors at which a short MoE run's layer-1 routing is replayed (``capacity_summary``)
CAPACITY_FACTORS: tuple[float, ...] = (1.0, 1.25, 2.0)
LRS: tuple[float, ...] = (1e-3, 3e-3, 1e-2, 3e-2)
SEEDS: tuple[int, ...] = tuple(range(10))
#: Where ``python -m helpers.moe_runs --results`` writes the runs and ``load_runs`` reads them.
RUNS_PATH = Path(__file__).parent / "data" / "moe_runs.json"
_DIGITS = 5       # stored to 1e-5: far below what another CPU kernel changes


def lm_config(data: FactDataset) -> GPTConfig:
    """The notebook's ``TinyGPT`` size for ``data``: d = 64, 2 blocks, 4 heads."""
    return GPTConfig(vocab_size=len(data.vocab), d_model=D_MODEL, n_layers=2, n_heads=4, max_len=data.ids.shape[1])


def make_model(arm: str, seed: int, config: GPTConfig, capacity_factor: float | None = None) -> TinyGPT:
    """``torch.manual_seed(seed)``, then a ``TinyGPT`` whose FFNs are the arm's (``ARMS``): the MoE arms start
    from the same weights whatever α and ``capacity_factor`` (``None``: dropless; MoE arms only)."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {list(ARMS)}, got {arm!r}")
    spec = ARMS[arm]
    if capacity_factor is not None and spec["ffn"] != "moe":
        raise ValueError(f"capacity_factor applies to the MoE arms only, got {capacity_factor!r} for {arm!r}")
    torch.manual_seed(seed)
    if spec["ffn"] == "moe":
        return TinyGPT(config, ffn_factory=lambda layer: MoE(config.d_model, N_EXPERTS, 1, d_ff=EXPERT_WIDTH,
                                                             balance_coef=spec["alpha"],
                                                             capacity_factor=capacity_factor))
    return TinyGPT(config, ffn_factory=lambda layer: FFN.from_variant("swiglu", config.d_model, spec["d_ff"],
                                                                      bias=False))


@dataclass
class Run:
    """One trained model. ``ce``: cross-entropy over every target of the 608 sentences; ``answer_ce`` over the
    answer tokens alone; ``accuracy``: share of answers predicted right (all in eval mode, no auxiliary loss);
    ``log``: the ``RoutingLog`` of training (MoE arms; ``None`` for dense); ``final``: the MoE layers' records
    of the evaluation pass (every token position); ``model``; ``curve``: {step: ce} at the checkpoints."""
    arm: str
    seed: int
    lr: float
    steps: int
    ce: float
    answer_ce: float
    accuracy: float
    log: RoutingLog | None
    final: list
    model: nn.Module | None = None
    curve: dict[int, float] | None = None

    def summary(self) -> dict:
        """What the file keeps of a run: the three scores, the convergence curve if measured, and, for an MoE,
        the slots per expert over the last 5 steps (layers, E) and, in a short run, the busiest/mean of every
        training step and layer (steps, layers)."""
        out = {"ce": round(self.ce, _DIGITS), "answer_ce": round(self.answer_ce, _DIGITS),
               "accuracy": round(self.accuracy, _DIGITS)}
        if self.curve:
            out["curve"] = {str(k): round(v, _DIGITS) for k, v in self.curve.items()}
        if self.log is not None and self.steps <= SHORT_STEPS:
            out["max_over_mean"] = self.log.max_over_mean().round(decimals=_DIGITS).tolist()
        if self.log is not None:
            out["last_counts"] = self.log.counts[-5:].sum(0).tolist()
        if self.log is not None and self.steps <= SHORT_STEPS:
            out["capacity"] = capacity_summary(self.final[1].routing.probs)
        return out


def dropped_share(expert_index: torch.Tensor, n_experts: int, factor: float) -> float:
    """The share of the ``(N, k)`` routing's slots that a capacity ``factor`` drops (GShard's priority)."""
    n, k = expert_index.shape
    return float((arrival_rank(expert_index, n_experts) >= expert_capacity(n, n_experts, k, factor)).double().mean())


def capacity_summary(probs: torch.Tensor) -> dict:
    """A trained router's probabilities ``(N, E)`` replayed with capacity: the share of slots dropped at each of
    ``CAPACITY_FACTORS`` when routing top-1 (``"top1"``) and top-2 (``"top2"``), and the busiest/mean of the top-2
    routing's first and of its second choices (``"busiest_choice"``)."""
    e = probs.shape[-1]
    top2 = probs.topk(2, dim=-1).indices
    return {"top1": [round(dropped_share(top2[:, :1], e, c), _DIGITS) for c in CAPACITY_FACTORS],
            "top2": [round(dropped_share(top2, e, c), _DIGITS) for c in CAPACITY_FACTORS],
            "busiest_choice": [round(float(torch.bincount(top2[:, j], minlength=e).max() / (top2.shape[0] / e)),
                                     _DIGITS) for j in (0, 1)]}


def capacity_values(runs: dict, arm: str, lr: float, key: str, index: int) -> torch.Tensor:
    """``(seeds,)`` float64 from the short study's ``capacity_summary``: ``key`` "top1" or "top2" with ``index``
    that of the capacity factor in ``CAPACITY_FACTORS``, or "busiest_choice" with ``index`` 0 or 1."""
    return torch.tensor([s["capacity"][key][index] for s in summaries(runs, arm, lr)], dtype=torch.float64)


def evaluate(model: nn.Module, data: FactDataset) -> tuple[float, float, float, list]:
    """``(ce, answer_ce, accuracy, records)`` of ``model`` on all of ``data`` in eval mode (see ``Run``)."""
    with torch.no_grad():
        logits = model.eval()(data.ids)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), data.targets.reshape(-1), ignore_index=-100).item()
    answers = logits[torch.arange(len(data)), data.answer_pos]
    answer_ce = F.cross_entropy(answers, data.answer_id).item()
    accuracy = (answers.argmax(-1) == data.answer_id).double().mean().item()
    return ce, answer_ce, accuracy, moe_layers_stats(model)


def train_run(arm: str, seed: int, data: FactDataset, *, steps: int = SHORT_STEPS, lr: float = 1e-2,
              keep_model: bool = True, checkpoints: Sequence[int] = (), capacity_factor: float | None = None) -> Run:
    """One run of the recipe (module docstring); ``checkpoints``: steps after which the cross-entropy over every
    target is also measured (``Run.curve``, the convergence check); ``capacity_factor``: trained with that capacity
    in every MoE layer (``None``: dropless; evaluation then uses it too, on all sentences as one batch)."""
    model = make_model(arm, seed, lm_config(data), capacity_factor)
    log = RoutingLog() if ARMS[arm]["ffn"] == "moe" else None
    curve: dict[int, float] = {}

    def on_step(step: int, m: nn.Module, loss: float) -> None:
        if log is not None:
            log(step, m, loss)
        if step + 1 in checkpoints:
            curve[step + 1] = evaluate(m, data)[0]
            m.train()

    train_lm(model, data.ids, data.targets, steps=steps, lr=lr, batch_size=BATCH, seed=seed, progress=False,
             extra_loss=moe_aux_loss if log is not None else None, on_step=on_step)
    ce, answer_ce, accuracy, final = evaluate(model, data)
    return Run(arm, seed, lr, steps, ce, answer_ce, accuracy, log, final, model if keep_model else None, curve)


# ----------------------------------------------------------------------------- what the notebook reads
def busiest(log_or_summary: RoutingLog | dict, steps: slice = slice(-5, None)) -> float:
    """Busiest expert's load over the mean load, averaged over the given training steps and both layers."""
    mom = (log_or_summary.max_over_mean() if isinstance(log_or_summary, RoutingLog)
           else torch.tensor(log_or_summary["max_over_mean"], dtype=torch.float64))
    return float(mom[steps].mean())


def starved(log_or_summary: RoutingLog | dict, share: float = 0.02) -> int:
    """How many experts (all layers together) received under ``share`` of the slots over the last 5 steps."""
    counts = (log_or_summary.counts[-5:].sum(0) if isinstance(log_or_summary, RoutingLog)
              else torch.tensor(log_or_summary["last_counts"]))
    counts = counts.double()
    return int((counts / counts.sum(-1, keepdim=True) < share).sum())


def relation_prior(data: FactDataset) -> float:
    """The answers' cross-entropy of a predictor that knows each relation's answers and their frequencies but no
    fact: −mean log P(answer | relation), P the answer's share among the relation's facts."""
    counts: dict[tuple[str, str], int] = {}
    per_relation: dict[str, int] = {}
    for f in data.facts:
        counts[f.relation, f.obj] = counts.get((f.relation, f.obj), 0) + 1
        per_relation[f.relation] = per_relation.get(f.relation, 0) + 1
    return -sum(math.log(counts[f.relation, f.obj] / per_relation[f.relation]) for f in data.facts) / len(data.facts)


def answer_share(data: FactDataset) -> float:
    """The answers' share of all training targets."""
    return len(data) / int((data.targets != -100).sum())


def over_seeds(v: torch.Tensor | Sequence[float], digits: int = 2) -> str:
    """``"mean (lowest–highest)"`` of per-seed values."""
    v = torch.as_tensor(v, dtype=torch.float64)
    return f"{v.mean():.{digits}f} ({v.min():.{digits}f}–{v.max():.{digits}f})"


def training_table(runs: dict[tuple[str, int], Run], arms: Sequence[str], seeds: Sequence[int]) -> str:
    """Printable lines, one per arm over ``seeds`` (mean, lowest–highest): the busiest expert's load over the mean
    in each layer over the last 5 training steps, the experts starved (under 2 % of the slots then, of 16) per
    seed, and the cross-entropy over all targets and over the answers."""
    lines = [f"{'':<18}{'busiest/mean, layer 0':>23}{'layer 1':>18}{'starved':>12}{'CE, all targets':>22}"
             f"{'answers':>18}"]
    for arm in arms:
        rs = [runs[arm, s] for s in seeds]
        if rs[0].log is not None:
            layer = [over_seeds([float(r.log.max_over_mean()[-5:, l].mean()) for r in rs]) for l in range(2)]
            hungry = ",".join(str(starved(r.log)) for r in rs)
        else:
            layer, hungry = ["–", "–"], "–"
        lines.append(f"{arm:<18}{layer[0]:>23}{layer[1]:>18}{hungry:>12}{over_seeds([r.ce for r in rs], 3):>22}"
                     f"{over_seeds([r.answer_ce for r in rs]):>18}")
    return "\n".join(lines)


def largest_difference(runs: dict[tuple[str, int], Run], study: dict) -> float:
    """The largest |cross-entropy of a live run − the file's run of the same arm, seed and learning rate|."""
    return max(abs(r.ce - study["short"][r.arm][f"{r.lr:g}"][str(r.seed)]["ce"]) for r in runs.values())


def long_table(study: dict, floor: float) -> str:
    """Printable lines for the long study: per arm, the cross-entropy over all targets above the data's loss
    ``floor`` at each checkpoint and at the end (mean over seeds), how far it fell from the last checkpoint to the
    end (mean, and the largest over seeds: is the run flat?), and the share of answers right at the end."""
    arms = list(study["long"])
    first = next(iter(study["long"][arms[0]].values()))
    steps = sorted(int(k) for k in first.get("curve", {})) + [study["settings"]["long_steps"]]
    fell = f"fell {steps[-2]:,}–{steps[-1]:,}" if len(steps) > 1 else ""
    lines = [f"{'CE − floor after step':<22}" + "".join(f"{s:>8,}" for s in steps) + f"{fell:>23}"
             + f"{'answers right':>15}"]
    for arm in arms:
        runs = list(study["long"][arm].values())
        gaps = [sum((r["curve"][str(s)] if s in map(int, r.get("curve", {})) else r["ce"]) for r in runs)
                / len(runs) - floor for s in steps]
        right = sum(r["accuracy"] for r in runs) / len(runs)
        drops = [r["curve"][str(steps[-2])] - r["ce"] for r in runs] if fell else []
        moved = f"{sum(drops) / len(drops):.3f} (max {max(drops):.3f})" if drops else ""
        lines.append(f"{arm:<22}" + "".join(f"{g:>8.3f}" for g in gaps) + f"{moved:>23}" + f"{right:>15.2%}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the shipped file
def run_study(*, seeds: Sequence[int] = SEEDS, lrs: Sequence[float] = LRS, long_steps: int = LONG_STEPS,
              progress: bool = True, only: str | None = None) -> dict:
    """Both studies as the file stores them: ``{"short": {arm: {lr: {seed: summary}}}, "long": {arm: {seed:
    summary}}}`` (learning rates and seeds as strings, JSON keys); ``only``: "short" or "long" trains just that one."""
    data = make_dataset(load_facts())
    jobs = [] if only == "long" else [("short", arm, lr, SHORT_STEPS, seed) for arm in ARMS for lr in lrs for seed in seeds]
    jobs += [] if only == "short" else [("long", arm, LONG_LR, long_steps, seed) for arm in LONG_ARMS for seed in seeds]
    out: dict = {"short": {}, "long": {}}
    for study, arm, lr, steps, seed in progress_bar(jobs, desc="runs", disable=not progress):
        checkpoints = [steps * i // 4 for i in (1, 2, 3)] if study == "long" else ()
        summary = train_run(arm, seed, data, steps=steps, lr=lr, keep_model=False, checkpoints=checkpoints).summary()
        if study == "short":
            out["short"].setdefault(arm, {}).setdefault(f"{lr:g}", {})[str(seed)] = summary
        else:
            out["long"].setdefault(arm, {})[str(seed)] = summary
    return out


def write_results(path: str | Path, made_by: str, settings: dict, body: dict) -> Path:
    """Write a study file: ``{"made_by", "settings", "environment" (the machine it ran on), **body}`` as JSON.
    Shared by notebook 05's study modules (``moe_runs``, ``moe_zloss``, ``moe_no_ffn``)."""
    record = {"made_by": made_by, "settings": settings,
              "environment": {"torch": torch.__version__, "python": platform.python_version(),
                              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                              "threads": torch.get_num_threads()},
              **body}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, separators=(",", ":")) + "\n", encoding="utf-8")
    return path


def read_results(path: str | Path, what: str, command: str) -> dict:
    """The study file at ``path`` as a dict; a missing file names ``what`` it holds and the ``command`` that makes it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {path}; make them with {command}")
    return json.loads(path.read_text(encoding="utf-8"))


def save_runs(study: dict, path: str | Path, *, lrs: Sequence[float] = LRS, long_steps: int = LONG_STEPS) -> Path:
    """Write ``run_study``'s result as JSON with its settings and the machine it ran on."""
    return write_results(path, "python -m helpers.moe_runs --results",
                         {"short_steps": SHORT_STEPS, "lrs": list(lrs), "long_steps": long_steps,
                          "long_lr": LONG_LR, "batch": BATCH}, study)


def load_runs(path: str | Path | None = None) -> dict:
    """The file written by ``save_runs`` (default: the shipped ``RUNS_PATH``), as a dict."""
    return read_results(RUNS_PATH if path is None else path, "MoE runs", "python -m helpers.moe_runs --results")


def values(runs: dict, arm: str, key: str, lr: float | None = None, seeds: Sequence[int] | None = None) -> torch.Tensor:
    """``(seeds,)`` float64: ``key`` ("ce", "answer_ce", "accuracy") of the short study at ``lr``, or of the long
    study when ``lr`` is ``None``; seeds in the file's order unless given."""
    table = runs["long"][arm] if lr is None else runs["short"][arm][f"{lr:g}"]
    keys = list(table) if seeds is None else [str(s) for s in seeds]
    return torch.tensor([table[k][key] for k in keys], dtype=torch.float64)


def summaries(runs: dict, arm: str, lr: float, seeds: Sequence[int] | None = None) -> list[dict]:
    """The short study's per-seed summaries of ``arm`` at ``lr``."""
    table = runs["short"][arm][f"{lr:g}"]
    return [table[k] for k in (list(table) if seeds is None else [str(s) for s in seeds])]


def best_lr(runs: dict, arm: str) -> float:
    """The learning rate of the short study with the lowest mean cross-entropy for ``arm``."""
    return min((float(lr) for lr in runs["short"][arm]), key=lambda lr: float(values(runs, arm, "ce", lr).mean()))


def sweep_table(runs: dict) -> str:
    """Printable lines: mean cross-entropy over seeds for each arm (rows) and learning rate (columns), the best
    marked with *."""
    lrs = sorted({float(lr) for arm in runs["short"] for lr in runs["short"][arm]})
    lines = [f"{'':<18}" + "".join(f"{'lr ' + format(lr, 'g'):>10}" for lr in lrs)]
    for arm in runs["short"]:
        best = best_lr(runs, arm)
        lines.append(f"{arm:<18}" + "".join(
            f"{values(runs, arm, 'ce', lr).mean():>9.3f}{'*' if lr == best else ' '}" for lr in lrs))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.moe_runs --results``: train notebook 05's studies and store them."""
    parser = argparse.ArgumentParser(prog="python -m helpers.moe_runs", description=main.__doc__)
    parser.add_argument("--results", action="store_true", required=True, help="train both studies, write the file")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="default: 0 to 9")
    parser.add_argument("--lrs", type=float, nargs="+", default=list(LRS), help=f"default: {list(LRS)}")
    parser.add_argument("--long-steps", type=int, default=LONG_STEPS, help=f"default: {LONG_STEPS}")
    parser.add_argument("--out", default=str(RUNS_PATH), help=f"default: {RUNS_PATH}")
    parser.add_argument("--only", choices=("short", "long"),
                        help="train one study and keep the other from the existing --out file")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                        # as in the notebooks (helpers.env.setup)
    try:
        study = run_study(seeds=args.seeds, lrs=args.lrs, long_steps=args.long_steps, only=args.only)
    finally:
        torch.set_num_threads(threads)
    if args.only:
        kept = load_runs(args.out)
        other = "long" if args.only == "short" else "short"
        study[other] = kept[other]
        if args.only == "short":
            args.long_steps = kept["settings"]["long_steps"]
        else:
            args.lrs = kept["settings"]["lrs"]
    print(f"wrote {save_runs(study, args.out, lrs=args.lrs, long_steps=args.long_steps)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def capacity_figure(runs: dict, lr: float, alphas: Sequence[float] = (0.0, 0.1)):
    """Share of slots dropped against the capacity factor (``CAPACITY_FACTORS``) for the trained routers of layer
    1 replayed top-1 and top-2 (``capacity_summary``): one panel per α, the mean over the file's seeds with a band
    from the lowest to the highest seed."""
    import matplotlib.pyplot as plt

    from helpers.plotting import PALETTE

    fig, axes = plt.subplots(1, len(alphas), figsize=(11, 3.8), sharey=True)
    for ax, alpha in zip(axes, alphas):
        arm = f"MoE, α = {alpha:g}"
        for k, color in zip((1, 2), PALETTE):
            v = torch.stack([capacity_values(runs, arm, lr, f"top{k}", i) for i in range(len(CAPACITY_FACTORS))])
            ax.plot(CAPACITY_FACTORS, v.mean(1).numpy(), "o-", color=color, label=f"top-{k}")
            ax.fill_between(CAPACITY_FACTORS, v.min(1).values.numpy(), v.max(1).values.numpy(), color=color,
                            alpha=0.15)
        ax.set(xlabel="capacity factor c", xticks=CAPACITY_FACTORS,
               title=f"layer 1, router trained top-1, α = {alpha:g}: {v.shape[1]} seeds")
        ax.legend()
    axes[0].set_ylabel("share of slots dropped (band: seed range)")
    fig.tight_layout()
    return fig


def lm_families(runs: dict, lr: float) -> tuple[dict, dict]:
    """Notebook 05 section 8's balance and fit comparisons from the shipped runs (``helpers.stats.paired_difference``,
    value − baseline, seed by seed). Balance (busiest/mean, both layers, last 5 steps at ``lr``): α = 0.1 and
    Switch's α = 0.01 against α = 0, α = 0.1 against α = 0.01, and each α's end against its first step. Cross-
    entropy (all targets): the balancing loss's cost (α = 0.1 − α = 0), the MoE (α = 0.1) against both dense
    models at ``lr`` and at 3e-3, and after the long runs."""
    load = {a: [busiest(s) for s in summaries(runs, f"MoE, α = {a}", lr)] for a in ("0", "0.01", "0.1")}
    first = {a: [busiest(s, slice(0, 1)) for s in summaries(runs, f"MoE, α = {a}", lr)] for a in load}
    balance = {"busiest/mean: α = 0.1 − α = 0": paired_difference(load["0.1"], load["0"]),
               "busiest/mean: α = 0.01 − α = 0": paired_difference(load["0.01"], load["0"]),
               "busiest/mean: α = 0.1 − α = 0.01": paired_difference(load["0.1"], load["0.01"])}
    for a in load:
        balance[f"busiest/mean, α = {a}: end − first step"] = paired_difference(load[a], first[a])
    moe = "MoE, α = 0.1"
    ce = {"CE: MoE α = 0.1 − MoE α = 0": paired_difference(values(runs, moe, "ce", lr),
                                                          values(runs, "MoE, α = 0", "ce", lr))}
    for width in (96, 768):
        dense = f"dense, width {width}"
        ce[f"CE: MoE α = 0.1 − dense {width}"] = paired_difference(values(runs, moe, "ce", lr),
                                                                   values(runs, dense, "ce", lr))
    ce["CE at lr 3e-3: MoE α = 0.1 − dense 768"] = paired_difference(values(runs, moe, "ce", 3e-3),
                                                                     values(runs, "dense, width 768", "ce", 3e-3))
    for width in (96, 768):
        ce[f"CE, 1,000 steps: MoE α = 0.1 − dense {width}"] = paired_difference(
            values(runs, moe, "ce"), values(runs, f"dense, width {width}", "ce"))
    return balance, ce


def holm_groups(groups: Mapping[str, Mapping[str, Comparison]], unit: str = "", digits: int = 3,
                show: Sequence[str] | None = None) -> str:
    """One Holm family (``helpers.stats.holm``) over every group's comparisons, printed as its header, then per
    group its heading and its rows (``Verdict.line``). ``groups``: heading → {comparison name → comparison};
    ``show``: print only these groups' rows (the verdicts still come from the whole family)."""
    if show is not None and any(heading not in groups for heading in show):
        raise ValueError(f"show must name groups among {list(groups)}, got {list(show)!r}")
    family = {name: c for rows in groups.values() for name, c in rows.items()}
    if len(family) != sum(len(rows) for rows in groups.values()):
        raise ValueError("groups must not repeat a comparison name")
    verdicts = dict(zip(family, holm(family)))
    width = max(len(name) for name in family)
    resolved = sum(v.resolved for v in verdicts.values())
    lines = [f"Holm's step-down over {len(family)} comparisons (5 % two-sided): {resolved} resolved"]
    for heading, rows in groups.items():
        if show is not None and heading not in show:
            continue
        lines += [heading + ":"] + ["  " + verdicts[name].line(width, unit, digits) for name in rows]
    return "\n".join(lines)
