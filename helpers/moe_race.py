"""Notebook 07's race: what sparse experts buy per training step, each arm at its own tuned learning rate.

The model is ``helpers.fact_lookup``'s: the course's 608 facts, each reduced to ``(subject, relation)``, one FFN,
the embeddings frozen at their random start so that the FFN has to hold the facts (with trainable embeddings
the model without an FFN fits every fact: the race's ``trainable`` sweep shows it). A seed fixes the lookup
(drawn first, the same for every arm) and then the FFN: runs of two arms with the same seed start from the same
lookup around different FFNs, so arms are compared seed by seed (paired).

Each arm (``ARMS``) gets its own learning rate for each step budget (``SETTINGS["budgets"]``: 100 steps, the
per-step race, and 3× as many): a small sweep (``LRS``, a doubling grid, on three seeds of its own,
``SWEEP_SEEDS``) picks the rate with the lowest mean answer loss at the end of the budget; then every seed of
``SEEDS`` trains at that rate (AdamW, constant rate), scored after four fifths of the run and at its end. The
race takes about half an hour of CPU, so notebook 07 reads it from ``RACE_PATH`` (``load_race``); the file is
made by::

    python -m helpers.moe_race --results          # every arm, budget, sweep and seed of the settings

(``--arms``, ``--seeds``, ``--sweep-seeds``, ``--lrs``, ``--budgets`` and ``--out`` make a smaller run; the tests
make one). The notebook trains one seed live and checks it against the file. Exercise 2's sweep of the bias's
speed γ (section 5's bias arm at seven γ, ten seeds; about a minute) is made by::

    python -m helpers.moe_race --gamma-sweep      # GAMMA_PATH, read by load_gamma_sweep

Section 5's other points on the Switch loss's curve (its "MoE" arm at α = 0.01 and 0.3, the race's 100-step rate
and seeds; about a minute) are made by::

    python -m helpers.moe_race --alpha-points     # ALPHA_PATH, read by load_alpha_points
"""

from __future__ import annotations

import argparse
import json
import platform
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from helpers.fact_lookup import LookupData, build_lookup, ffn_params, lookup_data, train_lookup
from helpers.progress import progress as progress_bar
from helpers.stats import PairedDifference, Verdict, holm, holm_table, paired_difference


# ----------------------------------------------------------------------------- the race's arms and settings
_MOE = {"ffn": "moe", "n_experts": 8, "top_k": 1, "d_ff": 8, "balance_coef": 0.1, "z_coef": 0.0}
#: Section 4 (the first eight) and section 5 (section 4's MoE trained four more ways).
ARMS: dict[str, dict] = {
    "no FFN (control)": {"ffn": "none"},
    "dense, width 11": {"ffn": "dense", "d_ff": 11},
    "MoE": _MOE,
    "dense, width 19": {"ffn": "dense", "d_ff": 19},
    "MoE, top-2": {**_MOE, "top_k": 2},
    "fine-grained": {**_MOE, "granularity": 4},
    "DeepSeekMoE": {**_MOE, "granularity": 4, "n_shared": 1},
    "dense, width 64": {"ffn": "dense", "d_ff": 64},
    "no balancing": {**_MOE, "balance_coef": 0.0},
    "Switch loss, sigmoid": {**_MOE, "score": "sigmoid"},
    "bias, softmax": {**_MOE, "balance_coef": 0.0, "bias_update": 0.01},
    "bias, sigmoid": {**_MOE, "balance_coef": 0.0, "score": "sigmoid", "bias_update": 0.01},
}
#: Section 4's comparisons (value − baseline), one Holm family: each MoE against the dense FFN of its FLOPs per
#: fact (router included), granularity at equal expert work and at equal FLOPs, a shared expert, and all the
#: parameters active; section 5's (the same pairs judged on the load and on the loss).
RACE_PAIRS: tuple[tuple[str, str], ...] = (
    ("dense, width 11", "no FFN (control)"), ("MoE", "dense, width 11"), ("MoE, top-2", "dense, width 19"),
    ("fine-grained", "dense, width 19"), ("DeepSeekMoE", "dense, width 19"), ("fine-grained", "MoE"),
    ("fine-grained", "MoE, top-2"), ("DeepSeekMoE", "fine-grained"), ("MoE", "dense, width 64"))
#: Granularity under two accountings, a family of its own: the fine-grained arm against the top-1 MoE it was cut
#: from (the same expert parameters and expert FLOPs: DeepSeekMoE's comparison) and against the top-2 MoE (the
#: same FLOPs per fact once its 256-weight router, 57 % of its 448, is counted).
GRANULARITY_PAIRS: tuple[tuple[str, str], ...] = (("fine-grained", "MoE"), ("fine-grained", "MoE, top-2"))
BALANCE_PAIRS: tuple[tuple[str, str], ...] = (
    ("no balancing", "MoE"), ("bias, softmax", "MoE"), ("bias, sigmoid", "Switch loss, sigmoid"),
    ("Switch loss, sigmoid", "MoE"), ("bias, sigmoid", "bias, softmax"))
#: Section 5's display names: there every arm is an MoE, so its "MoE" (section 4's top-1 MoE: softmax scores,
#: Switch loss) is named by what it is; the keys stay as in the shipped files.
BALANCE_NAMES: dict[str, str] = {"no balancing": "no balancing, softmax", "MoE": "Switch loss, softmax"}
#: Two step budgets, each arm tuned for each: 100 steps (the per-step race) and 3× as many.
SETTINGS: dict = dict(d_model=8, budgets=(100, 300), frozen=True)
LRS: tuple[float, ...] = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64)
SWEEP_SEEDS: tuple[int, ...] = (100, 101, 102)
SEEDS: tuple[int, ...] = tuple(range(20))
#: the arms swept once more with trainable embeddings (first budget): the reason the race freezes them
TRAINABLE_ARMS: tuple[str, ...] = ("no FFN (control)", "dense, width 11", "MoE", "dense, width 64")
LATE = 10         # the late load: busiest over mean load, averaged over a run's last LATE steps
#: Where ``python -m helpers.moe_race --results`` writes the race and ``load_race`` reads it.
RACE_PATH = Path(__file__).parent / "data" / "moe_race.json"
#: The same race's seeds trained again at the same rates on the portable kernel (ATEN_CPU_CAPABILITY=default)::
#:     ATEN_CPU_CAPABILITY=default python -m helpers.moe_race --results --rates-from helpers/data/moe_race.json \
#:         --out helpers/data/moe_race_default_kernel.json
KERNEL_RERUN_PATH = Path(__file__).parent / "data" / "moe_race_default_kernel.json"
#: Section 5's arms trained again at the same rates on twenty fresh seeds (200 to 219, used nowhere else)::
#:     python -m helpers.moe_race --results --rates-from helpers/data/moe_race.json --seeds $(seq 200 219) \
#:         --arms "no balancing" MoE "bias, softmax" "Switch loss, sigmoid" "bias, sigmoid" \
#:         --out helpers/data/moe_race_fresh_seeds.json
FRESH_SEEDS_PATH = Path(__file__).parent / "data" / "moe_race_fresh_seeds.json"
#: Section 4's arms trained again at the same rates on twenty fresh seeds (300 to 319, used nowhere else)::
#:     python -m helpers.moe_race --results --rates-from helpers/data/moe_race.json --seeds $(seq 300 319) \
#:         --arms "no FFN (control)" "dense, width 11" MoE "dense, width 19" "MoE, top-2" fine-grained \
#:         DeepSeekMoE "dense, width 64" --out helpers/data/moe_race_fresh_seeds_s4.json
RACE_FRESH_SEEDS_PATH = Path(__file__).parent / "data" / "moe_race_fresh_seeds_s4.json"
_DIGITS = 5       # losses are stored to 1e-5 nats: far below what another CPU kernel changes


# ----------------------------------------------------------------------------- an arm over seeds, a sweep
@dataclass
class SeedRuns:
    """One arm trained for ``steps`` steps at one learning rate over several seeds.

    Attributes:
        name, spec (``make_ffn``'s), lr, seeds, steps. eval_steps: the steps scored, the start of the last
            fifth of the run and its end.
        loss, accuracy: ``(len(eval_steps), seeds)`` float64: answer loss (nats) and share right over every fact
            (eval mode) after each of ``eval_steps``.
        curve: ``(3, steps)`` float64: the training answer loss per step, mean, lowest and highest over seeds.
        params_total, params_active: the FFN's parameters in total and used per fact (``ffn_params``).
        late_load: ``(seeds,)`` float64, an MoE's busiest expert's load over the mean load, averaged over the last
            ``LATE`` steps (``None`` for a dense arm).
        max_over_mean: ``(steps, seeds)`` float64, that ratio at every step, and first_loads ``(steps, E)`` long,
            the first seed's routed slots per expert (kept when asked for; ``None`` otherwise).
        settings: ``d_model``, ``frozen``.
    """

    name: str
    spec: dict
    lr: float
    seeds: list[int]
    steps: int
    eval_steps: list[int]
    loss: torch.Tensor
    accuracy: torch.Tensor
    curve: torch.Tensor
    params_total: int
    params_active: int
    late_load: torch.Tensor | None = None
    max_over_mean: torch.Tensor | None = None
    first_loads: torch.Tensor | None = None
    settings: dict = field(default_factory=dict)

    def _row(self, step: int | None) -> int:
        step = self.steps if step is None else step
        if step not in self.eval_steps:
            raise ValueError(f"step must be one of the scored steps {self.eval_steps}, got {step!r}")
        return self.eval_steps.index(step)

    def final(self, step: int | None = None) -> torch.Tensor:
        """``(seeds,)`` float64: the answer loss after ``step`` steps (default: at the end of the run)."""
        return self.loss[self._row(step)]

    def right(self, step: int | None = None) -> torch.Tensor:
        """``(seeds,)`` float64: the share of facts answered right after ``step`` steps (default: at the end)."""
        return self.accuracy[self._row(step)]


def train_arm(name: str, spec: dict, data: LookupData, *, seeds: Sequence[int], d_model: int, steps: int,
              lr: float, frozen: bool = True, keep_loads: bool = False) -> SeedRuns:
    """``build_lookup`` and ``train_lookup`` once per seed, one seed after another, scored after 4/5 of the
    steps and at the end (``keep_loads``: keep an MoE's load at every step too)."""
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must list at least one seed")
    eval_steps = sorted({max(1, round(0.8 * steps)), steps})
    curves, loads, loss, right = [], [], [], []
    for seed in seeds:
        model = build_lookup(data, spec, d_model, seed, frozen=frozen)
        curve, load, evals = train_lookup(model, data, steps=steps, lr=lr, eval_at=eval_steps)
        curves.append(curve), loads.append(load)
        loss.append([evals[s][0] for s in eval_steps]), right.append([evals[s][1] for s in eval_steps])
    total, active = ffn_params(model.ffn)
    curves = torch.stack(curves)
    late = mom = first = None
    if loads[0] is not None:
        c = torch.stack(loads, 1)                                              # (steps, seeds, E)
        ratio = c.max(-1).values.double() / c.double().mean(-1)
        late = ratio[-LATE:].mean(0)
        if keep_loads:
            mom, first = ratio, c[:, 0]
    return SeedRuns(name, dict(spec), float(lr), seeds, steps, eval_steps, torch.tensor(loss, dtype=torch.float64).T,
                    torch.tensor(right, dtype=torch.float64).T,
                    torch.stack([curves.mean(0), curves.min(0).values, curves.max(0).values]), total, active, late,
                    mom, first, {"d_model": d_model, "frozen": frozen})


@dataclass
class Sweep:
    """Each arm's answer loss after ``steps`` steps at each learning rate: ``loss[arm]`` ``(len(lrs), seeds)``."""

    lrs: list[float]
    seeds: list[int]
    steps: int
    frozen: bool
    loss: dict[str, torch.Tensor]

    def best_lr(self, arm: str) -> float:
        """The rate with the lowest mean loss over the sweep's seeds."""
        return self.lrs[int(self.loss[arm].mean(1).argmin())]

    def lines(self, arms: Sequence[str] | None = None) -> list[str]:
        """The sweep as a table: mean loss per rate, the chosen one starred."""
        arms = list(self.loss) if arms is None else list(arms)
        width = max(len(a) for a in arms) + 2
        head = f"{'arm':<{width}}" + "".join(f"{lr:>9g}" for lr in self.lrs)
        rows = []
        for arm in arms:
            means, best = self.loss[arm].mean(1), self.best_lr(arm)
            rows.append(f"{arm:<{width}}" + "".join(f"{float(m):>8.3f}{'*' if lr == best else ' '}"
                                                    for lr, m in zip(self.lrs, means)))
        return [head] + rows


def sweep(arms: Sequence[str], data: LookupData, *, lrs: Sequence[float] = LRS, seeds: Sequence[int] = SWEEP_SEEDS,
          d_model: int, steps: int, frozen: bool = True, progress: bool = True) -> Sweep:
    """Train every arm at every rate of ``lrs`` over ``seeds`` and keep the answer loss after ``steps`` steps."""
    desc = f"sweep, {steps} steps{'' if frozen else ', trainable embeddings'}"
    loss = {arm: torch.stack([train_arm(arm, ARMS[arm], data, seeds=seeds, d_model=d_model, steps=steps, lr=lr,
                                        frozen=frozen).final() for lr in lrs])
            for arm in progress_bar(arms, desc=desc, disable=not progress)}
    return Sweep([float(lr) for lr in lrs], [int(s) for s in seeds], steps, frozen, loss)


@dataclass
class Race:
    """Notebook 07's race, per step budget: the sweep that chose each arm's rate (``sweeps[steps]``) and every
    arm's seeds at that rate (``runs[steps][arm]``); and the first budget's sweep with trainable embeddings."""

    sweeps: dict[int, Sweep]
    runs: dict[int, dict[str, SeedRuns]]
    trainable: Sweep | None = None
    environment: dict = field(default_factory=dict)

    @property
    def budgets(self) -> list[int]:
        return sorted(self.runs)


def run_race(arms: Sequence[str] = tuple(ARMS), seeds: Sequence[int] = SEEDS, *,
             sweep_seeds: Sequence[int] = SWEEP_SEEDS, lrs: Sequence[float] = LRS,
             trainable_arms: Sequence[str] = TRAINABLE_ARMS, progress: bool = True, rates_from: Race | None = None,
             **overrides) -> Race:
    """For each step budget: the sweep on ``sweep_seeds``, then ``train_arm`` at each arm's chosen rate over
    ``seeds`` (the first budget keeps the loads of every step); ``overrides`` replace some of ``SETTINGS``.
    ``rates_from``: keep that race's sweeps (and trainable sweep) instead of sweeping, and train the seeds at
    the rates they chose (to run the same race again on another CPU kernel)."""
    unknown = set(overrides) - set(SETTINGS)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; known: {sorted(SETTINGS)}")
    s = {**SETTINGS, **overrides}
    data, d, budgets = lookup_data(), s["d_model"], sorted(int(b) for b in s["budgets"])
    if rates_from is not None and not set(budgets) <= set(rates_from.sweeps):
        raise ValueError(f"rates_from has sweeps for budgets {sorted(rates_from.sweeps)}, not for all of {budgets}")
    sweeps, runs = {}, {}
    for steps in budgets:
        sweeps[steps] = rates_from.sweeps[steps] if rates_from is not None else sweep(
            arms, data, lrs=lrs, seeds=sweep_seeds, d_model=d, steps=steps, frozen=s["frozen"], progress=progress)
        runs[steps] = {arm: train_arm(arm, ARMS[arm], data, seeds=seeds, d_model=d, steps=steps,
                                      lr=sweeps[steps].best_lr(arm), frozen=s["frozen"], keep_loads=steps == budgets[0])
                       for arm in progress_bar(arms, desc=f"seeds, {steps} steps", disable=not progress)}
    if rates_from is not None:
        return Race(sweeps, runs, rates_from.trainable)
    trainable = None if not trainable_arms else sweep(trainable_arms, data, lrs=lrs, seeds=sweep_seeds, d_model=d,
                                                       steps=budgets[0], frozen=False, progress=progress)
    return Race(sweeps, runs, trainable)


# ----------------------------------------------------------------------------- the shipped file
def _rounded(t: torch.Tensor | None) -> list | None:
    if t is None:
        return None
    return t.round(decimals=_DIGITS).tolist() if t.is_floating_point() else t.tolist()


def _sweep_record(s: Sweep | None) -> dict | None:
    return None if s is None else {"lrs": s.lrs, "seeds": s.seeds, "steps": s.steps, "frozen": s.frozen,
                                   "loss": {a: _rounded(v) for a, v in s.loss.items()}}


def _as_sweep(s: dict | None) -> Sweep | None:
    return None if s is None else Sweep(s["lrs"], s["seeds"], s["steps"], s["frozen"],
                                        {a: torch.tensor(v, dtype=torch.float64) for a, v in s["loss"].items()})


_TENSORS = {"loss": torch.float64, "accuracy": torch.float64, "curve": torch.float64, "late_load": torch.float64,
            "max_over_mean": torch.float64, "first_loads": torch.long}


def save_race(race: Race, path: str | Path) -> Path:
    """Write ``race`` as JSON (losses rounded to 1e-5 nats), with its settings and the machine it ran on."""
    record = {
        "made_by": "python -m helpers.moe_race --results",
        "environment": {"torch": torch.__version__, "python": platform.python_version(),
                        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()},
        "sweeps": {str(b): _sweep_record(s) for b, s in race.sweeps.items()},
        "trainable": _sweep_record(race.trainable),
        "runs": {str(b): {name: {"spec": r.spec, "lr": r.lr, "seeds": r.seeds, "steps": r.steps,
                                 "eval_steps": r.eval_steps, "params_total": r.params_total,
                                 "params_active": r.params_active, "settings": r.settings,
                                 **{key: _rounded(getattr(r, key)) for key in _TENSORS}}
                          for name, r in runs.items()}
                 for b, runs in race.runs.items()},
    }
    text = json.dumps(record, indent=1)
    # one line per innermost list of numbers (a curve, a step's loads), not one line per number
    text = re.sub(r"\[\s+([-+.\deE]+(?:,\s+[-+.\deE]+)*)\s+\]", lambda m: "[" + re.sub(r",\s+", ",", m[1]) + "]", text)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def load_race(path: str | Path | None = None) -> Race:
    """Read a race written by ``save_race`` (default: notebook 07's, ``RACE_PATH``)."""
    path = RACE_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no race at {path}; make it with python -m helpers.moe_race --results")
    record = json.loads(path.read_text(encoding="utf-8"))

    def runs(items: dict) -> dict[str, SeedRuns]:
        return {name: SeedRuns(name, r["spec"], r["lr"], r["seeds"], r["steps"], r["eval_steps"],
                               params_total=r["params_total"], params_active=r["params_active"],
                               settings=r["settings"],
                               **{key: None if r[key] is None else torch.tensor(r[key], dtype=dtype)
                                  for key, dtype in _TENSORS.items()})
                for name, r in items.items()}

    return Race({int(b): _as_sweep(s) for b, s in record["sweeps"].items()},
                {int(b): runs(items) for b, items in record["runs"].items()}, _as_sweep(record["trainable"]),
                record["environment"])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.moe_race --results``: per step budget, sweep each arm's learning rate and train its
    seeds at the chosen rate; store the race."""
    parser = argparse.ArgumentParser(prog="python -m helpers.moe_race", description=main.__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--results", action="store_true",
                      help="run the sweeps and every (arm, seed) of notebook 07 and write the race")
    what.add_argument("--alpha-points", action="store_true",
                      help=f"section 5's Switch loss at α {' '.join(map(str, ALPHAS))} instead, to {ALPHA_PATH}")
    what.add_argument("--gamma-sweep", action="store_true",
                      help=f"Exercise 2's γ sweep instead (γ {' '.join(map(str, GAMMAS))}; seeds 0–9) to {GAMMA_PATH}")
    parser.add_argument("--long", action="store_true",
                        help=f"with --gamma-sweep: γ {' '.join(map(str, GAMMAS_LONG))} for {GAMMA_LONG_STEPS} steps "
                             f"to {GAMMA_LONG_PATH}")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS), metavar="ARM",
                        help=f"default: the notebook's {len(ARMS)} arms")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="default: 0 to 19")
    parser.add_argument("--sweep-seeds", type=int, nargs="+", default=list(SWEEP_SEEDS), help="default: 100 101 102")
    parser.add_argument("--lrs", type=float, nargs="+", default=list(LRS), help=f"default: {' '.join(map(str, LRS))}")
    parser.add_argument("--trainable-arms", nargs="*", default=list(TRAINABLE_ARMS), choices=list(ARMS),
                        metavar="ARM", help="arms swept again with trainable embeddings (none: skip)")
    parser.add_argument("--budgets", type=int, nargs="+", default=list(SETTINGS["budgets"]),
                        help="step budgets, each with its own sweep (default: 100 300)")
    parser.add_argument("--rates-from", metavar="PATH",
                        help="train at the rates chosen in this race file, keeping its sweeps (no sweep is run)")
    parser.add_argument("--out", default=str(RACE_PATH), help=f"default: {RACE_PATH}")
    args = parser.parse_args(argv)
    if args.alpha_points:
        out = ALPHA_PATH if args.out == str(RACE_PATH) else args.out
        print(f"wrote α {ALPHAS} to {save_alpha_points(alpha_points(seeds=args.seeds), out)}")
        return 0
    if args.gamma_sweep:
        out = GAMMA_PATH if args.out == str(RACE_PATH) else args.out
        if args.long and args.out == str(RACE_PATH):
            out = GAMMA_LONG_PATH
        seeds = GAMMA_SEEDS if args.seeds == list(SEEDS) else args.seeds
        steps = (GAMMA_LONG_STEPS if args.long else GAMMA_STEPS) if args.budgets == list(SETTINGS["budgets"]) \
            else args.budgets[0]
        gammas = GAMMAS_LONG if args.long else GAMMAS
        print(f"wrote {len(gammas)} γ × {len(seeds)} seeds to {save_gamma_sweep(gamma_runs(gammas, seeds, steps), out)}")
        return 0
    race = run_race(args.arms, args.seeds, sweep_seeds=args.sweep_seeds, lrs=args.lrs,
                    trainable_arms=args.trainable_arms, budgets=tuple(args.budgets),
                    rates_from=None if args.rates_from is None else load_race(args.rates_from))
    print(f"wrote {len(args.arms)} arms × {len(args.seeds)} seeds × {len(args.budgets)} budgets to "
          f"{save_race(race, args.out)}")
    return 0


# ----------------------------------------------------------------------------- Exercise 2: the bias's speed γ
# Section 5's "bias, softmax" arm trained for GAMMA_STEPS steps at its tuned rate GAMMA_LR on GAMMA_SEEDS, once per
# γ of GAMMAS (γ = 0: the bias never moves), and for GAMMA_LONG_STEPS steps at the γ of GAMMAS_LONG. Per run the file
# keeps the answer loss at the end and each expert's routed slots at each of the last LATE steps, from which
# ``max_vio`` computes MaxVio as section 5 does (Wang et al. 2024's MaxVio_batch: per step the busiest expert's load
# over the mean, minus 1; averaged over the last LATE steps). About a minute of CPU for the 100-step file and four
# for the 1,000-step one: ``python -m helpers.moe_race --gamma-sweep`` and ``--gamma-sweep --long``.
# ``gamma_run`` trains one seed live at any γ and length; ``gamma_verdicts`` judges γ = 0.001 (DeepSeek-V3's), 0.1
# and 0.3 against section 5's 0.01 after 100 steps, and 0.001 against 0.01 after 1,000, on MaxVio and on the loss
# (paired t, Holm over those eight comparisons).
GAMMAS: tuple[float, ...] = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3)
GAMMA_SEEDS: tuple[int, ...] = tuple(range(10))
GAMMA_STEPS = 100
GAMMA_LR = 0.08                       # section 5's tuned rate for "bias, softmax" at 100 steps
GAMMA_ARM = "bias, softmax"
GAMMA_PATH = Path(__file__).parent / "data" / "moe_gamma.json"
GAMMAS_LONG: tuple[float, ...] = (0.001, 0.01)
GAMMA_LONG_STEPS = 1000
GAMMA_LONG_PATH = Path(__file__).parent / "data" / "moe_gamma_1000.json"


@dataclass
class GammaSweep:
    """``loss[γ]``: ``(seeds,)`` float64, the answer loss after ``steps`` steps; ``loads[γ]``: ``(seeds, late, E)``
    int64, each expert's routed slots at each of the last ``late`` steps."""

    gammas: list[float]
    seeds: list[int]
    steps: int
    lr: float
    late: int
    loss: dict[float, torch.Tensor]
    loads: dict[float, torch.Tensor]


def max_vio_reference(load: torch.Tensor) -> torch.Tensor:
    """MaxVio of one step's load: ``max(load) / mean(load) − 1`` over the last dimension (float64)."""
    load = load.double()
    return load.max(-1).values / load.mean(-1) - 1


def max_vio(loads: torch.Tensor) -> torch.Tensor:
    """The course's MaxVio (section 5's and Exercise 2's): ``max_vio_reference`` of each step's load, averaged over
    the steps. ``loads``: ``(..., steps, E)`` -> ``(...)`` float64. A ``SeedRuns``' ``late_load`` is this plus 1."""
    return max_vio_reference(loads).mean(-1)


def gamma_run(gamma: float, seed: int = 0, steps: int = GAMMA_STEPS, lr: float = GAMMA_LR) -> tuple[float, float]:
    """One live run of section 5's "bias, softmax" arm at ``gamma``: ``(loss, MaxVio)`` after ``steps`` steps, MaxVio
    over the last ``LATE`` steps (``max_vio``; the learner's own experiment in Exercise 2)."""
    one = gamma_runs([gamma], [seed], steps, lr)
    g = float(gamma)
    return float(one.loss[g][0]), float(max_vio(one.loads[g][0]))


def gamma_runs(gammas: Sequence[float] = GAMMAS, seeds: Sequence[int] = GAMMA_SEEDS, steps: int = GAMMA_STEPS,
               lr: float = GAMMA_LR) -> GammaSweep:
    """Train section 5's "bias, softmax" arm once per (γ, seed); keep the final loss and the late loads."""
    data, d = lookup_data(), SETTINGS["d_model"]
    loss, loads = {}, {}
    for g in gammas:
        spec = {**ARMS[GAMMA_ARM], "bias_update": float(g)}
        ls, lo = [], []
        for seed in seeds:
            model = build_lookup(data, spec, d, int(seed), frozen=True)
            _, load, evals = train_lookup(model, data, steps=steps, lr=lr, eval_at=[steps])
            ls.append(evals[steps][0]), lo.append(load[-LATE:])
        loss[float(g)] = torch.tensor(ls, dtype=torch.float64)
        loads[float(g)] = torch.stack(lo).long()
    return GammaSweep([float(g) for g in gammas], [int(s) for s in seeds], steps, lr, min(LATE, steps), loss,
                      loads)


def save_gamma_sweep(sweep: GammaSweep, path: str | Path = GAMMA_PATH) -> Path:
    path = Path(path)
    record = {"gammas": sweep.gammas, "seeds": sweep.seeds, "steps": sweep.steps, "lr": sweep.lr,
              "late": sweep.late, "arm": GAMMA_ARM,
              "loss": {str(g): [round(float(v), 6) for v in sweep.loss[g]] for g in sweep.gammas},
              "loads": {str(g): sweep.loads[g].tolist() for g in sweep.gammas}}
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def load_gamma_sweep(path: str | Path | None = None) -> GammaSweep:
    """Read the file ``python -m helpers.moe_race --gamma-sweep`` wrote (default ``GAMMA_PATH``)."""
    path = GAMMA_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no γ sweep at {path}; make it with python -m helpers.moe_race --gamma-sweep")
    r = json.loads(path.read_text(encoding="utf-8"))
    gammas = [float(g) for g in r["gammas"]]
    return GammaSweep(gammas, r["seeds"], r["steps"], r["lr"], r["late"],
                      {g: torch.tensor(r["loss"][str(g)], dtype=torch.float64) for g in gammas},
                      {g: torch.tensor(r["loads"][str(g)], dtype=torch.int64) for g in gammas})


def gamma_lines(sweep: GammaSweep, long: GammaSweep | None = None) -> list[str]:
    """One line per γ: mean MaxVio (``max_vio``) and mean loss over the seeds; with ``long``, its γ's columns too."""
    extra = f"; {long.steps:,} steps: seeds {long.seeds[0]}–{long.seeds[-1]}" if long is not None and (
        long.seeds != sweep.seeds) else ""
    rows = [f"bias, softmax, lr {sweep.lr:g}, seeds {sweep.seeds[0]}–{sweep.seeds[-1]}{extra} (means; MaxVio as in "
            f"section 5, over each run's last {sweep.late} steps)",
            f"{'':>7}{f'{sweep.steps} steps':>17}" + (f"{f'{long.steps:,} steps':>19}" if long is not None else ""),
            f"{'γ':>7}{'MaxVio':>9}{'loss':>8}" + (f"{'MaxVio':>11}{'loss':>8}" if long is not None else "")]
    for g in sweep.gammas:
        row = f"{g:>7g}{float(max_vio(sweep.loads[g]).mean()):>9.2f}{float(sweep.loss[g].mean()):>8.3f}"
        if long is not None:
            row += (f"{float(max_vio(long.loads[g]).mean()):>11.2f}{float(long.loss[g].mean()):>8.3f}"
                    if g in long.gammas else f"{'':>19}")
        note = "  (the bias never moves: no balancing)" if g == 0 else (
            "  (DeepSeek-V3's)" if g == 0.001 else ("  (section 5's)" if g == 0.01 else ""))
        rows.append((row + note).rstrip())
    return rows


def gamma_verdicts(sweep: GammaSweep, long: GammaSweep | None = None, base: float = 0.01,
                   others: Sequence[float] = (0.001, 0.1, 0.3)) -> str:
    """γ against ``base`` on MaxVio and on the loss, seed by seed: paired t, Holm over the six comparisons (eight with
    ``long``: its other γ against ``base`` too)."""
    family: dict[str, PairedDifference] = {}
    for run, gs in [(sweep, others)] + ([(long, [g for g in long.gammas if g != base])] if long is not None else []):
        for metric in ("MaxVio", "loss"):
            for g in gs:
                value = (lambda h: max_vio(run.loads[h])) if metric == "MaxVio" else (lambda h: run.loss[h])
                family[f"{run.steps:>5,} steps, {metric}: γ {g:g} − γ {base:g}"] = paired_difference(value(g),
                                                                                                    value(base))
    return holm_table(family, compact=True)


# ----------------------------------------------------------------------------- section 5: other α
# Section 5's "MoE" arm (softmax, the Switch loss) at the race's 100-step rate and seeds, with the loss's weight α
# at ALPHAS instead of 0.1: is the bias better than the Switch loss, or one more point on its α curve?
ALPHAS: tuple[float, ...] = (0.01, 0.3)
ALPHA_PATH = Path(__file__).parent / "data" / "moe_alpha.json"
ALPHA_STEPS = 100


def alpha_points(alphas: Sequence[float] = ALPHAS, seeds: Sequence[int] = SEEDS, lr: float | None = None
                 ) -> dict[float, SeedRuns]:
    """Train section 5's "MoE" arm at each α of ``alphas`` for ``ALPHA_STEPS`` steps (default rate: the race's)."""
    lr = load_race().runs[ALPHA_STEPS]["MoE"].lr if lr is None else lr
    data = lookup_data()
    return {float(a): train_arm(f"Switch loss α {a:g}", {**ARMS["MoE"], "balance_coef": float(a)}, data,
                                seeds=seeds, d_model=SETTINGS["d_model"], steps=ALPHA_STEPS, lr=lr)
            for a in alphas}


def save_alpha_points(points: dict[float, SeedRuns], path: str | Path = ALPHA_PATH) -> Path:
    path = Path(path)
    record = {"made_by": "python -m helpers.moe_race --alpha-points", "steps": ALPHA_STEPS,
              "points": {str(a): {"lr": r.lr, "seeds": r.seeds, "loss": _rounded(r.final()),
                                  "late_load": _rounded(r.late_load)} for a, r in points.items()}}
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


@dataclass
class AlphaPoint:
    """One α: ``loss`` and ``late_load`` ``(seeds,)`` float64 after ``steps`` steps at ``lr``."""

    alpha: float
    lr: float
    seeds: list[int]
    loss: torch.Tensor
    late_load: torch.Tensor


def load_alpha_points(path: str | Path | None = None) -> dict[float, AlphaPoint]:
    """Read the file ``python -m helpers.moe_race --alpha-points`` wrote (default ``ALPHA_PATH``)."""
    path = ALPHA_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no α points at {path}; make them with python -m helpers.moe_race --alpha-points")
    r = json.loads(path.read_text(encoding="utf-8"))["points"]
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return {float(a): AlphaPoint(float(a), p["lr"], p["seeds"], t(p["loss"]), t(p["late_load"])) for a, p in r.items()}


def alpha_lines(race: Race, points: dict[float, AlphaPoint], steps: int = ALPHA_STEPS) -> list[str]:
    """The Switch loss at each α beside section 5's α = 0.1 and bias (means), then the bias against the heaviest α
    and α = 0.1 against the lightest, on MaxVio and loss (paired t, Holm over those four)."""
    switch, bias = race.runs[steps]["MoE"], race.runs[steps]["bias, softmax"]
    rows = [(f"Switch loss, α = {a:g}", p.late_load, p.loss) for a, p in points.items()]
    rows.append(("Switch loss, α = 0.1", switch.late_load, switch.final()))
    rows.sort(key=lambda r: float(r[0].split("= ")[1]))
    rows.append(("bias, γ = 0.01", bias.late_load, bias.final()))
    lines = [f"{steps} steps, softmax, seeds {switch.seeds[0]}–{switch.seeds[-1]}, means:{'MaxVio':>9}{'loss':>8}"]
    lines += [f"  {name:<38}{float(ld.mean()) - 1:>9.2f}{float(ls.mean()):>8.3f}" for name, ld, ls in rows]
    heavy, light = points[max(points)], points[min(points)]
    family = {f"{metric}: bias − α {heavy.alpha:g}": paired_difference(mine, theirs)
              for metric, mine, theirs in (("MaxVio", bias.late_load, heavy.late_load), ("loss", bias.final(), heavy.loss))}
    family.update({f"{metric}: α 0.1 − α {light.alpha:g}": paired_difference(mine, theirs)
                   for metric, mine, theirs in (("MaxVio", switch.late_load, light.late_load),
                                                ("loss", switch.final(), light.loss))})
    reach = [v.threshold * v.comparison.se for v in holm(family) if v.name.startswith("loss")]
    return lines + holm_table(family, compact=True).splitlines() + [
        f"smallest loss difference these could resolve (Holm threshold × SE): {min(reach):.2f} to {max(reach):.2f} nats"]


# ----------------------------------------------------------------------------- reading the race
def display(name: str, names: dict[str, str] | None = None) -> str:
    """An arm's printed name: ``names[name]`` when given there (e.g. ``BALANCE_NAMES``), else the key itself."""
    return (names or {}).get(name, name)


def loss_family(race: Race, pairs: Sequence[tuple[str, str]], budgets: Sequence[int] | None = None,
                n_seeds: int | None = None, names: dict[str, str] | None = None) -> dict[str, PairedDifference]:
    """``a − b`` seed by seed on the answer loss at the end of each budget's runs, for ``helpers.stats.holm``
    (every budget by default; the first ``n_seeds`` seeds only, when given; arms printed with ``display``)."""
    return {f"{steps:>3} steps: {display(a, names)} − {display(b, names)}": paired_difference(
                race.runs[steps][a].final()[:n_seeds], race.runs[steps][b].final()[:n_seeds])
            for steps in (race.budgets if budgets is None else budgets) for a, b in pairs}


def load_family(race: Race, pairs: Sequence[tuple[str, str]], budgets: Sequence[int] | None = None,
                names: dict[str, str] | None = None) -> dict[str, PairedDifference]:
    """``a − b`` seed by seed on the late load (busiest over mean load over each run's last ``LATE`` steps)."""
    return {f"{steps:>3} steps, load: {display(a, names)} − {display(b, names)}": paired_difference(
                race.runs[steps][a].late_load, race.runs[steps][b].late_load)
            for steps in (race.budgets if budgets is None else budgets) for a, b in pairs}


def section_family(race: Race, pairs: Sequence[tuple[str, str]], long, dsm) -> dict[str, PairedDifference]:
    """Notebook 07's section 4 as one Holm family: the race's loss comparisons (``loss_family``), then the long
    runs' 4 (answer loss after 3,000 steps, seed by seed: each MoE at its fixed rate − its dense twin at each of
    the twin's rates, on the race's first ``len(long.seeds)`` seeds) and DeepSeekMoE at fixed rates after 300 steps
    − width 19 and − fine-grained (loss, on the race's first ``len(dsm.seeds)`` seeds). ``long``, ``dsm``:
    ``helpers.moe_long_run.LongRun``s, ``long`` holding the dense twins and the MoEs (``moe_long_run.combine``)."""
    end = long.marks.index(3000)
    both = {}
    for moe, w in (("MoE", 11), ("MoE, top-2", 19)):
        moe_key = f"{moe}, lr {long.lr[moe]:g}"
        for lr in ("0.04", "0.08"):
            both[f"3,000 steps: {moe_key} − width {w}, lr {lr}"] = paired_difference(
                long.loss[moe_key][end], long.loss[f"dense, width {w}, lr {lr}"][end])
    fixed = {f"300 steps: DeepSeekMoE, {key.split(', ')[-1]} − {arm}":
             paired_difference(loss[-1], race.runs[300][arm].final()[:len(dsm.seeds)])
             for key, loss in dsm.loss.items() for arm in ("dense, width 19", "fine-grained")}
    return {**loss_family(race, pairs), **both, **fixed}


def rerun_lines(race: Race, other: Race, pairs: Sequence[tuple[str, str]], *, loads: bool = False,
                fresh: Race | None = None, changed_only: bool = False,
                extra: dict[str, PairedDifference] | None = None, names: dict[str, str] | None = None
                ) -> list[str]:
    """The same family judged twice: on ``race`` and on ``other`` (the same seeds at the same rates, trained on
    another CPU kernel), mean difference and Holm's verdict side by side; then how many single runs of the arms
    compared ended more than 0.01 nats apart. ``loads``: the family is the late load's comparisons and then the
    loss's (section 5's); ``fresh``: a third column, the family judged on other seeds trained at the same rates;
    ``changed_only``: print only the comparisons whose verdict differs between columns (the full family is
    printed once elsewhere), then the counts; ``extra``: further comparisons judged in every column's Holm family
    (as given: e.g. the rest of a section's family), neither printed nor counted; ``names``: arms' printed names
    (``display``)."""
    def family(r: Race) -> dict[str, PairedDifference]:
        return ({**load_family(r, pairs, names=names), **loss_family(r, pairs, names=names)} if loads
                else loss_family(r, pairs, names=names))

    judged = [holm({**family(r), **(extra or {})}) for r in (race, other) + (() if fresh is None else (fresh,))]
    judged = [[v for v in col if v.name in family(race)] for col in judged]
    width = max(len(v.name) for v in judged[0]) + 2
    labels = [r.environment.get("cpu_capability", "?") + " kernel" for r in (race, other)]
    if fresh is not None:
        seeds = fresh.runs[fresh.budgets[0]][pairs[0][0]].seeds
        labels.append(f"seeds {seeds[0]}–{seeds[-1]}")
    head = f"{'':<{width}}" + "".join(f" |{label + ': mean, verdict':>30}" for label in labels)
    rows = [f"{row[0].name:<{width}}" + "".join(f" |{v.comparison.mean:>+16.3f}  {v.verdict:>12}" for v in row)
            for row in zip(*judged) if not changed_only or len({v.verdict for v in row}) > 1]
    arms = sorted({arm for pair in pairs for arm in pair})
    gaps = torch.cat([(race.runs[s][arm].final() - other.runs[s][arm].final()).abs()
                      for s in race.budgets for arm in arms])
    same = [sum(a.verdict == b.verdict for a, b in zip(judged[0], v)) for v in judged[1:]]
    tail = (f"same verdict in {same[0]} of {len(judged[0])}; single runs more than 0.01 nats apart: "
            f"{int((gaps > 0.01).sum())} of {gaps.numel()}")
    if fresh is not None:
        tail += f"; on the fresh seeds, same verdict in {same[1]} of {len(judged[0])}"
    return [head] + rows + [tail]


def sweep_summary_lines(race: Race, arms: Sequence[str], shared: tuple[str, str] = ("MoE", "dense, width 11")
                        ) -> list[str]:
    """The sweeps in two lines: how many chosen rates sit at an end of the grid (each budget, each of ``arms``),
    and what ``shared[0]`` scored at ``shared[1]``'s best rate of the first budget against its own."""
    first, s = race.budgets[0], race.sweeps[race.budgets[0]]
    ends = sum(race.sweeps[b].best_lr(a) in (race.sweeps[b].lrs[0], race.sweeps[b].lrs[-1])
               for b in race.budgets for a in arms)
    lines = [f"sweeps (seeds {s.seeds[0]}–{s.seeds[-1]}, rates {s.lrs[0]:g} to {s.lrs[-1]:g}, doubling): chosen "
             f"rates at an end of the grid: {ends} of {len(arms) * len(race.budgets)}"]
    arm, other = shared
    at = s.best_lr(other)
    loss, own = s.loss[arm], s.lrs.index(s.best_lr(arm))
    seeds = lambda i: ", ".join(f"{float(v):.3f}" for v in loss[i])
    lines.append(f"one shared rate (sweep seeds): at {at:g}, {other}'s best ({first} steps), {arm} scores "
                 f"{seeds(s.lrs.index(at))} nats by seed (mean {float(loss[s.lrs.index(at)].mean()):.3f}); at its "
                 f"own {s.best_lr(arm):g}, {seeds(own)} (mean {float(loss[own].mean()):.3f})")
    return lines


def convergence_lines(race: Race, arms: Sequence[str]) -> list[str]:
    """Per arm and budget: its rate, the mean answer loss after 4/5 of the run and at its end, the share of the
    loss that last fifth removed, and the facts answered right at the end."""
    width = max(len(a) for a in arms) + 2
    head, rows = f"{'':<{width}}", [f"{arm:<{width}}" for arm in arms]
    for steps in race.budgets:
        first = race.runs[steps][arms[0]].eval_steps[0]
        head += f"  |{'lr':>6}{'loss @' + str(first):>11}{'@' + str(steps):>7}{'last fifth':>11}{'right':>7}"
        for i, arm in enumerate(arms):
            r = race.runs[steps][arm]
            before, end = float(r.final(r.eval_steps[0]).mean()), float(r.final().mean())
            rows[i] += (f"  |{r.lr:>6g}{before:>11.3f}{end:>7.3f}{(end - before) / before:>+11.0%}"
                        f"{float(r.right().mean()):>7.0%}")
    return [head] + rows


# ----------------------------------------------------------------------------- figures
def top1_label(text: str) -> str:
    """Name the race's arms "MoE" and "MoE, top-2" as the prose does, "top-1 MoE" and "top-2 MoE", in a printed
    comparison (other arms untouched)."""
    return re.sub(r"(^|: |− )MoE(?= −|, lr|\)|\s|$)", r"\1top-1 MoE", text).replace("MoE, top-2", "top-2 MoE")


def verdict_figure(verdicts: Sequence[Verdict], unit: str = "nats", seeds: str | None = None,
                   title: str | None = None):
    """One row per paired comparison of a Holm family (``helpers.stats.holm``'s ``Verdict``s, in order): the mean
    difference with the interval mean ± (its Holm threshold × standard error), which excludes 0 exactly when the
    comparison is resolved (filled marker) and contains it when not (open marker). The legend, right of the axes, names only
    the kinds of marker drawn. ``title``, then ``seeds`` (the seed set), make the title."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from helpers.plotting import PALETTE

    fig, ax = plt.subplots(figsize=(9, 0.36 * len(verdicts) + 1.5))
    kinds = {}
    for i, v in enumerate(verdicts):
        c = v.comparison
        half = v.threshold * c.se
        color = {"lower": PALETTE[0], "higher": PALETTE[1]}.get(v.verdict, "#777777")
        ax.errorbar(c.mean, i, xerr=half, fmt="o", color=color, mfc=color if v.resolved else "white", capsize=3)
        key = f"resolved, {v.verdict}" if v.resolved else "not resolved"
        kinds[key] = Line2D([], [], marker="o", ls="", color=color, mfc=color if v.resolved else "white")
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_yticks(range(len(verdicts)), [top1_label(v.name.strip()) for v in verdicts], fontsize=10)
    ax.invert_yaxis()
    ax.set(xlabel=f"mean difference, first arm − second ({unit}); bar: ± Holm threshold × SE (the test's cut-off, not a 95 % interval)",
           title=", ".join(t for t in (title, seeds) if t))
    ax.legend(kinds.values(), kinds.keys(), frameon=False, fontsize=9, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", visible=False)
    fig.tight_layout()
    return fig


def balance_table_lines(race: Race, arms: Sequence[str], names: dict[str, str] | None = None) -> list[str]:
    """Section 5's table: per arm (printed with ``display``), at each budget its rate, mean MaxVio (busiest over mean
    load over the last ``LATE`` steps, minus 1) and mean final loss over the seeds."""
    head = f"{'run':<22}" + "".join(f"{s:>5} steps: lr{'MaxVio':>7}{'loss':>7}" for s in race.budgets)
    rows = [head]
    for name in arms:
        runs = [race.runs[s][name] for s in race.budgets]
        rows.append(f"{display(name, names):<22}" + "".join(
            f"{r.lr:>15g}{float(r.late_load.mean()) - 1:>7.2f}{float(r.final().mean()):>7.3f}" for r in runs))
    return rows


def balancing_figure(runs: Sequence[SeedRuns], colors: Sequence[str], names: dict[str, str] | None = None):
    """Routing over training, one column per run: the first seed's share of the tokens per expert and step
    (experts numbered as in the code), above the busiest expert's load over the mean load (mean over seeds,
    band from the lowest to the highest seed). ``names``: the runs' printed names (``display``)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(2, len(runs), figsize=(3.1 * len(runs), 6.0), squeeze=False, sharey="row",
                             gridspec_kw={"height_ratios": [1.1, 1]}, layout="constrained")
    shares = [r.first_loads.double() / r.first_loads.sum(-1, keepdim=True).double() for r in runs]
    vmax = max(float(s.max()) for s in shares)
    top = max(float(r.max_over_mean.max()) for r in runs)
    for col, (r, share, color) in enumerate(zip(runs, shares, colors)):
        ax = axes[0, col]
        im = ax.imshow(share.T.numpy(), aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=vmax,
                       interpolation="nearest", extent=(0.5, share.shape[0] + 0.5, -0.5, share.shape[1] - 0.5))
        ax.grid(False)
        ax.set_title(f"{display(r.name, names)}\n(seed {r.seeds[0]}, lr {r.lr:g})", fontsize=10)
        ax.set(xlabel="training step", yticks=range(share.shape[1]))
        mom, ax = r.max_over_mean, axes[1, col]
        steps = torch.arange(1, mom.shape[0] + 1).numpy()
        ax.plot(steps, mom.mean(1).numpy(), color=color, lw=1.6)
        ax.fill_between(steps, mom.min(1).values.numpy(), mom.max(1).values.numpy(), color=color, alpha=0.2)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set(ylim=(0.9, top * 1.05), xlabel="training step")
    axes[1, 0].legend([Line2D([], [], color="grey", lw=1.6), Patch(color="grey", alpha=0.2)],
                      [f"mean of {runs[0].max_over_mean.shape[1]} seeds", "lowest to highest seed"],
                      frameon=False, fontsize=8)
    axes[0, 0].set_ylabel("expert index")
    axes[1, 0].set_ylabel("busiest expert's load / mean\n(MaxVio + 1; 1 = even)")
    fig.colorbar(im, ax=axes[0, :].tolist(), shrink=0.9, pad=0.005, aspect=12, label="share of the step's tokens")
    return fig


def bias_figure(run: SeedRuns):
    """Loss-free balancing at work in ``run`` (an arm with ``bias_update``; its first seed's loads kept): each
    expert's load over the mean load per step (left) and its selection bias, replayed from those loads with
    ``helpers.moe.bias_trajectory`` (right), one colour per expert."""
    import matplotlib.pyplot as plt
    from helpers.moe import bias_trajectory

    loads = run.first_loads.double()
    bias = bias_trajectory(run.first_loads, run.spec["bias_update"])
    steps = torch.arange(1, loads.shape[0] + 1).numpy()
    colors = plt.get_cmap("tab10").colors
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.8, 3.6), layout="constrained")
    for e in range(loads.shape[1]):
        left.plot(steps, (loads[:, e] / loads.mean(1)).numpy(), color=colors[e % 10], lw=1.0)
        right.plot(torch.arange(bias.shape[0]).numpy(), bias[:, e].numpy(), color=colors[e % 10], lw=1.4,
                   label=f"expert {e}")
    left.axhline(1.0, color="grey", lw=0.8, ls="--")
    right.axhline(0.0, color="grey", lw=0.8, ls="--")
    left.set(xlabel="training step", ylabel="expert's load / mean load (1 = even)",
             title=f"{run.name}, seed {run.seeds[0]}: load per expert")
    right.set(xlabel="training step", ylabel="selection bias",
              title=f"its bias (γ = {run.spec['bias_update']:g} per step)")
    right.legend(frameon=False, fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))   # outside the lines
    return fig


if __name__ == "__main__":
    raise SystemExit(main())
