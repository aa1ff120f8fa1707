r"""Why a fresh router is uneven on real text: the inputs' geometry, and the controls that show it.

An untrained router is a random matrix ``W_r`` (E, d). On inputs spread evenly in every direction (an
isotropic Gaussian) its top-1 choice is close to uniform over the experts. The inputs an MoE layer of a
language model sees are not spread that way: hidden states share a common direction (their mean ``μ`` is far
from 0) and most of their variance lies in a few directions (a low effective rank). A random router turns the
shared part into the same logit offset ``W_r μ`` for every token, so a few experts win for most tokens from
step 0, before anything was learnt. Repetition of identical inputs plays little part.

``skew_controls`` measures the busiest expert's load over the mean load (``helpers.moe.load_max_over_mean``)
of every MoE layer of an untrained ``TinyGPT`` on the layer's real inputs and on inputs that keep or remove one
property at a time:

=========================  =======================================================================================
control                    router input
=========================  =======================================================================================
``all positions``          the layer's inputs at every token position (N·T rows)
``distinct inputs``        the same, each distinct vector once (identical prefixes give identical vectors)
``matched Gaussian``       Gaussian vectors with the inputs' mean and covariance: no duplicates, no words
``mean removed``           the real inputs minus their mean (the shared direction gone, the low rank kept)
``mean + isotropic``       the inputs' mean plus N(0, σ²I), σ² their variance per direction (the shared direction
                           kept, the low rank gone)
``isotropic Gaussian``     N(0, I) vectors, as many as the inputs: no shared direction, every direction equal
``router + noise``         the real inputs, noisy top-k (Shazeer et al. 2017) with W_noise = 0 (std softplus(0))
``W_g = 0, noise``         the same with the router's weights zeroed too, the paper's initialisation ("no
                           signal and some noise"): the noise alone decides
=========================  =======================================================================================

``input_geometry`` gives the two numbers behind it: ``|mean| / rms |x|`` and the participation ratio
``(Σλ)² / Σλ²`` of the covariance's eigenvalues (d for an isotropic cloud, 1 for a line).

The "excess" of a routing is busiest/mean − 1 (0 at an even load); ``skew_table``'s last column is a control's
mean excess as a share of the real inputs' (all positions), both averaged over seeds and layers.

Notebook 05's controls (its ``untrained_moe_lm``: ``TinyGPT`` of ``helpers.moe_runs.lm_config`` on the fact
sentences, 8 noisy top-1 experts of width 96 per block) on ``SKEW_SEEDS`` = 0-99 are shipped in ``SKEW_PATH``, made
by::

    python -m helpers.router_skew --results       # about half a minute of one CPU core

The notebook recomputes seed 0 live and checks it against the file. ``--seeds`` and ``--out`` make a smaller file.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from helpers import validate
from helpers.moe import MoE, load_max_over_mean

#: Where ``python -m helpers.router_skew --results`` writes the shipped controls and ``load_skew`` reads them.
SKEW_PATH = Path(__file__).parent / "data" / "router_skew.json"
SKEW_SEEDS: tuple[int, ...] = tuple(range(100))
_DIGITS = 6       # busiest/mean is a ratio of counts (steps of E/N): 6 decimals keep every value exact enough

CONTROLS = ("all positions", "distinct inputs", "matched Gaussian", "mean removed", "mean + isotropic",
            "isotropic Gaussian", "router + noise", "W_g = 0, noise")


def moe_inputs(model: nn.Module, ids: torch.Tensor) -> list[torch.Tensor]:
    """Run ``model`` on ``ids`` (B, T) without gradients and return what every ``MoE`` layer received, bottom
    layer first, each flattened to ``(B·T, d_model)`` (float32)."""
    layers = [m for m in model.modules() if isinstance(m, MoE)]
    if not layers:
        raise ValueError("model has no MoE layer")
    seen: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append(args[0].reshape(-1, mod.d_model).detach()))
             for m in layers]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    return [x.float() for x in seen]


def distinct_rows(x: torch.Tensor, decimals: int = 4) -> torch.Tensor:
    """``x`` (N, d) with repeated rows kept once (rows equal after rounding to ``decimals``), in first-seen order."""
    validate.float_tensor("x", x, min_dims=2)
    _, inverse = torch.unique(x.round(decimals=decimals), dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), x.shape[0], dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(x.shape[0]), reduce="amin")
    return x[first.sort().values]


def matched_gaussian(x: torch.Tensor, n: int | None = None, *, generator: torch.Generator | None = None,
                     covariance: bool = True) -> torch.Tensor:
    """``n`` (default N) Gaussian rows with the mean and covariance of ``x`` (N, d) (``covariance=False``: the
    mean and each feature's variance only). Sampled in float64 through an eigendecomposition (no jitter
    needed for a singular covariance), returned as float32."""
    validate.float_tensor("x", x, min_dims=2)
    n = x.shape[0] if n is None else validate.positive_int("n", n)
    x64 = x.double()
    mean = x64.mean(0)
    z = torch.randn(n, x.shape[1], generator=generator, dtype=torch.float64)
    if not covariance:
        return (mean + z * x64.std(0)).float()
    values, vectors = torch.linalg.eigh(torch.cov(x64.T))
    return (mean + (z * values.clamp_min(0).sqrt()) @ vectors.T).float()


@dataclass
class Geometry:
    """``mean_ratio``: |mean of the rows| / root-mean-square row norm (0: centred, 1: every row the same);
    ``participation``: (Σλ)² / Σλ² of the covariance's eigenvalues, the number of directions the variance
    effectively spreads over (d for an isotropic cloud); ``d``: the width."""
    mean_ratio: float
    participation: float
    d: int


def input_geometry(x: torch.Tensor) -> Geometry:
    """How far the rows of ``x`` (N, d) share one direction, and over how many directions they vary."""
    validate.float_tensor("x", x, min_dims=2)
    x64 = x.double()
    rms = x64.square().sum(-1).mean().sqrt()
    values = torch.linalg.eigvalsh(torch.cov(x64.T)).clamp_min(0)
    return Geometry(float(x64.mean(0).norm() / rms), float(values.sum() ** 2 / values.square().sum()), x.shape[1])


def _top1_load(layer: MoE, x: torch.Tensor) -> float:
    return load_max_over_mean(layer.route(x).tokens_per_expert())


def _noisy_load(layer: MoE, x: torch.Tensor, draws: int, zero_router: bool) -> float:
    """Mean busiest/mean over ``draws`` noisy routings of ``x``, the router's weights zeroed if asked (the
    layer is restored)."""
    saved = layer.router.weight.detach().clone()
    was_training = layer.training
    try:
        with torch.no_grad():
            if zero_router:
                layer.router.weight.zero_()
            layer.train()
            return sum(_top1_load(layer, x) for _ in range(draws)) / draws
    finally:
        with torch.no_grad():
            layer.router.weight.copy_(saved)
        layer.train(was_training)


def noisy_busiest(layer: MoE, x: torch.Tensor, *, draws: int = 3, seed: int = 0) -> float:
    """Mean busiest/mean of ``layer``'s noisy top-1 routing of ``x`` (N, d) over ``draws`` noise draws, the
    noise drawn from ``torch``'s generator seeded with ``seed`` (the global random state is left as it was).
    The router's scale matters here, unlike for the noise-free argmax: a smaller ``W_r`` lets the noise decide
    more often. ``layer`` must be built with ``noisy=True``; its mode is restored."""
    if not isinstance(layer, MoE) or layer.noise is None:
        raise ValueError("layer must be an MoE built with noisy=True (its noise weights start at zero)")
    validate.positive_int("draws", draws)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        return _noisy_load(layer, x, draws, zero_router=False)


def layer_controls(layer: MoE, x: torch.Tensor, *, generator: torch.Generator, draws: int = 3,
                   spread_generator: torch.Generator | None = None) -> dict[str, float]:
    """Busiest/mean of ``layer``'s routing for each control of ``CONTROLS`` on its real inputs ``x`` (N, d).
    Gaussian controls and the noise draw from ``generator``'s stream (the noise through ``torch``'s global
    generator, reseeded from it; ``mean + isotropic`` from ``spread_generator``, default ``generator``). ``layer``
    must be built with ``noisy=True``."""
    if not isinstance(layer, MoE) or layer.noise is None:
        raise ValueError("layer must be an MoE built with noisy=True (its noise weights start at zero)")
    n = x.shape[0]
    with torch.no_grad():
        layer.eval()
        out = {"all positions": _top1_load(layer, x),
               "distinct inputs": _top1_load(layer, distinct_rows(x)),
               "matched Gaussian": _top1_load(layer, matched_gaussian(x, generator=generator)),
               "mean removed": _top1_load(layer, x - x.mean(0)),
               "isotropic Gaussian": _top1_load(layer, torch.randn(n, x.shape[1], generator=generator))}
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        out["router + noise"] = _noisy_load(layer, x, draws, zero_router=False)
        out["W_g = 0, noise"] = _noisy_load(layer, x, draws, zero_router=True)
        x64 = x.double()
        spread = (x64.var(0).sum() / x.shape[1]).sqrt()            # the inputs' variance per direction
        out["mean + isotropic"] = _top1_load(layer, (x64.mean(0) + spread * torch.randn(
            n, x.shape[1], generator=generator if spread_generator is None else spread_generator,
            dtype=torch.float64)).float())
    return {c: out[c] for c in CONTROLS}


@dataclass
class SkewControls:
    """``loads[control]``: (seeds, layers) busiest/mean of the untrained routers; ``geometry[l]``: the inputs'
    ``Geometry`` of layer ``l``, averaged over seeds; ``distinct[l]``: mean number of distinct input vectors
    of layer ``l`` out of ``n_inputs``."""
    loads: dict[str, torch.Tensor]
    geometry: list[Geometry]
    distinct: list[float]
    n_inputs: int

    def per_seed(self, control: str) -> torch.Tensor:
        """``(seeds,)``: the mean of the layers' busiest/mean, one value per seed (the unit of the verdicts)."""
        return self.loads[control].mean(1)


def skew_controls(build: callable, ids: torch.Tensor, seeds: Sequence[int], *, draws: int = 3) -> SkewControls:
    """Every control of ``CONTROLS`` for each seed: ``torch.manual_seed(seed); model = build()`` must return an
    untrained model whose FFNs are ``MoE(..., noisy=True)``; ``ids`` (B, T) are the sentences. Gaussian
    draws and noise come from a generator seeded with ``1000 + seed`` (``mean + isotropic``'s: ``2000 + seed``)."""
    loads: dict[str, list[list[float]]] = {c: [] for c in CONTROLS}
    geometry: list[list[Geometry]] = []
    distinct: list[list[int]] = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = build().eval()
        inputs = moe_inputs(model, ids)
        layers = [m for m in model.modules() if isinstance(m, MoE)]
        g, g_spread = torch.Generator().manual_seed(1000 + seed), torch.Generator().manual_seed(2000 + seed)
        rows = [layer_controls(layer, x, generator=g, draws=draws, spread_generator=g_spread)
                for layer, x in zip(layers, inputs)]
        for c in CONTROLS:
            loads[c].append([r[c] for r in rows])
        geometry.append([input_geometry(x) for x in inputs])
        distinct.append([distinct_rows(x).shape[0] for x in inputs])
    n_layers = len(geometry[0])
    mean_geometry = [Geometry(sum(g[l].mean_ratio for g in geometry) / len(geometry),
                              sum(g[l].participation for g in geometry) / len(geometry), geometry[0][l].d)
                     for l in range(n_layers)]
    return SkewControls({c: torch.tensor(v, dtype=torch.float64) for c, v in loads.items()}, mean_geometry,
                        [sum(d[l] for d in distinct) / len(distinct) for l in range(n_layers)], ids.numel())


def skew_table(result: SkewControls, controls: Sequence[str] = CONTROLS) -> str:
    """Printable lines: per control (default: all of ``CONTROLS``), busiest/mean per layer (mean over seeds,
    lowest–highest) and the share of the real inputs' excess over an even load (busiest/mean − 1) that it keeps."""
    base = result.per_seed("all positions").mean() - 1
    n_layers = result.loads["all positions"].shape[1]
    head = f"{'router input':<20}" + "".join(f"{'layer ' + str(l):>19}" for l in range(n_layers)) + "% of all positions' excess, both layers".rjust(42)
    lines = [head]
    for c in controls:
        v = result.loads[c]
        cells = "".join(f"{v[:, l].mean():>7.2f} ({v[:, l].min():.2f}–{v[:, l].max():.2f})" for l in range(n_layers))
        kept = (result.per_seed(c).mean() - 1) / base
        lines.append(f"{c:<20}{cells}{kept:>41.0%}")
    return "\n".join(lines)


def geometry_figure(layer: MoE, panels: dict[str, torch.Tensor], *, max_points: int = 2000):
    """The skew's mechanism as a picture. One scatter panel per entry of ``panels`` (inputs (N, d)) on the same two
    axes, the direction of the first panel's mean ``μ`` and the main direction of its spread orthogonal to it, each
    point coloured by the expert ``layer``'s untrained router picks for it (noise-free top-1, eval mode); a cross
    marks the origin, where ``W_r x = 0``. Titles give each routing's noise-free busiest/mean and each input set's
    std along both axes (all rows). A last panel plots,
    per expert and input set, the share of tokens it takes against its mean logit ``w_e · mean(x)``: with a shared
    direction the largest mean logit takes the most tokens; without one the logits' spread decides alone.
    ``max_points`` rows are drawn in the scatters (all are routed)."""
    import matplotlib.pyplot as plt

    first = next(iter(panels.values()))
    validate.float_tensor("panels' first tensor", first, min_dims=2)
    x64 = first.double()
    mu = x64.mean(0)
    u = mu / mu.norm()
    centred = x64 - mu
    v = torch.linalg.svd(centred - (centred @ u)[:, None] * u, full_matrices=False).Vh[0]
    cmap = plt.get_cmap("tab10")
    n_rows = (len(panels) + 2) // 2                               # two panels a row: legible in a notebook column
    fig, grid = plt.subplots(n_rows, 2, figsize=(11.5, 5.0 * n_rows), squeeze=False)
    axes = list(grid.reshape(-1))
    for spare in axes[len(panels) + 1:]:
        spare.remove()
    axes = axes[:len(panels) + 1]
    was_training = layer.training
    layer.eval()
    markers = "osD^v"
    limits = []                                   # every panel's extent, so one shared range shows all points
    with torch.no_grad():
        for i, (ax, (name, inputs)) in enumerate(zip(axes, panels.items())):
            routing = layer.route(inputs)
            pts = inputs.double()[:max_points]
            colors = [cmap(int(e)) for e in routing.expert_index[:max_points, 0]]
            ax.scatter((pts @ u).numpy(), (pts @ v).numpy(), s=5, c=colors, alpha=0.6, lw=0)
            ax.scatter([0], [0], marker="x", s=80, color="black", zorder=5)
            every = inputs.double()                                # the stds use every row, drawn or not
            spread = f"std along x {float((every @ u).std()):.2f}, y {float((every @ v).std()):.2f}"
            ax.set(title=f"{name}: busiest/mean {load_max_over_mean(routing.tokens_per_expert()):.2f}\n{spread}",
                   xlabel="x: the hidden states' mean direction", aspect="equal")
            limits.append(((pts @ u).min(), (pts @ u).max(), (pts @ v).min(), (pts @ v).max()))
            share = routing.tokens_per_expert().double() / len(inputs)
            mean_logit = (inputs.double() @ layer.router.weight.double().T).mean(0)
            axes[-1].scatter(mean_logit.numpy(), share.numpy(), c=[cmap(e) for e in range(layer.n_experts)],
                             marker=markers[i % len(markers)], s=60, edgecolor="black", lw=0.6, label=name)
    layer.train(was_training)
    lo_x, hi_x = min(float(l[0]) for l in limits), max(float(l[1]) for l in limits)
    lo_y, hi_y = min(float(l[2]) for l in limits), max(float(l[3]) for l in limits)
    pad = 0.04 * max(hi_x - lo_x, hi_y - lo_y)
    for ax in axes[:-1]:
        ax.set(xlim=(lo_x - pad, hi_x + pad), ylim=(lo_y - pad, hi_y + pad))
        ax.set_ylabel("y: the main spread orthogonal to it")
    axes[-1].axhline(1 / layer.n_experts, color="black", ls=":", lw=1.5, label="even share")
    axes[-1].set(xlabel="expert's mean logit over the inputs", ylabel="share of tokens it takes",
                 title="load against mean logit, per expert")
    kinds = [plt.Line2D([], [], marker=markers[i % len(markers)], ls="", color="white", markeredgecolor="black",
                        markersize=9, label=name) for i, name in enumerate(panels)]
    kinds.append(plt.Line2D([], [], color="black", ls=":", label="even share"))
    axes[-1].legend(handles=kinds, fontsize=11, loc="upper left")
    handles = [plt.Line2D([], [], marker="o", ls="", color=cmap(e), markersize=9, label=str(e))
               for e in range(layer.n_experts)]
    axes[0].legend(handles=[plt.Line2D([], [], marker="x", ls="", color="black", markersize=9,
                                       label="origin: all logits equal")], fontsize=11, loc="upper left")
    fig.legend(handles=handles, title="expert", loc="center right", frameon=False, fontsize=11, title_fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    return fig


def random_id_loads(build: callable, vocab_size: int, shape: tuple[int, int], seeds: Sequence[int]) -> torch.Tensor:
    """``(seeds, layers)`` float64: busiest/mean of the same untrained models as ``skew_controls`` (``build`` after
    ``torch.manual_seed(seed)``, eval mode) on uniformly random token ids of ``shape`` (B, T), drawn once from a
    generator seeded with 0: the skew without any text."""
    ids = torch.randint(0, vocab_size, shape, generator=torch.Generator().manual_seed(0))
    loads = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = build().eval()
        layers = [m for m in model.modules() if isinstance(m, MoE)]
        with torch.no_grad():
            loads.append([_top1_load(layer, x) for layer, x in zip(layers, moe_inputs(model, ids))])
    return torch.tensor(loads, dtype=torch.float64)


def untrained_moe_lm(config) -> nn.Module:
    """Notebook 05's untrained model for ``config`` (``helpers.moe_runs.lm_config``): ``TinyGPT`` with each FFN an
    ``MoE(64, 8, 1, d_ff=96, noisy=True)`` (8 SwiGLU experts of width 96, top-1, noisy gating available)."""
    from helpers.transformer import TinyGPT

    return TinyGPT(config, ffn_factory=lambda layer: MoE(config.d_model, 8, 1, d_ff=96, noisy=True))


def run_skew(seeds: Sequence[int] = SKEW_SEEDS) -> tuple[SkewControls, torch.Tensor]:
    """``skew_controls`` and ``random_id_loads`` of notebook 05's untrained models on the fact sentences."""
    from helpers.facts import load_facts, make_dataset
    from helpers.moe_runs import lm_config

    data = make_dataset(load_facts())
    config = lm_config(data)
    build = lambda: untrained_moe_lm(config)                                   # noqa: E731
    return (skew_controls(build, data.ids, seeds), random_id_loads(build, config.vocab_size, tuple(data.ids.shape),
                                                                   seeds))


def save_skew(result: SkewControls, random_ids: torch.Tensor, seeds: Sequence[int], path: str | Path) -> Path:
    """Write ``run_skew``'s result as JSON (values rounded to 1e-6) with the seeds and the machine it ran on."""
    rounded = lambda t: [[round(float(v), _DIGITS) for v in row] for row in t]    # noqa: E731
    record = {"made_by": "python -m helpers.router_skew --results", "seeds": list(seeds),
              "environment": {"torch": torch.__version__, "python": platform.python_version(),
                              "cpu_capability": torch.backends.cpu.get_cpu_capability()},
              "loads": {c: rounded(v) for c, v in result.loads.items()}, "random_ids": rounded(random_ids),
              "geometry": [asdict(g) for g in result.geometry], "distinct": result.distinct,
              "n_inputs": result.n_inputs}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, separators=(",", ":")) + "\n", encoding="utf-8")
    return path


def load_skew(path: str | Path | None = None) -> tuple[SkewControls, torch.Tensor, list[int]]:
    """The file written by ``save_skew`` (default: the shipped ``SKEW_PATH``): the controls, the random-id loads
    ``(seeds, layers)`` and the seeds."""
    path = SKEW_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no router-skew controls at {path}; make them with python -m helpers.router_skew "
                                "--results")
    r = json.loads(path.read_text(encoding="utf-8"))
    as64 = lambda v: torch.tensor(v, dtype=torch.float64)                      # noqa: E731
    result = SkewControls({c: as64(v) for c, v in r["loads"].items()}, [Geometry(**g) for g in r["geometry"]],
                          r["distinct"], r["n_inputs"])
    return result, as64(r["random_ids"]), r["seeds"]


def largest_seed_difference(live: SkewControls, live_random: torch.Tensor, stored: SkewControls,
                            stored_random: torch.Tensor, seeds: Sequence[int], stored_seeds: Sequence[int]) -> float:
    """Largest |live − stored| busiest/mean over every control, layer and ``seeds`` (and the random-id loads)."""
    rows = [list(stored_seeds).index(s) for s in seeds]
    gaps = [(live.loads[c] - stored.loads[c][rows]).abs().max() for c in CONTROLS]
    gaps.append((live_random - stored_random[rows]).abs().max())
    return float(max(gaps))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.router_skew --results``: run notebook 05's section-6 controls and store them."""
    parser = argparse.ArgumentParser(prog="python -m helpers.router_skew", description=main.__doc__)
    parser.add_argument("--results", action="store_true", required=True, help="run the controls, write the file")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SKEW_SEEDS), help="default: 0 to 99")
    parser.add_argument("--out", default=str(SKEW_PATH), help=f"default: {SKEW_PATH}")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                        # as in the notebooks (helpers.env.setup)
    try:
        result, random_ids = run_skew(args.seeds)
    finally:
        torch.set_num_threads(threads)
    print(f"wrote {save_skew(result, random_ids, args.seeds, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
