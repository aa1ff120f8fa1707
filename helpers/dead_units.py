r"""Dead and silent hidden units: when a unit of an FFN stops learning for good, and how to tell.

A hidden unit ``i`` of ``FFN(x) = W2 φ(W1 x + b1) + b2`` has the pre-activation ``h_i = w_i · x + b_i`` (``w_i`` is
row ``i`` of ``W1``). Its weights receive the gradient ``Σ_n δ_ni φ'(h_ni) x_n``: if ``φ'(h_ni) = 0`` on every
example ``n``, they receive exactly nothing. For ReLU that happens as soon as ``h_ni ≤ 0`` on every example: the
unit is **dead** (on that data). A unit that is ``≤ 0`` on *some* examples only is **silent** there and alive:
it learns from the others. GELU and SiLU have no flat side, so a unit is stuck only far out in their tails.

Notebook 01's experiments run on one small problem (``experiment_data``: 256 examples, ``d = 16``, a fixed
non-linear target) with the course's ``FFN(16, 256)`` trained by full-batch SGD (``sgd``):

* ``stuck_fraction``: the share of units whose slope ``|φ'(h)|`` is below ``1e-3`` on every example (for ReLU
  exactly the dead ones); ``dead_units`` and ``negative_everywhere`` count ``h ≤ 0`` / ``h < 0`` everywhere;
* ``last_layer_lr_limit``: the learning rate above which SGD on the last layer alone diverges at the current
  weights, ``2 / λ_max`` of that layer's curvature (the whole network's limit is no higher); ``centred=True``
  removes each unit's mean first, a control for how much of ``λ_max`` the shared positive mean makes;
* ``shove_below_zero_``: lowers each unit's bias until it is ``≤ -margin`` on every example (the "same shove"
  control); ``shoved_run`` shoves a freshly seeded ``FFN`` and trains it, returning what section 6 prints
  (``shove_table`` prints it);
  ``deep_shove_study`` runs its deep arm (GELU and SiLU shoved to ``-3``) over five seeds, too slow to run live:
  ``python -m helpers.dead_units --deep-shove`` stores it in ``helpers/data/deep_shove.json`` (``load_deep_shove``);
  ``escape_study`` trains GELU's deep arm far longer, to time how slowly plain SGD brings it back
  (``python -m helpers.dead_units --escape``, stored in ``helpers/data/gelu_escape.json``, ``load_escape``);
* ``firing_rates``: on what share of the examples each unit is on (``h > 0``): ``0`` for a dead unit;
  ``plot_firing_rates`` draws them as a histogram with the dead units as a separate bar left of 0.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from helpers import validate
from helpers.activations import get_activation, slope
from helpers.ffn import FFN

__all__ = ["experiment_data", "sgd", "adam", "pre_activations", "dead_units", "stuck_fraction", "flat_fraction", "negative_everywhere",
           "firing_rates", "plot_firing_rates", "last_layer_lr_limit", "shove_below_zero_", "ShovedRun", "shoved_run",
           "deep_shove_study", "save_deep_shove", "load_deep_shove", "DEEP_SHOVE_PATH", "ADAM_SHOVE_PATH",
           "escape_step", "escape_study", "load_escape", "ESCAPE_PATH", "recheck_stored"]


def experiment_data(seed: int = 1, n: int = 256, d: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Notebook 01's regression data: ``X (n, d)`` standard normal, ``Y = sin(2 X T) (n, d)`` for a fixed random
    ``T (d, d)`` with entries of size 1/4, both float32 and drawn from a generator seeded with ``seed``."""
    validate.non_negative_int("seed", seed)
    validate.positive_int("n", n)
    validate.positive_int("d", d)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen)
    teacher = torch.randn(d, d, generator=gen) / 4
    return x, torch.sin(2 * x @ teacher)


def _check_data(model: FFN, x: torch.Tensor, y: torch.Tensor | None = None) -> None:
    if not isinstance(model, FFN):
        raise TypeError(f"model must be a helpers.ffn.FFN, got {type(model).__name__}")
    validate.float_tensor("x", x, last_dim=model.d_model)
    if x.dim() != 2:
        raise ValueError(f"x must be (N, d_model), got shape {tuple(x.shape)}")
    if y is not None:
        validate.float_tensor("y", y, last_dim=model.d_model)
        if y.shape != x.shape:
            raise ValueError(f"y must have the shape of x, {tuple(x.shape)}, got {tuple(y.shape)}")


def sgd(model: FFN, x: torch.Tensor, y: torch.Tensor, lr: float, steps: int, warmup: int = 0,
        final: bool = False) -> list[float]:
    """Train ``model`` in place: ``steps`` full-batch SGD steps at ``lr`` (``torch.optim.SGD``, no momentum) on
    ``F.mse_loss(model(x), y)``; ``x, y`` are ``(N, d_model)``. With ``warmup = W > 0``, ``W`` steps whose learning
    rate rises linearly to ``lr`` (``lr · k / W`` at step ``k = 1 … W``) come first. Returns the loss before each
    step (``W + steps`` values), and with ``final=True`` also the loss after the last step (one more value)."""
    _check_data(model, x, y)
    validate.positive_float("lr", lr)
    validate.non_negative_int("steps", steps)
    validate.non_negative_int("warmup", warmup)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    with torch.enable_grad():
        for k in range(warmup + steps):
            opt.param_groups[0]["lr"] = lr * min(1.0, (k + 1) / warmup) if warmup else lr
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    if final:
        with torch.no_grad():
            losses.append(F.mse_loss(model(x), y).item())
    return losses


def adam(model: FFN, x: torch.Tensor, y: torch.Tensor, lr: float, steps: int) -> list[float]:
    """Like ``sgd`` without warm-up, but ``steps`` full-batch ``torch.optim.Adam`` steps (default betas) at ``lr``.
    Returns the loss before each step."""
    _check_data(model, x, y)
    validate.positive_float("lr", lr)
    validate.non_negative_int("steps", steps)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    losses = []
    with torch.enable_grad():
        for _ in range(steps):
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


def pre_activations(model: FFN, x: torch.Tensor) -> torch.Tensor:
    """``h = W1 x + b1`` for every example: ``(N, d_model) -> (N, d_ff)``, without autograd. Raises ``ValueError``
    when an entry is NaN or infinite (a diverged network): every count below would silently call it "alive"."""
    _check_data(model, x)
    with torch.no_grad():
        h = model.w1(x)
    if not torch.isfinite(h).all():
        raise ValueError("the model's pre-activations on x are not all finite (NaN or inf): its weights diverged, "
                         "so no unit can be called dead, stuck or alive; train it at a smaller learning rate")
    return h


def dead_units(model: FFN, x: torch.Tensor) -> torch.Tensor:
    """``(d_ff,)`` bool: the units whose pre-activation is ``≤ 0`` on every example of ``x`` (dead under ReLU)."""
    return (pre_activations(model, x) <= 0).all(dim=0)


def stuck_fraction(model: FFN, activation: str, x: torch.Tensor, tol: float = 1e-3) -> float:
    """Share of hidden units whose slope ``|φ'(h)|`` is below ``tol`` on every example of ``x`` (``(N, d_model)``).

    ``activation`` names ``φ`` (``helpers.activations``). For ReLU (slope 0 at ``h = 0`` in PyTorch) a unit is
    stuck exactly when it is dead; GELU and SiLU units are stuck only deep in their tails (or in the narrow band
    where the slope crosses zero)."""
    validate.positive_float("tol", tol)
    h = pre_activations(model, x)
    return (slope(get_activation(activation), h).abs() < tol).all(dim=0).double().mean().item()


def flat_fraction(model: FFN, activation: str, x: torch.Tensor, tol: float = 1e-3) -> float:
    """The same number as ``stuck_fraction`` under the name notebook 01 gives its rule: a unit is *flat* when
    ``|φ'(h)| < tol`` on every example of ``x``; whether a flat (or nearly flat) unit is stuck depends on training."""
    return stuck_fraction(model, activation, x, tol)


def negative_everywhere(model: FFN, x: torch.Tensor) -> float:
    """Share of hidden units whose pre-activation is ``< 0`` on every example of ``x``."""
    return (pre_activations(model, x) < 0).all(dim=0).double().mean().item()


def firing_rates(model: FFN, x: torch.Tensor) -> torch.Tensor:
    """``(d_ff,)`` float64: for each unit, the share of the examples of ``x`` on which ``h > 0``."""
    return (pre_activations(model, x) > 0).double().mean(dim=0)


def plot_firing_rates(rates: dict[str, torch.Tensor], colors: list[str], bins: int = 20, ax=None):
    """Histogram of ``firing_rates`` for several networks side by side: ``rates`` maps a label to a ``(d_ff,)``
    tensor of shares in ``[0, 1]``, ``colors`` gives one matplotlib colour per label. The live units (rate > 0)
    fall into ``bins`` bins over ``(0, 1]``; the dead units (rate exactly 0) get their own bar left of 0, labelled
    with their count. Returns the matplotlib ``Axes``."""
    import matplotlib.pyplot as plt

    if len(colors) != len(rates):
        raise ValueError(f"colors must give one colour per network ({len(rates)}), got {len(colors)}")
    validate.positive_int("bins", bins)
    if ax is None:
        ax = plt.subplots(figsize=(7.5, 3.5))[1]
    width = 1.0 / bins / len(rates)                     # the networks' bars share each bin
    dead_x = -1.5 / bins                                # the "dead" bar sits left of 0
    for k, ((label, r), color) in enumerate(zip(rates.items(), colors)):
        r = r.detach().double().flatten()
        n_dead = int((r == 0).sum())
        counts = torch.histc(r[r > 0], bins=bins, min=0, max=1)
        ax.bar((torch.arange(bins) / bins + width * (k + 0.5)).tolist(), counts.tolist(), width=width, color=color,
               label=label)
        ax.bar(dead_x + width * (k - (len(rates) - 1) / 2), n_dead, width=width, color=color)
        ax.text(dead_x + width * (k - (len(rates) - 1) / 2), n_dead + 2, str(n_dead), ha="center", fontsize=9)
    ax.set_xticks([dead_x, 0, 0.25, 0.5, 0.75, 1], ["dead", "0", "0.25", "0.5", "0.75", "1"])
    ax.set(xlabel="share of the examples on which a unit is on (h > 0)", ylabel="hidden units")
    ax.legend()
    return ax


def last_layer_lr_limit(model: FFN, x: torch.Tensor, centred: bool = False) -> float:
    r"""The largest stable SGD learning rate for the last layer alone at the current weights.

    With the hidden outputs ``M = φ(W1 x + b1)`` fixed, ``F.mse_loss(M W2ᵀ + b2, y)`` (mean over ``N`` examples and
    ``d = d_model`` outputs) is quadratic in ``(W2, b2)`` with curvature ``(2 / (N d)) M₁ᵀM₁`` in every output row,
    ``M₁ = [M, 1]`` (the bias acts like a unit that is always 1). Gradient descent on a quadratic converges only
    for ``lr < 2 / λ_max``; the full network's curvature has a largest eigenvalue at least as large (a principal
    block of a symmetric matrix cannot have a larger one), so its limit is no higher. Computed in float64.

    ``centred=True`` is a control: it subtracts each unit's mean over the examples from ``M`` first (the bias
    column is kept), which shows how much of ``λ_max`` comes from the hidden outputs' shared positive mean.
    """
    _check_data(model, x)
    if not isinstance(centred, bool):
        raise TypeError(f"centred must be True or False, got {centred!r}")
    with torch.no_grad():
        m = model.hidden(x).double()
    if centred:
        m = m - m.mean(dim=0)
    m1 = torch.cat([m, torch.ones(len(m), 1, dtype=torch.float64)], dim=1)
    lam = 2.0 / (x.shape[0] * model.d_model) * torch.linalg.eigvalsh(m1.T @ m1).max()
    return (2.0 / lam).item()


def shove_below_zero_(model: FFN, x: torch.Tensor, margin: float = 0.5) -> None:
    """Lower every hidden unit's bias, in place, until its pre-activation is at most ``-margin`` on every example
    of ``x``: after it every unit is negative everywhere (the weights ``W1`` are untouched)."""
    validate.positive_float("margin", margin)
    if model.w1.bias is None:
        raise ValueError("model must have biases (FFN(..., bias=True)) to be shoved below zero")
    h = pre_activations(model, x)
    with torch.no_grad():
        model.w1.bias -= h.max(dim=0).values + margin


@dataclass(frozen=True)
class ShovedRun:
    """One ``shoved_run``: ``losses`` (the loss before each SGD step), ``grad_w1`` (``‖∂loss/∂W1‖`` right after the
    shove), ``stuck`` (``stuck_fraction`` right after the shove) and ``units_up`` (units with ``h > 0`` on at least
    one example at the end)."""

    losses: list[float]
    grad_w1: float
    stuck: float
    units_up: int


def shoved_run(activation: str, x: torch.Tensor, y: torch.Tensor, seed: int, margin: float = 0.5, lr: float = 1.0,
               steps: int = 300, d_ff: int = 256, freeze_w1: bool = False, optimizer: str = "sgd") -> ShovedRun:
    """Section 6's "same shove": ``torch.manual_seed(seed)``, a fresh ``FFN(d, d_ff, activation)`` (``d`` from
    ``x (N, d)``), every unit shoved to ``h ≤ -margin`` on every example (``shove_below_zero_``), then ``steps`` of
    ``sgd`` at ``lr`` on ``(x, y)``. ``freeze_w1=True`` trains only ``W2, b2`` (``W1, b1`` stay as shoved): the
    control for "the last layer reads the small negative outputs" against "``W1`` learns through the slope".
    ``optimizer="adam"`` trains with ``torch.optim.Adam`` at ``lr`` instead (``adam``): it divides each gradient
    entry by its running size, so a tiny slope still moves ``W1`` a full step; a zero one does not."""
    validate.non_negative_int("seed", seed)
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    if not isinstance(freeze_w1, bool):
        raise TypeError(f"freeze_w1 must be True or False, got {freeze_w1!r}")
    torch.manual_seed(seed)
    model = FFN(x.shape[-1], d_ff, activation=activation)
    shove_below_zero_(model, x, margin=margin)
    stuck = stuck_fraction(model, activation, x)
    with torch.enable_grad():
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
    grad_w1 = model.w1.weight.grad.norm().item()
    model.zero_grad()
    model.w1.requires_grad_(not freeze_w1)
    losses = (sgd if optimizer == "sgd" else adam)(model, x, y, lr, steps)
    return ShovedRun(losses, grad_w1, stuck, int((firing_rates(model, x) > 0).sum()))


def shove_table(runs: Mapping[tuple[str, str], Sequence[ShovedRun]], keys: Sequence[tuple[str, str]],
                labels: Mapping[str, str], best_affine: float, question: str = "") -> str:
    """Section 6's table of shoved runs as printable lines: ``question`` (if given), a header, then one row per
    ``(activation, arm)`` of ``keys``, read from ``runs[activation, arm]`` (one ``ShovedRun`` per seed): ``W1``'s
    gradient norm right after the shove (``frozen`` for an arm whose name says ``frozen``), the final loss, the units
    back above zero (each as its range over seeds), and the seeds ending below ``best_affine`` (a loss)."""
    lines = [question] if question else []
    lines.append(f"{'':>35}  |grad W1| at start      final loss  units back  below affine fit")
    for name, arm in keys:
        seeds = runs[name, arm]
        if not seeds:
            raise ValueError(f"runs[{name!r}, {arm!r}] must hold at least one ShovedRun, got none")
        grads = [r.grad_w1 for r in seeds]
        if "frozen" in arm:
            grad = "frozen"
        elif max(grads) == 0:
            grad = "0 in every seed"
        else:
            grad = f"{min(grads):.1e} to {max(grads):.1e}"
        ends, back = [r.losses[-1] for r in seeds], [r.units_up for r in seeds]
        below = sum(e < best_affine for e in ends)
        lines.append(f"{labels[name] + ', ' + arm:>35}  {grad:>18}  {min(ends):.3f} to {max(ends):.3f}"
                     f"   {min(back):>2} to {max(back):<2}     {below} of {len(seeds)} seeds")
    return "\n".join(lines)


DEEP_SHOVE_PATH = Path(__file__).parent / "data" / "deep_shove.json"
ADAM_SHOVE_PATH = Path(__file__).parent / "data" / "adam_shove.json"


def deep_shove_study(activations: Sequence[str] = ("gelu", "silu"), seeds: Sequence[int] = range(5),
                     margin: float = 3.0, steps: int = 300, d_ff: int = 256, optimizer: str = "sgd",
                     lr: float = 1.0) -> dict:
    """Section 6's deep arm: ``shoved_run`` on ``experiment_data()`` for every activation and seed, at ``margin``.
    Returns a JSON-ready record: the settings and, per activation, one ``asdict(ShovedRun)`` per seed."""
    x, y = experiment_data()
    runs = {name: [asdict(shoved_run(name, x, y, seed, margin=margin, lr=lr, steps=steps, d_ff=d_ff,
                                     optimizer=optimizer)) for seed in seeds]
            for name in activations}
    record = {"margin": margin, "steps": steps, "d_ff": d_ff, "seeds": list(seeds), "runs": runs}
    if optimizer != "sgd":                              # the SGD file keeps its original keys
        record.update(optimizer=optimizer, lr=lr)
    return record


def save_deep_shove(record: dict, path: str | Path = DEEP_SHOVE_PATH) -> Path:
    """Write ``deep_shove_study``'s record as JSON (losses rounded to 7 decimals) and return the path."""
    path = Path(path)
    for runs in record["runs"].values():
        for run in runs:
            run["losses"] = [round(v, 7) for v in run["losses"]]
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def load_deep_shove(path: str | Path | None = None) -> tuple[dict, dict[str, list[ShovedRun]]]:
    """Read the stored deep arm: ``(settings, {activation: [ShovedRun per seed]})``."""
    record = json.loads(Path(path or DEEP_SHOVE_PATH).read_text(encoding="utf-8"))
    runs = {name: [ShovedRun(**run) for run in rs] for name, rs in record.pop("runs").items()}
    return record, runs


ESCAPE_PATH = Path(__file__).parent / "data" / "gelu_escape.json"


def escape_step(losses: Sequence[float], level: float) -> int | None:
    """The first step after which the loss is below ``level`` (``losses[k]`` is the loss before step ``k + 1``,
    as ``sgd`` returns them), or ``None`` if it never is."""
    return next((k for k, v in enumerate(losses) if v < level), None)


def escape_study(runs: Mapping[float, int] | None = None, seeds: Sequence[int] = range(5), margin: float = 3.0,
                 level: float = 0.45, every: int = 10, d_ff: int = 256, activation: str = "gelu") -> dict:
    """How long plain SGD takes to bring ``activation``'s network back from ``margin`` (section 6's deep arm, run
    far past its 300 steps): for each ``lr -> steps`` of ``runs`` (default ``{1.0: 10_000, 4.0: 3_000}``) and
    each seed, ``shoved_run`` for ``steps`` steps. Returns a JSON-ready record: the settings and, per learning
    rate (a string key), one entry per seed with ``escape`` (``escape_step`` of the losses at ``level``, the
    constant prediction being 0.497), ``units_up`` at the end and ``losses`` at every ``every``-th step."""
    runs = dict(runs or {1.0: 10_000, 4.0: 3_000})
    x, y = experiment_data()
    out = {}
    for lr, steps in runs.items():
        out[str(lr)] = []
        for seed in seeds:
            run = shoved_run(activation, x, y, seed, margin=margin, lr=lr, steps=steps, d_ff=d_ff)
            out[str(lr)].append({"escape": escape_step(run.losses, level), "units_up": run.units_up,
                                 "losses": [round(v, 7) for v in run.losses[::every]]})
    return {"activation": activation, "margin": margin, "level": level, "every": every, "d_ff": d_ff,
            "seeds": list(seeds), "steps": {str(lr): steps for lr, steps in runs.items()}, "runs": out}


def load_escape(path: str | Path | None = None) -> dict:
    """Read ``escape_study``'s stored record (``helpers/data/gelu_escape.json`` by default)."""
    return json.loads(Path(path or ESCAPE_PATH).read_text(encoding="utf-8"))


def recheck_stored(x: torch.Tensor, y: torch.Tensor, seed: int = 0, escape_steps: int = 1700,
                   tol: float = 1e-4) -> str:
    """Recompute seed ``seed`` of every stored file live and say, in one line, whether it matches: each deep-shove
    arm (``load_deep_shove``, both files, 300 steps) and GELU's escape at lr 4.0 (``load_escape``, its first
    ``escape_steps`` steps, compared at every stored step, with the step its loss passes the file's ``level``)."""
    gaps = []
    for path in (DEEP_SHOVE_PATH, ADAM_SHOVE_PATH):
        settings, stored = load_deep_shove(path)
        for name, runs in stored.items():
            live = shoved_run(name, x, y, seed, margin=settings["margin"], lr=settings.get("lr", 1.0),
                              optimizer=settings.get("optimizer", "sgd"))
            gaps.append(max(abs(a - b) for a, b in zip(live.losses, runs[seed].losses)))
    escape = load_escape()
    stored = escape["runs"]["4.0"][seed]
    live = shoved_run(escape["activation"], x, y, seed, margin=escape["margin"], lr=4.0, steps=escape_steps)
    sampled = live.losses[::escape["every"]]
    gaps.append(max(abs(a - b) for a, b in zip(sampled, stored["losses"])))
    gap = max(gaps)
    within = f"within {tol:.0e}".replace("e-0", "e-") if gap < tol else f"off by up to {gap:.1g}"
    took = escape_step(live.losses, escape["level"])
    took = f"not within {escape_steps:,}" if took is None else f"after {took:,}"
    return (f"seed {seed} of each stored file recomputed live: every loss {within}; GELU from -3 at lr 4.0 "
            f"passes {escape['level']} {took} steps (file: {stored['escape']:,})")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.dead_units --deep-shove [--adam]`` or ``--escape``: run notebook 01's deep-shove arm, or
    GELU's long escape from -3 (``escape_study``), and store it."""
    parser = argparse.ArgumentParser(prog="python -m helpers.dead_units", description=main.__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--deep-shove", action="store_true",
                      help="GELU and SiLU shoved to -3, 300 SGD steps at lr 1.0, seeds 0-4")
    mode.add_argument("--escape", action="store_true",
                      help=f"GELU shoved to -3, 10,000 SGD steps at lr 1.0 and 3,000 at lr 4.0 (to {ESCAPE_PATH})")
    parser.add_argument("--adam", action="store_true",
                        help=f"instead ReLU and GELU shoved to -3, 300 Adam steps at lr 1e-3 (to {ADAM_SHOVE_PATH})")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(5)))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--escape-steps", type=int, nargs=2, default=[10_000, 3_000], metavar=("AT_LR_1", "AT_LR_4"),
                        help="with --escape: the steps at lr 1.0 and at lr 4.0")
    parser.add_argument("--out", default=None,
                        help=f"default: {DEEP_SHOVE_PATH} ({ADAM_SHOVE_PATH} with --adam, {ESCAPE_PATH} with --escape)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.escape:
        record = escape_study(dict(zip((1.0, 4.0), args.escape_steps)), seeds=args.seeds)
        path = Path(args.out or ESCAPE_PATH)
        path.write_text(json.dumps(record) + "\n", encoding="utf-8")
        print(f"wrote {len(record['seeds'])} seeds to {path}")
        return 0
    if args.adam:
        record = deep_shove_study(("relu", "gelu"), seeds=args.seeds, steps=args.steps, optimizer="adam", lr=1e-3)
    else:
        record = deep_shove_study(seeds=args.seeds, steps=args.steps)
    args.out = args.out or str(ADAM_SHOVE_PATH if args.adam else DEEP_SHOVE_PATH)
    print(f"wrote {len(record['seeds'])} seeds to {save_deep_shove(record, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
