r"""What a wider FFN buys: memorising random key -> value pairs at several hidden widths.

Notebook 02's quality-vs-width measurement. A table of ``n_facts`` random pairs
``(k_n, v_n)``, both ``N(0, 1)`` vectors of width ``d_model``, is stored in one
``helpers.ffn.FFN`` by training ``FFN(k_n) ≈ v_n`` (mean squared error, full batch, Adam,
the same number of steps for every width). After training we report, per FFN:

* ``error``: the mean squared error divided by the mean square of the values, i.e. the
  fraction of the values' variance the FFN fails to reproduce (1 for an FFN that outputs 0);
* ``recall``: the fraction of keys whose output is closer (Euclidean) to their own value than
  to any other value in the table.

Each width is trained from several seeds (a seed fixes the table and the FFN's initialisation),
so the spread across seeds can be compared with the gaps between widths; the trained FFNs are
kept (``WidthSweep.ffns``) so that a notebook can look inside them. The FFNs of one width
are trained together as one batched computation (``torch.baddbmm``) for speed; this is the same
arithmetic as training each ``FFN`` on its own (``tests/test_width.py`` checks it) and the
trained weights are copied back into ordinary ``FFN`` modules, which the scores are computed with.

Is what width buys *room* or only faster training? ``learning_curves`` scores the same FFNs after
every checkpoint of a long run (several widths and learning rates); such a run is too slow for a
notebook, so ``python -m helpers.width --curves`` stores one in ``helpers/data/width_curves.json``
(``load_curves`` reads it) and notebook 02 recomputes one seed of it live. Full-batch Adam on this task
amplifies rounding: the same seed trained with another CPU kernel (``ATEN_CPU_CAPABILITY``), even in
float64, ends with errors that differ in the third digit and verdicts' t statistics a few per cent apart. So
the same command also stores the ten 8d FFNs that notebook 02 inspects (``load_ffns``), and the notebook's
verdicts are computed from stored runs, which read the same on every machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from helpers import validate
from helpers.ffn import FFN
from helpers.progress import progress as progress_bar


def random_facts(n_facts: int, d_model: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A table of random pairs: ``(keys, values)``, each ``(n_facts, d_model)`` from ``N(0, 1)``, seeded."""
    validate.positive_int("n_facts", n_facts)
    validate.positive_int("d_model", d_model)
    validate.non_negative_int("seed", seed)
    gen = torch.Generator().manual_seed(10_000 + seed)
    keys = torch.randn(n_facts, d_model, generator=gen)
    values = torch.randn(n_facts, d_model, generator=gen)
    return keys, values


def init_ffn(d_model: int, d_ff: int, seed: int) -> FFN:
    """``FFN(d_model, d_ff)`` (exact GELU, biases) initialised from ``torch.manual_seed(seed)``; global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return FFN(d_model, d_ff)


def _score_outputs(out: torch.Tensor, values: torch.Tensor) -> tuple[float, float]:
    """``(error, recall)`` of outputs ``(n, d_model)`` against the table's values ``(n, d_model)``."""
    error = ((out - values) ** 2).mean() / (values ** 2).mean()
    nearest = torch.cdist(out, values).argmin(dim=1)
    recall = (nearest == torch.arange(len(values))).float().mean()
    return error.item(), recall.item()


def score(ffn: FFN, keys: torch.Tensor, values: torch.Tensor) -> tuple[float, float]:
    """``(error, recall)`` of ``ffn`` on a table (see the module docstring); keys, values ``(n, d_model)``."""
    with torch.no_grad():
        return _score_outputs(ffn(keys), values)


def train_together(ffns: Sequence[FFN], keys: torch.Tensor, values: torch.Tensor, *, steps: int,
                   lr: float, checkpoints: Sequence[int] = ()) -> dict[int, list[tuple[float, float]]]:
    """Train FFNs of one shape, FFN ``s`` on table ``s``, in place: full-batch Adam on the mean squared error.

    Args:
        ffns: ``S`` dense FFNs with biases, all ``(d_model, d_ff)`` alike.
        keys, values: ``(S, n_facts, d_model)``, one table per FFN.
        steps: Adam steps; lr: its learning rate.
        checkpoints: step counts (each in ``1..steps``) after which every FFN is scored on its table.

    Returns ``{step: [(error, recall) of FFN s, ...]}`` for each checkpoint (empty without checkpoints).
    The loss summed over the ``S`` FFNs has independent parts, so each FFN gets exactly the
    gradient (and, Adam being elementwise, the update) it would get if trained alone.
    """
    validate.positive_int("steps", steps)
    validate.positive_float("lr", lr)
    if keys.shape[0] != len(ffns) or values.shape != keys.shape:
        raise ValueError(f"keys and values must be (S={len(ffns)}, n_facts, d_model), got {tuple(keys.shape)} "
                         f"and {tuple(values.shape)}")
    wanted = {validate.positive_int("checkpoint", c) for c in checkpoints}
    if wanted and max(wanted) > steps:
        raise ValueError(f"checkpoints must lie in 1..steps={steps}, got {sorted(wanted)}")
    with torch.no_grad():
        W1 = torch.stack([f.w1.weight for f in ffns]).clone()                 # (S, d_ff, d)
        b1 = torch.stack([f.w1.bias for f in ffns]).unsqueeze(1).clone()      # (S, 1, d_ff)
        W2 = torch.stack([f.w2.weight for f in ffns]).clone()                 # (S, d, d_ff)
        b2 = torch.stack([f.w2.bias for f in ffns]).unsqueeze(1).clone()      # (S, 1, d)
    params = [p.requires_grad_() for p in (W1, b1, W2, b2)]
    opt = torch.optim.Adam(params, lr=lr)

    def forward() -> torch.Tensor:
        hidden = F.gelu(torch.baddbmm(b1, keys, W1.transpose(1, 2)))         # (S, n, d_ff)
        return torch.baddbmm(b2, hidden, W2.transpose(1, 2))                  # (S, n, d)

    scores: dict[int, list[tuple[float, float]]] = {}
    with torch.enable_grad():
        for step in range(1, steps + 1):
            loss = ((forward() - values) ** 2).mean(dim=(1, 2)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step in wanted:
                with torch.no_grad():
                    scores[step] = [_score_outputs(out, v) for out, v in zip(forward(), values)]
    with torch.no_grad():
        for s, f in enumerate(ffns):
            f.w1.weight.copy_(W1[s])
            f.w1.bias.copy_(b1[s, 0])
            f.w2.weight.copy_(W2[s])
            f.w2.bias.copy_(b2[s, 0])
    return scores


@dataclass
class WidthSweep:
    """Scores per hidden width and seed; ``error[d_ff][i]``, ``recall[d_ff][i]`` and the trained ``ffns[d_ff][i]``
    belong to ``seeds[i]``, whose table is ``random_facts(n_facts, d_model, seeds[i])``."""

    d_model: int
    n_facts: int
    steps: int
    lr: float
    seeds: list[int]
    error: dict[int, list[float]] = field(default_factory=dict)
    recall: dict[int, list[float]] = field(default_factory=dict)
    params: dict[int, int] = field(default_factory=dict)
    ffns: dict[int, list[FFN]] = field(default_factory=dict, repr=False)

    @property
    def targets(self) -> int:
        """How many numbers the table asks an FFN to store: ``n_facts * d_model`` (every value's entries)."""
        return self.n_facts * self.d_model

    @property
    def widths(self) -> list[int]:
        return sorted(self.error)

    def mean(self, what: str, d_ff: int) -> float:
        """Mean over seeds of ``"error"`` or ``"recall"`` at width ``d_ff``."""
        return statistics.fmean(getattr(self, validate.one_of("what", what, ("error", "recall")))[d_ff])


def memorisation_sweep(widths: Sequence[int], *, d_model: int = 16, n_facts: int = 256, seeds: Sequence[int] = (0, 1, 2),
                       steps: int = 150, lr: float = 1e-2, progress: bool = True) -> WidthSweep:
    """Train an FFN of every width in ``widths`` from every seed on a table of random facts; score each.

    Seed ``s`` fixes the table (``random_facts(n_facts, d_model, s)``) and the FFN's
    initialisation (``init_ffn(d_model, d_ff, s)``), so every width sees the same tables.
    Returns a ``WidthSweep``; shows a progress bar over the widths unless ``progress=False``.
    """
    validate.positive_int("d_model", d_model)
    seeds = [validate.non_negative_int("seed", s) for s in seeds]
    if not seeds or not widths:
        raise ValueError(f"widths and seeds must be non-empty, got widths={list(widths)}, seeds={seeds}")
    tables = [random_facts(n_facts, d_model, s) for s in seeds]
    keys = torch.stack([k for k, _ in tables])
    values = torch.stack([v for _, v in tables])
    sweep = WidthSweep(d_model, n_facts, steps, lr, seeds)
    for d_ff in progress_bar(list(widths), desc="training FFNs", disable=not progress):
        ffns = [init_ffn(d_model, validate.positive_int("d_ff", d_ff), s) for s in seeds]
        train_together(ffns, keys, values, steps=steps, lr=lr)
        scores = [score(f, k, v) for f, (k, v) in zip(ffns, tables)]
        sweep.error[d_ff] = [e for e, _ in scores]
        sweep.recall[d_ff] = [r for _, r in scores]
        sweep.params[d_ff] = ffns[0].param_count()
        sweep.ffns[d_ff] = [f.eval() for f in ffns]
    return sweep


#: the stored learning curves of notebook 02 (``python -m helpers.width --curves``)
CURVES_PATH = Path(__file__).parent / "data" / "width_curves.json"
#: the stored 8d FFNs notebook 02 inspects in section 10 (written by the same command)
FFNS_PATH = Path(__file__).parent / "data" / "width_ffns_8d.pt"
#: what the stored run trains: (d_ff, lr) arms on the notebook's tables (d_model 16, 256 facts), 10 seeds
CURVE_ARMS = ((16, 1e-2), (32, 1e-2), (64, 1e-2), (128, 1e-2), (256, 1e-2), (64, 3e-3), (64, 3e-2))
CURVE_CHECKPOINTS = (75, 150, 300, 600, 1200, 2400, 4800, 9600)
CURVE_SEEDS = tuple(range(10))
_DIGITS = 5  # stored scores are rounded to 1e-5: float32 training moves later digits from one CPU to another


@dataclass
class WidthCurves:
    """Error left and facts recalled after every checkpoint, per ``(d_ff, lr)`` arm and seed.

    ``error[(d_ff, lr)]`` and ``recall[(d_ff, lr)]`` are ``(len(checkpoints), len(seeds))`` float64 tensors;
    seed ``seeds[i]`` trained on ``random_facts(n_facts, d_model, seeds[i])`` from ``init_ffn(d_model, d_ff,
    seeds[i])``, like ``memorisation_sweep``.
    """

    d_model: int
    n_facts: int
    seeds: list[int]
    checkpoints: list[int]
    error: dict[tuple[int, float], torch.Tensor]
    recall: dict[tuple[int, float], torch.Tensor]
    environment: dict = field(default_factory=dict)

    @property
    def arms(self) -> list[tuple[int, float]]:
        return list(self.error)

    def at(self, d_ff: int, step: int, lr: float = 1e-2, what: str = "error") -> list[float]:
        """One value per seed: ``what`` (``"error"`` or ``"recall"``) of arm ``(d_ff, lr)`` after ``step`` steps."""
        table = getattr(self, validate.one_of("what", what, ("error", "recall")))
        if (d_ff, lr) not in table:
            raise ValueError(f"(d_ff, lr) must be one of the arms {self.arms}, got {(d_ff, lr)!r}")
        if step not in self.checkpoints:
            raise ValueError(f"step must be one of the checkpoints {self.checkpoints}, got {step!r}")
        return table[(d_ff, lr)][self.checkpoints.index(step)].tolist()


def learning_curves(arms: Sequence[tuple[int, float]] = CURVE_ARMS, *, checkpoints: Sequence[int] = CURVE_CHECKPOINTS,
                    seeds: Sequence[int] = CURVE_SEEDS, d_model: int = 16, n_facts: int = 256,
                    progress: bool = True) -> WidthCurves:
    """Train every ``(d_ff, lr)`` arm from every seed for ``max(checkpoints)`` steps, scoring at each checkpoint."""
    seeds = [validate.non_negative_int("seed", s) for s in seeds]
    checkpoints = sorted({validate.positive_int("checkpoint", c) for c in checkpoints})
    if not seeds or not arms or not checkpoints:
        raise ValueError(f"arms, checkpoints and seeds must be non-empty, got {list(arms)}, {checkpoints}, {seeds}")
    tables = [random_facts(n_facts, d_model, s) for s in seeds]
    keys = torch.stack([k for k, _ in tables])
    values = torch.stack([v for _, v in tables])
    error, recall = {}, {}
    for d_ff, lr in progress_bar(list(arms), desc="learning curves", disable=not progress):
        ffns = [init_ffn(d_model, validate.positive_int("d_ff", d_ff), s) for s in seeds]
        scores = train_together(ffns, keys, values, steps=checkpoints[-1], lr=lr, checkpoints=checkpoints)
        error[(d_ff, lr)] = torch.tensor([[e for e, _ in scores[c]] for c in checkpoints], dtype=torch.float64)
        recall[(d_ff, lr)] = torch.tensor([[r for _, r in scores[c]] for c in checkpoints], dtype=torch.float64)
    return WidthCurves(d_model, n_facts, seeds, checkpoints, error, recall)


def save_curves(curves: WidthCurves, path: str | Path = CURVES_PATH) -> Path:
    """Write ``curves`` as JSON (scores rounded to 1e-5), with the settings and the machine it ran on."""
    path = Path(path)
    record = {
        "made_by": "python -m helpers.width --curves",
        "d_model": curves.d_model, "n_facts": curves.n_facts, "seeds": curves.seeds,
        "checkpoints": curves.checkpoints, "optimizer": "Adam, full batch, mean squared error",
        "environment": {"torch": torch.__version__, "python": platform.python_version(),
                        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()},
        "arms": [{"d_ff": d_ff, "lr": lr,
                  "error": [[round(float(x), _DIGITS) for x in row] for row in curves.error[(d_ff, lr)].tolist()],
                  "recall": [[round(float(x), _DIGITS) for x in row] for row in curves.recall[(d_ff, lr)].tolist()]}
                 for d_ff, lr in curves.arms],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def load_curves(path: str | Path | None = None) -> WidthCurves:
    """Read curves written by ``save_curves`` (default: notebook 02's, ``CURVES_PATH``)."""
    path = CURVES_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no learning curves at {path}; make them with python -m helpers.width --curves")
    record = json.loads(path.read_text(encoding="utf-8"))
    error = {(a["d_ff"], a["lr"]): torch.tensor(a["error"], dtype=torch.float64) for a in record["arms"]}
    recall = {(a["d_ff"], a["lr"]): torch.tensor(a["recall"], dtype=torch.float64) for a in record["arms"]}
    return WidthCurves(record["d_model"], record["n_facts"], record["seeds"], record["checkpoints"], error, recall,
                       record["environment"])


def width_curves_figure(curves: WidthCurves, selected: int, *, lr: float = 1e-2):
    """Two panels for the expansion ``selected`` (``d_ff = selected · d_model``): what it costs, what it buys.

    Left: parameters of the FFN at every stored width (counted by the formula) against the numbers the table
    asks it to store, ``selected`` marked. Right: error left against training steps (log-log), the mean over seeds
    of every width at ``lr`` (the selected one bold, with one thin line per seed), and the selected width at the
    other stored learning rates (dashed). Returns the figure (not shown).
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator

    from helpers.ffn import ffn_param_count

    d = curves.d_model
    widths = sorted({w for w, r in curves.arms if r == lr})
    if selected * d not in widths:
        raise ValueError(f"selected must be one of the expansions {[w // d for w in widths]}, got {selected!r}")
    w_sel, steps = selected * d, curves.checkpoints
    targets = curves.n_facts * d
    fig, (ax_c, ax_q) = plt.subplots(1, 2, figsize=(12, 4.3), gridspec_kw={"width_ratios": [1, 1.3]})
    expansions = [w // d for w in widths]
    ax_c.plot(expansions, [ffn_param_count(d, w) for w in widths], "s-", color="#0072B2", ms=7, lw=2,
              label="parameters of the FFN")
    ax_c.axhline(targets, color="#D55E00", ls=":", lw=2, label=f"numbers to store ({curves.n_facts} facts × {d})")
    ax_c.axvline(selected, color="0.3", ls=":", lw=1.5)
    n_sel = ffn_param_count(d, w_sel)
    ax_c.annotate(f"{n_sel:,} {'>' if n_sel > targets else '<'} {targets:,}", (selected, n_sel), xytext=(8, -14),
                  textcoords="offset points", fontsize=9, color="#0072B2")
    ax_c.set_xscale("log", base=2)
    ax_c.set_yscale("log", base=2)
    ax_c.set_xticks(expansions, [f"{e}d" for e in expansions])
    ax_c.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    for axis in (ax_c.xaxis, ax_c.yaxis):
        axis.set_minor_formatter(lambda v, _: "")  # no mathtext tick labels: keeps a redraw fast
    ax_c.set(xlabel="hidden width d_ff", ylabel="count (log scale)", title=f"What it costs (d = {d})")
    ax_c.legend(fontsize=9, loc="upper left")

    colors = dict(zip(widths, ["#CC79A7", "#D55E00", "#0072B2", "#009E73", "#E69F00", "#56B4E9"]))
    for w in widths:
        mean = curves.error[(w, lr)].mean(dim=1)
        ax_q.plot(steps, mean, "-", color=colors[w], lw=3 if w == w_sel else 1.2, alpha=1 if w == w_sel else 0.5,
                  label=f"{w // d}d (mean of {len(curves.seeds)} seeds)")
    ax_q.plot(steps, curves.error[(w_sel, lr)], "-", color=colors[w_sel], lw=1.0, alpha=0.8)
    others = sorted(r for w, r in curves.arms if w == w_sel and r != lr)
    for r, dash in zip(others, ["--", ":", "-."]):
        ax_q.plot(steps, curves.error[(w_sel, r)].mean(dim=1), dash, color=colors[w_sel], lw=2,
                  label=f"{selected}d at lr {r:g}")
    ax_q.set_xscale("log", base=2)
    ax_q.set_yscale("log")
    ax_q.set_xticks(steps, [f"{s:,}" for s in steps])
    ax_q.xaxis.set_minor_formatter(lambda v, _: "")
    ax_q.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    ax_q.yaxis.set_major_formatter(lambda v, _: f"{v:g}")
    ax_q.yaxis.set_minor_formatter(lambda v, _: "")
    ax_q.set(xlabel="Adam steps (full batch)", ylabel="error left (log scale)",
             title=f"What it buys: error left while training (lr {lr:g} unless marked)")
    ax_q.legend(fontsize=9, loc="lower left")
    last = curves.error[(w_sel, lr)][-1].mean().item()
    fig.suptitle(f"d_ff = {selected}d: {ffn_param_count(d, w_sel):,} parameters for {targets:,} numbers to store; "
                 f"error left after {steps[-1]:,} steps {last:.3f}", fontsize=11)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.13, top=0.85, wspace=0.25)  # fixed: faster than tight_layout
    return fig


def save_ffns(sweep: WidthSweep, d_ff: int, path: str | Path = FFNS_PATH) -> Path:
    """Store the trained FFNs of width ``d_ff`` of ``sweep`` (one per seed) with the settings that made them."""
    if d_ff not in sweep.ffns:
        raise ValueError(f"d_ff must be one of the sweep's widths {sweep.widths}, got {d_ff!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"made_by": "python -m helpers.width --curves", "d_model": sweep.d_model, "d_ff": d_ff,
                "n_facts": sweep.n_facts, "steps": sweep.steps, "lr": sweep.lr, "seeds": list(sweep.seeds),
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "state_dicts": [f.state_dict() for f in sweep.ffns[d_ff]]}, path)
    return path


def load_ffns(path: str | Path | None = None) -> tuple[list[FFN], list[int]]:
    """``(ffns, seeds)`` stored by ``save_ffns`` (default: notebook 02's 8d FFNs, ``FFNS_PATH``); FFN ``i`` was
    trained on ``random_facts(n_facts, d_model, seeds[i])``."""
    path = FFNS_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no stored FFNs at {path}; make them with python -m helpers.width --curves")
    record = torch.load(path, weights_only=True)
    ffns = []
    for state in record["state_dicts"]:
        ffn = FFN(record["d_model"], record["d_ff"])
        ffn.load_state_dict(state)
        ffns.append(ffn.eval())
    return ffns, list(record["seeds"])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.width --curves``: train notebook 02's learning curves and its 8d FFNs, and store them."""
    parser = argparse.ArgumentParser(prog="python -m helpers.width", description=main.__doc__)
    parser.add_argument("--curves", action="store_true", required=True,
                        help="train every (d_ff, lr) arm from every seed and write the scores at each checkpoint; "
                             "then train the 8d FFNs for 150 steps and store them")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(CURVE_SEEDS), help="default: 0 to 9")
    parser.add_argument("--checkpoints", type=int, nargs="+", default=list(CURVE_CHECKPOINTS))
    parser.add_argument("--out", default=str(CURVES_PATH), help=f"default: {CURVES_PATH}")
    parser.add_argument("--ffns-out", default=str(FFNS_PATH), help=f"default: {FFNS_PATH}")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    curves = learning_curves(CURVE_ARMS, checkpoints=args.checkpoints, seeds=args.seeds)
    print(f"wrote {len(curves.arms)} arms × {len(curves.seeds)} seeds to {save_curves(curves, args.out)}")
    sweep = memorisation_sweep([128], d_model=16, n_facts=256, seeds=args.seeds, steps=150, lr=1e-2, progress=False)
    print(f"wrote the 8d FFNs of {len(sweep.seeds)} seeds to {save_ffns(sweep, 128, args.ffns_out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
