r"""Notebook 05's collapse-and-recovery study: does routing collapse without the balancing loss, and does switching
the loss on mid-run bring the load back?

The model is section 8's ``TinyGPT`` MoE (8 SwiGLU experts of width 96, top-1, 32 sentences a step, AdamW) pushed
towards collapse: learning rate ``LR`` = 3e-2, router weights scaled by ``INIT_SCALE`` = 30 at initialisation, no
z-loss (``z_coef = 0``), no noise. Two arms share every seed's initial weights and batches:

* ``"α = 0 throughout"``: ``STEPS`` = 120 steps without a balancing loss;
* ``"α = 0.1 from step 60"``: the same run, with ``balance_coef = 0.1`` from step ``SWITCH`` + 1 on (the first 60
  steps are identical to the other arm's).

Recorded per step: the busiest expert's share of the step's slots in each layer (1/8 = even, 1 = collapse).
``summary`` reads it as the larger layer's mean over the last ``WINDOW`` steps before the switch and at the end.

Shipped in ``COLLAPSE_PATH``, made by::

    python -m helpers.moe_collapse --results --seeds 0 1 2 3 4 5 6 7 8 9   # about 5 minutes of one CPU core

The notebook reruns the first 15 steps of seed 0 (shared by both arms) live and checks them against the file
(``live_gap``). In the shipped file, without the loss the busiest expert ends above half the tokens in 9 of 10
seeds; switched on, the loss brings it down in 10 of 10 (Holm, ``family``), not back to an even 1/8.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from helpers.facts import FactDataset, load_facts, make_dataset
from helpers.moe import MoE, RoutingLog, moe_aux_loss
from helpers.moe_runs import lm_config
from helpers.stats import PairedDifference, holm_table, paired_difference
from helpers.transformer import TinyGPT

LR, INIT_SCALE, STEPS, SWITCH, ALPHA, WINDOW = 3e-2, 30.0, 120, 60, 0.1, 10
ARMS = ("α = 0 throughout", f"α = {ALPHA} from step {SWITCH}")
SEEDS: tuple[int, ...] = tuple(range(10))
#: Where ``python -m helpers.moe_collapse --results`` writes the runs and ``load_collapse`` reads them.
COLLAPSE_PATH = Path(__file__).parent / "data" / "moe_collapse.json"


def _model(seed: int, data: FactDataset) -> tuple[TinyGPT, list[MoE]]:
    torch.manual_seed(seed)
    model = TinyGPT(lm_config(data), ffn_factory=lambda layer: MoE(64, 8, 1, d_ff=96, balance_coef=0.0, z_coef=0.0))
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    with torch.no_grad():
        for m in moes:
            m.router.weight *= INIT_SCALE
    return model, moes


def _steps(model: TinyGPT, opt: torch.optim.Optimizer, gen: torch.Generator, data: FactDataset, n: int) -> torch.Tensor:
    """``n`` AdamW steps of 32 sentences drawn with ``gen`` (next-token loss plus the MoE layers' ``aux_loss``, as
    ``helpers.transformer.train_lm``); returns ``(n, layers)`` the busiest expert's share of each step's slots."""
    model.train()
    log = RoutingLog()
    for step in range(n):
        rows = torch.randint(0, data.ids.shape[0], (32,), generator=gen)
        logits = model(data.ids[rows])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), data.targets[rows].reshape(-1), ignore_index=-100)
        loss = loss + moe_aux_loss(model)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        log(step, model, loss.item())
    counts = log.counts.double()
    return counts.max(-1).values / counts.sum(-1)


def busiest_share_run(seed: int, data: FactDataset, steps: int = SWITCH) -> torch.Tensor:
    """The first ``steps`` steps (α = 0, shared by both arms) of ``seed``: ``(steps, layers)`` busiest shares."""
    model, _ = _model(seed, data)
    return _steps(model, torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0),
                  torch.Generator().manual_seed(seed), data, steps)


def both_arms(seed: int, data: FactDataset, steps: int = STEPS) -> dict[str, torch.Tensor]:
    """Both arms of ``seed``: ``SWITCH`` steps at α = 0, then a copy of the model, optimiser and batch generator
    continues at α = 0 and another at α = ``ALPHA``; {arm: (steps, layers) busiest shares}."""
    model, _ = _model(seed, data)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    first = _steps(model, opt, gen, data, SWITCH)
    out = {}
    for arm, alpha in zip(ARMS, (0.0, ALPHA)):
        m, _ = _model(seed, data)
        m.load_state_dict(model.state_dict())
        o = torch.optim.AdamW(m.parameters(), lr=LR, weight_decay=0.0)
        o.load_state_dict(copy.deepcopy(opt.state_dict()))
        g = torch.Generator()
        g.set_state(gen.get_state())
        for layer in m.modules():
            if isinstance(layer, MoE):
                layer.balance_coef = alpha
        out[arm] = torch.cat([first, _steps(m, o, g, data, steps - SWITCH)])
    return out


def run_study(seeds: Sequence[int], data: FactDataset, steps: int = STEPS) -> dict:
    """Both arms for every seed: {"settings": ..., "runs": {arm: {seed: (steps, layers) list}}}."""
    runs: dict[str, dict[str, list]] = {arm: {} for arm in ARMS}
    for seed in seeds:
        for arm, share in both_arms(seed, data, steps).items():
            runs[arm][str(seed)] = [[round(v, 5) for v in row] for row in share.tolist()]
        print(f"seed {seed} done", flush=True)
    settings = {"lr": LR, "init_scale": INIT_SCALE, "steps": steps, "switch": SWITCH, "alpha": ALPHA,
                "window": WINDOW, "z_coef": 0.0, "experts": 8, "top_k": 1, "batch": 32,
                "torch": torch.__version__, "machine": platform.machine()}
    return {"settings": settings, "runs": runs}


def load_collapse(path: Path = COLLAPSE_PATH) -> dict:
    """The shipped study."""
    return json.loads(Path(path).read_text())


def shares(study: dict, arm: str) -> torch.Tensor:
    """``(seeds, steps, layers)`` busiest-expert shares of ``arm``, seeds in the file's order."""
    return torch.tensor([study["runs"][arm][s] for s in sorted(study["runs"][arm], key=int)], dtype=torch.float64)


def summary(study: dict, arm: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per seed, the larger layer's mean busiest share over the ``WINDOW`` steps before the switch and over the
    last ``WINDOW`` steps: two ``(seeds,)`` tensors."""
    s = shares(study, arm)
    w = study["settings"]["window"]
    before = s[:, SWITCH - w:SWITCH].mean(1).max(-1).values
    end = s[:, -w:].mean(1).max(-1).values
    return before, end


def family(study: dict) -> dict[str, PairedDifference]:
    """The verdicts: the switched arm at the end against the same arm before the switch, and against α = 0 at the
    end (paired by seed)."""
    off_before, off_end = summary(study, ARMS[0])
    on_before, on_end = summary(study, ARMS[1])
    return {"α on: end − before the switch": paired_difference(on_end, on_before),
            "end: α on − α = 0 throughout": paired_difference(on_end, off_end)}


def live_gap(share: torch.Tensor, study: dict, seed: int = 0) -> float:
    """Largest |difference| between a live ``(steps, layers)`` run's first steps (``busiest_share_run``) and the
    file's same steps of ``seed``."""
    stored = torch.tensor(study["runs"][ARMS[1]][str(seed)], dtype=torch.float64)[: share.shape[0]]
    return float((share - stored).abs().max())


def summary_lines(study: dict) -> str:
    """Per arm: the larger layer's busiest share over the ``WINDOW`` steps before the switch and the last ``WINDOW``
    steps (mean of the seeds, lowest–highest), and in how many seeds it ends above one half."""
    from helpers.moe_runs import over_seeds

    w, steps = study["settings"]["window"], study["settings"]["steps"]
    lines = []
    for arm in ARMS:
        before, end = summary(study, arm)
        lines.append(f"{arm}: busiest expert's share, steps {SWITCH - w + 1}–{SWITCH} {over_seeds(before)}, steps "
                     f"{steps - w + 1}–{steps} {over_seeds(end)}; above 1/2 at the end in {int((end > 0.5).sum())} "
                     f"of {end.numel()} seeds")
    return "\n".join(lines)


def figure(study: dict):
    """The busiest expert's share against the step (the larger of the two layers), each seed thin, the mean of the
    seeds thick, for both arms; the switch and the even share 1/8 marked. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    steps = torch.arange(1, study["settings"]["steps"] + 1)
    first = shares(study, ARMS[0]).max(-1).values[:, :SWITCH]          # (seeds, SWITCH), the same in both arms
    for row in first:
        ax.plot(steps[:SWITCH], row.numpy(), color="0.4", lw=0.5, alpha=0.35)
    ax.plot(steps[:SWITCH], first.mean(0).numpy(), color="0.2", lw=2, label="α = 0, both arms")
    for arm, color in zip(ARMS, ("tab:red", "tab:blue")):
        s = shares(study, arm).max(-1).values[:, SWITCH - 1:]      # (seeds, steps from the switch on)
        for row in s:
            ax.plot(steps[SWITCH - 1:], row.numpy(), color=color, lw=0.5, alpha=0.35)
        ax.plot(steps[SWITCH - 1:], s.mean(0).numpy(), color=color, lw=2,
                label=f"{arm} (mean of {s.shape[0]} seeds; thin: each seed)")
    ax.axvline(SWITCH + 0.5, color="0.3", ls="--", lw=1)
    ax.axhline(1 / 8, color="0.5", ls=":", lw=1, label="even load: 1/8")
    ax.set(xlabel="training step", ylabel="busiest expert's share\n(larger layer, each step)", ylim=(0, 1.02),
           title=f"after step {SWITCH}: one copy at α = 0.1, one at α = 0 (lr {LR:g}, router init ×{INIT_SCALE:g}, "
                 f"no z-loss)")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    return fig


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", action="store_true", help="train both arms for --seeds and write --out")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--out", type=Path, default=COLLAPSE_PATH)
    args = parser.parse_args(argv)
    if not args.results:
        parser.print_help()
        return
    torch.set_num_threads(1)
    study = run_study(args.seeds, make_dataset(load_facts()), args.steps)
    args.out.write_text(json.dumps(study) + "\n")
    for arm in ARMS:
        before, end = summary(study, arm)
        print(f"{arm}: before the switch {[round(v, 2) for v in before.tolist()]}, end {[round(v, 2) for v in end.tolist()]}")
    print(holm_table(family(study)))


if __name__ == "__main__":
    main()
