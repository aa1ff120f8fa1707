"""What sparsity buys: a small fact-lookup model in which only the FFN is varied, trained over many seeds.

Every fact of ``helpers.facts`` ("the capital of france is paris") is reduced to its two informative
prompt tokens, the subject and the relation, and the model predicts the answer token:

    h      = E[subject] + E[relation]                  (d_model,)  token embeddings, summed
    h      = h + FFN(LayerNorm(h))                      the one FFN (dense, an ``MoE``, or ``NoFFN``)
    logits = U · LayerNorm(h)                           (n_answers,)

The embeddings and the unembedding are trained too, and the LayerNorm before ``U`` is not
linear, so this model can fit every fact even without an FFN (``NoFFN``, the control) when it
is trained long enough. What a fixed, short budget of steps measures is therefore how fast a
model fits its training facts (training-set fit), not how many it can store, and not how well a
language model generalises. Attention is left out so that a run takes a fraction of a second.

A run is built from the course's own pieces: ``torch.manual_seed(seed)``, the FFN (``helpers.ffn.FFN``,
``helpers.moe.MoE`` or ``NoFFN``), ``FactLookup`` around it (``(N, 1)`` ids in, one per fact, ``(N, 1, n_answers)``
logits out), trained by ``helpers.transformer.train_lm`` on every fact at every step (``train_lookup``; an MoE
adds its ``aux_loss`` and moves its selection bias after each step). ``train_arm`` trains one configuration
seed after seed into a ``SeedRuns``.

Notebook 07's arms (``ARMS``, with ``SETTINGS``, over ``SEEDS``: 8 arms × 10 seeds, about half a minute of
CPU) are stored in ``RUNS_PATH`` and read back with ``load_runs``. The file is made by::

    python -m helpers.sparsity --results          # every arm of ARMS, seeds 0-9

(``--seeds``, ``--arms``, ``--steps`` and ``--out`` make a smaller run; the tests make one). The notebook
trains one seed live and checks it against the file.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.facts import RELATIONS, Fact, load_facts
from helpers.ffn import FFN
from helpers.moe import MoE, RoutingLog, moe_aux_loss, update_selection_biases
from helpers.progress import progress as progress_bar
from helpers.transformer import train_lm


@dataclass
class LookupData:
    """Facts as ``(subject, relation)`` token pairs and answer ids.

    Attributes:
        ids: ``(N, 1)`` long, ``subject · n_relations + relation`` with subjects and relations numbered
            in ``subjects`` and ``relations``.
        targets: ``(N, 1)`` long, the answer id.
        subjects, relations: the input vocabularies. answers: the output vocabulary.
        facts: the N facts, in row order.
    """

    ids: torch.Tensor
    targets: torch.Tensor
    subjects: list[str]
    relations: list[str]
    answers: list[str]
    facts: list[Fact]

    @property
    def answer_id(self) -> torch.Tensor:
        """``(N,)`` long: the answer of every row."""
        return self.targets[:, 0]


def lookup_data(facts: Sequence[Fact] | None = None) -> LookupData:
    """Tokenise facts (default: every fact of ``load_facts()``) for ``FactLookup``."""
    facts = list(load_facts() if facts is None else facts)
    if not facts:
        raise ValueError("facts is empty")
    subjects = sorted({f.subject for f in facts})
    relations = [r for r in RELATIONS if any(f.relation == r for f in facts)]
    answers = sorted({f.obj for f in facts})
    s_index = {t: i for i, t in enumerate(subjects)}
    r_index = {t: i for i, t in enumerate(relations)}
    answer_index = {a: i for i, a in enumerate(answers)}
    ids = torch.tensor([[s_index[f.subject] * len(relations) + r_index[f.relation]] for f in facts])
    targets = torch.tensor([[answer_index[f.obj]] for f in facts])
    return LookupData(ids, targets, subjects, relations, answers, facts)


class FactLookup(nn.Module):
    """``(N, 1)`` ids ``subject · n_relations + relation`` -> ``(N, 1, n_answers)`` answer logits.

    Args:
        n_subjects, n_relations: input vocabulary sizes. n_answers: output vocabulary size. d_model: width.
        ffn: the FFN module (``helpers.ffn.FFN``, ``helpers.moe.MoE`` or ``NoFFN``) acting on ``(N, d_model)``.
    """

    def __init__(self, n_subjects: int, n_relations: int, n_answers: int, d_model: int, ffn: nn.Module) -> None:
        super().__init__()
        self.n_subjects = validate.positive_int("n_subjects", n_subjects)
        self.n_relations = validate.positive_int("n_relations", n_relations)
        validate.positive_int("n_answers", n_answers)
        self.d_model = validate.positive_int("d_model", d_model)
        self.embed = nn.Embedding(n_subjects + n_relations, d_model)   # subjects, then relations
        self.ln = nn.LayerNorm(d_model)
        self.ffn = ffn
        self.ln_f = nn.LayerNorm(d_model)
        self.unembed = nn.Linear(d_model, n_answers, bias=False)
        self.ffn_record: object | None = None

    def inputs(self, ids: torch.Tensor) -> torch.Tensor:
        """The residual stream before the FFN, ``E[subject] + E[relation]``: ``(N, 1)`` ids -> ``(N, d_model)``."""
        if ids.dim() != 2 or ids.shape[1] != 1:
            raise ValueError(f"ids must have shape (N, 1), got {tuple(ids.shape)}")
        ids = ids[:, 0]
        return self.embed(ids // self.n_relations) + self.embed(self.n_subjects + ids % self.n_relations)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.inputs(ids)                                         # (N, d)
        out = self.ffn(self.ln(h))
        if isinstance(out, tuple):
            out, self.ffn_record = out
        return self.unembed(self.ln_f(h + out))[:, None]             # (N, 1, n_answers)

    def ffn_records(self) -> list[object]:
        """The FFN's record of the last forward, as a one-layer list (``RoutingLog`` reads it)."""
        return [self.ffn_record]


class NoFFN(nn.Module):
    """The control: an "FFN" without parameters that adds nothing, ``(N, d_model)`` -> zeros of the same shape."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


def make_lookup(data: LookupData, d_model: int, ffn: nn.Module) -> FactLookup:
    """``FactLookup`` sized for ``data`` around ``ffn``."""
    return FactLookup(len(data.subjects), len(data.relations), len(data.answers), d_model, ffn)


@torch.no_grad()
def lookup_loss_and_accuracy(model: FactLookup, data: LookupData) -> tuple[float, float]:
    """Cross-entropy of the answers (nats) and the share answered right, over every fact, in eval mode."""
    model.eval()
    logits = model(data.ids)[:, 0]
    return float(F.cross_entropy(logits, data.answer_id)), float((logits.argmax(-1) == data.answer_id).float().mean())


# ----------------------------------------------------------------------------- one run, one arm
def make_ffn(spec: dict, d_model: int) -> nn.Module:
    """The FFN an arm describes: ``{"ffn": "none"}`` (``NoFFN``), ``{"ffn": "dense", "d_ff": w}`` (a bias-free
    SwiGLU ``FFN`` of width w) or ``{"ffn": "moe", **options}`` (``MoE(d_model, **options)``)."""
    kind, options = spec.get("ffn"), {k: v for k, v in spec.items() if k != "ffn"}
    if kind == "none" and not options:
        return NoFFN()
    if kind == "dense" and set(options) == {"d_ff"}:
        return FFN.from_variant("swiglu", d_model, options["d_ff"], bias=False)
    if kind == "moe":
        return MoE(d_model, **options)
    raise ValueError(f"an arm is {{'ffn': 'none'}}, {{'ffn': 'dense', 'd_ff': w}} or {{'ffn': 'moe', ...}}, got {spec}")


def ffn_params(ffn: nn.Module) -> tuple[int, int]:
    """The FFN's parameters in total (router included) and used per fact (an MoE: its top-k routed experts and
    the shared ones, router left out)."""
    total = sum(p.numel() for p in ffn.parameters())
    if not isinstance(ffn, MoE):
        return total, total
    shared = sum(p.numel() for p in ffn.shared.parameters()) if ffn.shared is not None else 0
    return total, ffn.top_k * sum(p.numel() for p in ffn.experts[0].parameters()) + shared


def train_lookup(model: FactLookup, data: LookupData, *, steps: int, lr: float, progress: bool = False,
                 desc: str = "training") -> tuple[torch.Tensor, torch.Tensor | None]:
    """Train ``model`` with ``helpers.transformer.train_lm`` on every fact at every step (AdamW, no weight decay).

    With an ``MoE`` FFN the loss adds its ``aux_loss`` and, after every step, the selection bias moves
    (``update_selection_biases``; nothing happens unless ``bias_update > 0``). Returns the answer loss of every
    step (``(steps,)`` float64, before that step's update, auxiliary loss left out) and, for an MoE, the routed
    slots per expert at every step (``(steps, E)`` long; ``None`` otherwise).
    """
    log = RoutingLog()

    def after_step(step: int, m: nn.Module, loss: float) -> None:
        log(step, m, loss)
        update_selection_biases(m)

    moe = isinstance(model.ffn, MoE)
    losses = train_lm(model, data.ids, data.targets, steps=steps, lr=lr, extra_loss=moe_aux_loss if moe else None,
                      on_step=after_step if moe else None, progress=progress, desc=desc)
    if not moe:
        return torch.tensor(losses, dtype=torch.float64), None
    return log.lm_loss, log.counts[:, 0]


@dataclass
class SeedRuns:
    """One arm (an FFN configuration) trained with several seeds on the same facts.

    Attributes:
        name: label. seeds: the seeds, in order.
        curves: ``(seeds, steps)`` float64 answer loss per step (``train_lookup``).
        final_loss, final_accuracy: ``(seeds,)`` float64, over every fact after training (eval mode).
        params_total, params_active: FFN parameters in total and used per fact (``ffn_params``).
        loads: ``(steps, seeds, E)`` long, routed slots per expert at every step (an MoE; ``None`` otherwise).
        settings: the arm (``make_ffn``'s spec) under ``"ffn"``, and ``d_model``, ``steps``, ``lr``.
    """

    name: str
    seeds: list[int]
    curves: torch.Tensor
    final_loss: torch.Tensor
    final_accuracy: torch.Tensor
    params_total: int
    params_active: int
    loads: torch.Tensor | None = None
    settings: dict = field(default_factory=dict)

    def mean_sd(self, values: torch.Tensor | None = None) -> tuple[float, float]:
        """Mean and sample standard deviation over seeds (of ``final_loss`` by default)."""
        v = (self.final_loss if values is None else values).double()
        return float(v.mean()), float(v.std()) if v.numel() > 1 else 0.0

    def max_over_mean(self) -> torch.Tensor:
        """``(steps, seeds)`` float64: the busiest expert's load over the mean load, at every step."""
        if self.loads is None:
            raise ValueError(f"{self.name} has no router: only an MoE records loads")
        c = self.loads.double()
        return c.max(-1).values / c.mean(-1)


def train_arm(name: str, spec: dict, data: LookupData, *, seeds: Sequence[int], d_model: int, steps: int,
              lr: float) -> SeedRuns:
    """``FactLookup(ffn=make_ffn(spec))`` trained once per seed, one seed after another: ``torch.manual_seed(seed)``,
    then the FFN, then the model, then ``train_lookup``."""
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must list at least one seed")
    curves, loads, losses, right = [], [], [], []
    for seed in seeds:
        torch.manual_seed(seed)
        ffn = make_ffn(spec, d_model)
        model = make_lookup(data, d_model, ffn)
        curve, load = train_lookup(model, data, steps=steps, lr=lr)
        loss, accuracy = lookup_loss_and_accuracy(model, data)
        curves.append(curve), loads.append(load), losses.append(loss), right.append(accuracy)
    total, active = ffn_params(ffn)
    return SeedRuns(name, seeds, torch.stack(curves), torch.tensor(losses, dtype=torch.float64),
                    torch.tensor(right, dtype=torch.float64), total, active,
                    None if loads[0] is None else torch.stack(loads, 1),
                    {"ffn": dict(spec), "d_model": d_model, "steps": steps, "lr": lr})


# ----------------------------------------------------------------------------- notebook 07's runs, shipped
#: Notebook 07's arms: sections 4 (the first five) and 5 (the MoE of section 4 trained three more ways).
_MOE = {"ffn": "moe", "n_experts": 8, "top_k": 1, "d_ff": 8, "balance_coef": 0.1, "z_coef": 0.0}
ARMS: dict[str, dict] = {
    "no FFN (control)": {"ffn": "none"},
    "dense, equal active": {"ffn": "dense", "d_ff": 8},
    "MoE": _MOE,
    "DeepSeekMoE": {**_MOE, "granularity": 2, "n_shared": 1},
    "dense, equal total": {"ffn": "dense", "d_ff": 64},
    "no balancing": {**_MOE, "balance_coef": 0.0},
    "Switch loss, sigmoid": {**_MOE, "score": "sigmoid"},
    "bias, sigmoid": {**_MOE, "balance_coef": 0.0, "score": "sigmoid", "bias_update": 0.01},
}
SETTINGS: dict = dict(d_model=8, steps=100, lr=2e-2)
SEEDS: tuple[int, ...] = tuple(range(10))
#: Where ``python -m helpers.sparsity --results`` writes the runs and ``load_runs`` reads them.
RUNS_PATH = Path(__file__).parent / "data" / "sparsity_runs.json"
_DIGITS = 5       # losses are stored to 1e-5 nats: far below what another CPU kernel changes


def run_all(arms: Sequence[str] = tuple(ARMS), seeds: Sequence[int] = SEEDS, *, progress: bool = True,
            **overrides) -> dict[str, SeedRuns]:
    """``train_arm`` for each named arm of ``ARMS`` on every fact, with ``SETTINGS`` (``overrides`` replace some)."""
    unknown = set(overrides) - set(SETTINGS)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; known: {sorted(SETTINGS)}")
    data = lookup_data()
    return {name: train_arm(name, ARMS[name], data, seeds=seeds, **{**SETTINGS, **overrides})
            for name in progress_bar(arms, desc="arms", disable=not progress)}


def save_runs(runs: dict[str, SeedRuns], path: str | Path) -> Path:
    """Write ``runs`` as JSON (losses rounded to 1e-5 nats), with each arm's settings and the machine it ran on."""
    def rounded(t: torch.Tensor) -> list:
        return t.round(decimals=_DIGITS).tolist() if t.is_floating_point() else t.tolist()

    record = {
        "made_by": "python -m helpers.sparsity --results",
        "environment": {"torch": torch.__version__, "python": platform.python_version(),
                        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()},
        "runs": {name: {"settings": r.settings, "seeds": r.seeds, "params_total": r.params_total,
                        "params_active": r.params_active, "final_loss": rounded(r.final_loss),
                        "final_accuracy": rounded(r.final_accuracy), "curves": rounded(r.curves),
                        "loads": None if r.loads is None else rounded(r.loads)}
                 for name, r in runs.items()},
    }
    text = json.dumps(record, indent=1)
    # one line per innermost list of numbers (a seed's curve, a step's loads), not one line per number
    text = re.sub(r"\[\s+([-+.\deE]+(?:,\s+[-+.\deE]+)*)\s+\]", lambda m: "[" + re.sub(r",\s+", ",", m[1]) + "]", text)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def load_runs(path: str | Path | None = None) -> dict[str, SeedRuns]:
    """Read runs written by ``save_runs`` (default: notebook 07's, ``RUNS_PATH``)."""
    path = RUNS_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no sparsity runs at {path}; make them with python -m helpers.sparsity --results")
    record = json.loads(path.read_text(encoding="utf-8"))
    return {name: SeedRuns(name, r["seeds"], torch.tensor(r["curves"], dtype=torch.float64),
                           torch.tensor(r["final_loss"], dtype=torch.float64),
                           torch.tensor(r["final_accuracy"], dtype=torch.float64), r["params_total"],
                           r["params_active"], None if r["loads"] is None else torch.tensor(r["loads"]),
                           {**r["settings"], "environment": record["environment"]})
            for name, r in record["runs"].items()}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.sparsity --results``: train notebook 07's arms over its seeds and store the runs."""
    parser = argparse.ArgumentParser(prog="python -m helpers.sparsity", description=main.__doc__)
    parser.add_argument("--results", action="store_true", required=True,
                        help="train every (arm, seed) of notebook 07 and write the runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="default: 0 to 9")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS), metavar="ARM",
                        help="default: the notebook's 8 arms")
    parser.add_argument("--steps", type=int, default=SETTINGS["steps"],
                        help=f"training steps per run (default {SETTINGS['steps']})")
    parser.add_argument("--out", default=str(RUNS_PATH), help=f"default: {RUNS_PATH}")
    args = parser.parse_args(argv)
    runs = run_all(args.arms, args.seeds, steps=args.steps)
    print(f"wrote {len(args.arms)} arms × {len(args.seeds)} seeds to {save_runs(runs, args.out)}")
    return 0


# ----------------------------------------------------------------------------- configurations
def expert_combinations(n_experts: int, top_k: int, granularity: int = 1, n_shared: int = 0) -> int:
    """Sets of routed experts one token can use: ``C(m·N − s, m·k − s)`` (DeepSeekMoE's count)."""
    m = validate.positive_int("granularity", granularity)
    n, k = validate.positive_int("n_experts", n_experts), validate.int_in_range("top_k", top_k, 1, n_experts)
    s = validate.non_negative_int("n_shared", n_shared)
    if s >= m * k:
        raise ValueError(f"n_shared={s} must leave at least one routed choice (at most m·k − 1 = {m * k - 1})")
    return math.comb(m * n - s, m * k - s)


# ----------------------------------------------------------------------------- figures
def curves_figure(runs: Sequence[SeedRuns], colors: Sequence[str] | None = None, title: str = "",
                  styles: Sequence[str] | None = None):
    """Training-loss curves: the mean over seeds as a line, the band from the lowest to the highest seed."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for i, r in enumerate(runs):
        color = None if colors is None else colors[i % len(colors)]
        style = "-" if styles is None else styles[i % len(styles)]
        steps = torch.arange(1, r.curves.shape[1] + 1).numpy()
        line, = ax.plot(steps, r.curves.mean(0).numpy(), color=color, ls=style, lw=1.8,   # first run drawn on top
                        label=f"{r.name} ({r.curves.shape[0]} seeds)", zorder=3 + len(runs) - i)
        ax.fill_between(steps, r.curves.min(0).values.numpy(), r.curves.max(0).values.numpy(),
                        color=line.get_color(), alpha=0.18)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("answer cross-entropy on the training facts\n(nats, log scale)")
    ax.set_title(title)
    ax.legend(frameon=False, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def balancing_figure(runs: Sequence[SeedRuns], seed_index: int = 0, colors: Sequence[str] | None = None):
    """Routing over training, one column per run: one seed's share of the tokens per expert and step
    (experts numbered as in the code, 0 to E − 1), above the busiest expert's load over the mean load
    (mean over seeds, band from the lowest to the highest seed)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(runs), figsize=(3.3 * len(runs), 6.2), squeeze=False, sharey="row",
                             gridspec_kw={"height_ratios": [1.1, 1]}, layout="constrained")
    shares = [r.loads[:, seed_index].double() / r.loads[:, seed_index].sum(-1, keepdim=True).double()
              for r in runs]
    vmax = max(float(s.max()) for s in shares)
    top = max(float(r.max_over_mean().max()) for r in runs)
    for col, (r, share) in enumerate(zip(runs, shares)):
        ax = axes[0, col]
        im = ax.imshow(share.T.numpy(), aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=vmax,
                       interpolation="nearest", extent=(0.5, share.shape[0] + 0.5, -0.5, share.shape[1] - 0.5))
        ax.grid(False)
        ax.set_title(f"{r.name}\n(seed {r.seeds[seed_index]})", fontsize=10)
        ax.set_xlabel("training step")
        ax.set_yticks(range(share.shape[1]))
        if col == 0:
            ax.set_ylabel("expert index")
        mom = r.max_over_mean()
        ax = axes[1, col]
        color = None if colors is None else colors[col % len(colors)]
        steps = torch.arange(1, mom.shape[0] + 1).numpy()
        line, = ax.plot(steps, mom.mean(1).numpy(), color=color, lw=1.6, label=f"mean of {mom.shape[1]} seeds")
        ax.fill_between(steps, mom.min(1).values.numpy(), mom.max(1).values.numpy(), color=line.get_color(),
                        alpha=0.2, label="lowest to highest seed")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_ylim(0.9, top * 1.05)
        ax.set_xlabel("training step")
        if col == 0:
            ax.set_ylabel("busiest expert's load / mean load\n(1 = even)")
            ax.legend(frameon=False, fontsize=8)
    fig.colorbar(im, ax=axes[0, :].tolist(), shrink=0.9, label="share of the step's tokens")
    return fig


def configuration_figure(d_model: int, n_experts: int, top_k: int, d_ff: int, granularity: int, n_shared: int,
                         granularities: Sequence[int] = (1, 2, 4, 8, 16)):
    """DeepSeekMoE's knobs on one layer: sets of routed experts per token against the granularity m (left), and
    parameters and FLOPs per token at the chosen ``(m, s)`` relative to the plain layer (right)."""
    import matplotlib.pyplot as plt

    from helpers.moe import moe_layer_cost

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.1, 1]})
    shown = sorted({*granularities, granularity})
    for s, style in ((0, "-"), (n_shared, "--")) if n_shared else ((0, "-"),):
        ms = [m for m in shown if s < m * top_k and d_ff % m == 0]
        left.plot(ms, [expert_combinations(n_experts, top_k, m, s) for m in ms], style, marker="o",
                  color="#0072B2" if s == 0 else "#D55E00", label=f"s = {s} shared")
    chosen_sets = expert_combinations(n_experts, top_k, granularity, n_shared)
    left.plot([granularity], [chosen_sets], "o", ms=13, mfc="none", mec="black",
              label=f"m = {granularity}, s = {n_shared}: {chosen_sets:,} sets" if chosen_sets < 10**7
              else f"m = {granularity}, s = {n_shared}: {chosen_sets:.1e} sets")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xticks(shown, [str(m) for m in shown])
    left.set_xlabel("granularity m (each expert cut into m)")
    left.set_ylabel("sets of routed experts per token")
    left.set_title(f"N = {n_experts} experts of width {d_ff}, top-{top_k}: choices grow with m")
    left.legend(frameon=False, fontsize=9)
    base = moe_layer_cost(d_model, n_experts, top_k, d_ff)
    chosen = moe_layer_cost(d_model, n_experts, top_k, d_ff, granularity=granularity, n_shared=n_shared)
    rows = [("total parameters", base.total_params, chosen.total_params),
            ("active parameters", base.active_params, chosen.active_params),
            ("FLOPs per token", base.flops_per_token, chosen.flops_per_token)]
    ys = list(range(len(rows)))[::-1]
    ratios = [b / a for _, a, b in rows]
    right.barh(ys, ratios, color="#009E73", height=0.55)
    right.axvline(1.0, color="grey", ls="--", lw=1)
    for y, (label, a, b), r in zip(ys, rows, ratios):
        right.text(0.03, y, f"{a:,} → {b:,}  ({r:.3f}×)", va="center", ha="left", color="white", fontsize=9.5)
    right.set_yticks(ys, [label for label, _, _ in rows])
    right.set_xlim(0, max(1.25, 1.1 * max(ratios)))
    right.set_xlabel("relative to the plain layer (m = 1, s = 0)")
    right.set_title(f"m = {granularity}, s = {n_shared}: only the router grows")
    right.grid(axis="y", visible=False)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    raise SystemExit(main())
