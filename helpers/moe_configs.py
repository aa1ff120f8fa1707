"""Today's MoE layers as their makers publish them, and DeepSeekMoE's two knobs (notebook 07, sections 1-2).

``PUBLISHED`` holds each model's published configuration (sources in notebook 07): total and active parameters
of the whole model (embeddings included), routed experts per MoE layer, shared experts every token uses, the
number k of routed experts per token, how the router weighs them and how the load is balanced.
``published_figure`` draws it (``router_table`` prints the rest); ``published_table`` prints it with two
derived columns, the active share and the sets of routed experts a token
can be sent to, C(E, k); ``width_table`` prints the widths. ``expert_combinations`` counts those sets for DeepSeekMoE's fine-grained (m) and
shared (s) experts, and ``configuration_figure`` draws both knobs for one layer. ``weight_bytes_per_token``
counts what a batch's decode step reads per token, and ``bytes_per_token_figure`` draws it against the batch.
``GATE_CONVENTIONS`` and ``gate_table``: the gates of Mixtral, DeepSeekMoE and DeepSeek-V3 as configurations of the
course's ``helpers.moe.MoE`` (checked against transformers' routers in ``tests/test_moe_configs.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from helpers import validate
from helpers.costs import moe_layer_cost
from helpers.ffn import ffn_param_count
from helpers.inference import expected_experts_touched
from helpers.moe import MoE


@dataclass(frozen=True)
class Published:
    """One model's MoE as published: parameters in billions (whole model), routed experts E per MoE layer,
    shared experts, routed experts per token k, the router's weights, the balancing."""

    name: str
    total_b: float
    active_b: float
    routed: int
    shared: int
    k: int
    weights: str
    balancing: str
    d_model: int = 0           # the model width
    expert_width: int = 0      # one routed expert's hidden width
    moe_layers: str = ""       # which of the decoder layers are MoE layers
    groups: tuple[int, ...] = ()   # group-limited routing: (expert groups, groups a token may use)


PUBLISHED: tuple[Published, ...] = (
    Published("Mixtral 8x7B", 46.7, 12.9, 8, 0, 2, "softmax over the top 2", "not described in the paper",
              4096, 14336, "all 32"),
    Published("DeepSeek-V3", 671, 37, 256, 1, 8, "sigmoid, normalised over the 8",
              "selection bias ±γ + sequence-wise loss", 7168, 2048, "58 of 61 (first 3 dense)", (8, 4)),
    Published("Qwen3-235B-A22B", 235, 22, 128, 0, 8, "softmax, top 8 renormalised",
              "balance loss over the global batch", 4096, 1536, "all 94"),
    Published("Llama 4 Scout", 109, 17, 16, 1, 1, "sigmoid of the top-1 logit", "not described",
              5120, 8192, "all 48"),
    Published("Llama 4 Maverick", 400, 17, 128, 1, 1, "sigmoid of the top-1 logit", "not described",
              5120, 8192, "24 of 48 (alternating)"),
    Published("gpt-oss-120b", 116.8, 5.1, 128, 0, 4, "softmax over the top 4", "not described", 2880, 2880, "all 36"),
    Published("gpt-oss-20b", 20.9, 3.6, 32, 0, 4, "softmax over the top 4", "not described", 2880, 2880, "all 24"),
)


def published_table(models: Sequence[Published] = PUBLISHED) -> list[str]:
    """``PUBLISHED`` as printable lines: sizes, the active share, experts, C(E, k), the router and the balancing."""
    lines = [f"{'model':<18}{'total':>8}{'active':>8}{'share':>7}{'routed E':>10}{'shared':>8}{'k':>3}"
             f"{'C(E, k)':>10}  {'router weights':<32}balancing"]
    for m in models:
        sets = math.comb(m.routed, m.k)
        lines.append(f"{m.name:<18}{m.total_b:>7g}B{m.active_b:>7g}B{m.active_b / m.total_b:>7.0%}{m.routed:>10}"
                     f"{m.shared:>8}{m.k:>3}{sets if sets < 10**5 else f'{sets:.1e}':>10}  {m.weights:<32}"
                     f"{m.balancing}")
    return lines


def width_table(models: Sequence[Published] = PUBLISHED) -> list[str]:
    """Each model's width, its routed experts' width and their ratio (the granularity one can read off a
    configuration), and which layers are MoE layers."""
    lines = [f"{'model':<18}{'d_model':>8}{'expert width':>14}{'width / d_model':>17}  MoE layers"]
    lines += [f"{m.name:<18}{m.d_model:>8,}{m.expert_width:>14,}{m.expert_width / m.d_model:>17.2f}  {m.moe_layers}"
              for m in models]
    return lines


def router_table(models: Sequence[Published] = PUBLISHED) -> list[str]:
    """The columns ``published_figure`` does not draw: the router's weights, the balancing, the MoE layers."""
    lines = [f"{'model':<18}{'router weights':<32}{'balancing':<40}MoE layers"]
    lines += [f"{m.name:<18}{m.weights:<32}{m.balancing:<40}{m.moe_layers}" for m in models]
    return lines


def published_figure(models: Sequence[Published] = PUBLISHED):
    """``PUBLISHED`` side by side, one row per model: total and active parameters (log scale, the active share
    written out), routed experts per MoE layer with the k a token uses, its shared experts and C(E, k), and the
    routed expert's width over d_model."""
    import matplotlib.pyplot as plt

    fig, (size, experts, width) = plt.subplots(1, 3, figsize=(12.5, 3.9), sharey=True,
                                              gridspec_kw={"width_ratios": [1.25, 1.25, 0.9]})
    y = list(range(len(models)))[::-1]
    for yi, m in zip(y, models):
        size.barh(yi, m.total_b, color="#BBBBBB", height=0.7)
        size.barh(yi, m.active_b, color="#0072B2", height=0.7)
        size.annotate(f"{m.active_b:g}B of {m.total_b:g}B ({m.active_b / m.total_b:.0%})", (m.total_b, yi),
                      xytext=(4, 0), textcoords="offset points", va="center", fontsize=8.5)
        experts.barh(yi, m.routed, color="#BBBBBB", height=0.7)
        experts.barh(yi, m.k, color="#D55E00", height=0.7)
        sets = math.comb(m.routed, m.k)
        shared = f" + {m.shared} shared" if m.shared else ""
        label = f"top-{m.k} of {m.routed}{shared}; C(E, k) {sets:,}" if sets < 10**5 else \
            f"top-{m.k} of {m.routed}{shared}; C(E, k) {sets:.1e}"
        if m.groups:   # what group-limited routing leaves reachable
            label += f",\n{group_limited_sets(m.routed, m.k, *m.groups):.1e} within {m.groups[1]} of {m.groups[0]} groups"
        experts.annotate(label, (m.routed, yi), xytext=(4, 0), textcoords="offset points", va="center",
                         fontsize=8.5, linespacing=0.95)
        ratio = m.expert_width / m.d_model
        width.barh(yi, ratio, color="#009E73", height=0.7)
        width.annotate(f"{ratio:.2f}", (ratio, yi), xytext=(4, 0), textcoords="offset points", va="center",
                       fontsize=8.5)
    # the axes run past the data to leave room for the labels; their ticks stop at the data
    size.set(xscale="log", xlim=(1, 2e4), xticks=[1, 10, 100, 1000], xlabel="parameters, billions (log scale)\ngrey: total; blue: active per token",
             yticks=y, yticklabels=[m.name for m in models])
    experts.set(xscale="log", xlim=(0.5, 1.5e5), xticks=[1, 10, 100],
                xlabel="routed experts per MoE layer (log scale)\ngrey: E; orange: the k a token uses")
    width.set(xlim=(0, 4.4), xlabel="routed expert's width / d_model\n(dotted: as wide as the model)")
    width.axvline(1.0, color="#666666", lw=0.8, ls=":")
    size.set_title("how big, how much used", fontsize=10)
    experts.set_title("how many experts, how many per token", fontsize=10)
    width.set_title("how wide each expert", fontsize=10)
    for ax in (size, experts, width):
        ax.grid(axis="y", visible=False)
    for ax in (size, experts):
        ax.minorticks_off()
        ax.spines[["top", "right"]].set_visible(False)
        ax.spines["bottom"].set_bounds(ax.get_xlim()[0], 1000 if ax is size else 256)
    fig.tight_layout()
    return fig


def expert_combinations(n_experts: int, top_k: int, granularity: int = 1, n_shared: int = 0) -> int:
    """Sets of routed experts one token can use: ``C(m·N − s, m·k − s)`` (DeepSeekMoE's count)."""
    m = validate.positive_int("granularity", granularity)
    n, k = validate.positive_int("n_experts", n_experts), validate.int_in_range("top_k", top_k, 1, n_experts)
    s = validate.non_negative_int("n_shared", n_shared)
    if s >= m * k:
        raise ValueError(f"n_shared={s} must leave at least one routed choice (at most m·k − 1 = {m * k - 1})")
    return math.comb(m * n - s, m * k - s)


def group_limited_sets(n_experts: int, top_k: int, n_group: int, topk_group: int) -> int:
    """Sets of ``top_k`` routed experts whose experts lie in at most ``topk_group`` of ``n_group`` equal groups
    (DeepSeek-V3's group-limited routing: 256 experts, top 8, 4 of 8 groups). Inclusion-exclusion over the groups
    a set touches; with ``topk_group = n_group`` it is ``C(n_experts, top_k)``."""
    g = validate.positive_int("n_group", n_group)
    if n_experts % g:
        raise ValueError(f"n_group={g} must divide n_experts={n_experts}")
    t_max = validate.int_in_range("topk_group", topk_group, 1, g)
    per_group, k = n_experts // g, validate.int_in_range("top_k", top_k, 1, n_experts)
    exactly = [sum((-1) ** (t - i) * math.comb(t, i) * math.comb(per_group * i, k) for i in range(t + 1))
               for t in range(t_max + 1)]                               # sets touching exactly t given groups
    return sum(math.comb(g, t) * exactly[t] for t in range(1, t_max + 1))


def configuration_figure(d_model: int, n_experts: int, top_k: int, d_ff: int, granularity: int, n_shared: int,
                         granularities: Sequence[int] = (1, 2, 4, 8, 16)):
    """DeepSeekMoE's knobs on one layer: sets of routed experts per token against the granularity m (left), and
    parameters and FLOPs per token at the chosen ``(m, s)`` relative to the plain layer (right)."""
    import matplotlib.pyplot as plt

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
            ("active, router included", base.active_params, chosen.active_params),
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




def weight_bytes_per_token(batch: int, d_model: int, d_ff: int, n_experts: int = 1, top_k: int = 1, *,
                           granularity: int = 1, n_shared: int = 0, bytes_per_weight: int = 4) -> float:
    """Weight bytes one forward step over ``batch`` tokens reads, per token, for a SwiGLU layer (no biases).

    ``n_experts = 1``: a dense FFN of width ``d_ff``, all of it read once. Otherwise an ``MoE`` as built
    (``moe_layer_cost``'s conventions): the router (``d_model`` weights per routed expert), the shared FFN, and the
    routed experts the batch reaches, ``E'(1 − (1 − k'/E')^B)`` of the ``E' = mE − s`` routed experts of width
    ``d_ff/m`` with ``k' = mk − s`` per token (``expected_experts_touched``: tokens routed evenly at random). The
    bytes are divided by ``B``: a dense layer's fall as 1/B, an MoE's fall more slowly until the batch reaches
    every expert, then it reads (all its experts) / (the experts a token uses) times the dense layer's, plus the
    router: ``E/k`` of the arguments (before the cut), not ``E'/k'`` of the routed experts.
    """
    b = validate.positive_int("batch", batch)
    if validate.positive_int("n_experts", n_experts) == 1:
        return ffn_param_count(d_model, d_ff, gated=True, bias=False) * bytes_per_weight / b
    m, s = granularity, n_shared
    cost = moe_layer_cost(d_model, n_experts, top_k, d_ff, granularity=m, n_shared=s)
    routed, routed_k, width = m * n_experts - s, m * top_k - s, d_ff // m
    shared = ffn_param_count(d_model, s * width, gated=True, bias=False) if s else 0
    expert = (cost.expert_total_params - shared) // routed
    reached = expected_experts_touched(b, routed, routed_k)
    read = d_model * routed + shared + reached * expert
    return read * bytes_per_weight / b


def bytes_per_token_figure(layers: dict[str, dict], batches: Sequence[int] = tuple(2 ** i for i in range(13)),
                           colors: Sequence[str] = ("#000000", "#0072B2", "#D55E00")):
    """Weight bytes read per token against the batch ``B`` for each layer of ``layers`` (label → the keyword
    arguments of ``weight_bytes_per_token`` but ``batch``; the first is the reference, a dense FFN): the bytes
    (left, log-log) and each layer's bytes over the first's (right)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.0))
    reads = {label: [weight_bytes_per_token(b, **kw) for b in batches] for label, kw in layers.items()}
    base = next(iter(reads.values()))
    for (label, read), color in zip(reads.items(), colors):
        left.plot(batches, [r / 1e3 for r in read], marker="o", ms=3, color=color, label=label)
        right.plot(batches, [r / d for r, d in zip(read, base)], marker="o", ms=3, color=color, label=label)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens in the batch, B")
    left.set_yscale("log")
    left.set_ylabel("weight kB read per token")
    left.set_title("weights read per token")
    left.legend(frameon=False, fontsize=9)
    right.set_ylabel("relative to the dense FFN")
    right.set_ylim(0, None)
    right.set_title("the MoE's extra read grows with B, up to\n(all its experts) / (the experts a token uses)")
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class SwitchRow:
    """One row of Switch Transformer's Table 1 (Fedus et al., arXiv 2101.03961): pre-training on C4, 32 TPUv3
    cores per model. ``quality``: negative log perplexity after 100k steps (higher is better); ``hours``: the
    time to reach −1.50 (None: not reached in the 100k steps trained); ``speed``: examples per second."""

    model: str
    quality: float
    hours: float | None
    speed: float


#: Table 1's dense baselines and Switch-Base at capacity factor 1.0 (128 experts in every other FFN layer). T5-Base
#: and Switch-Base apply the same FLOPs per token; T5-Large applies 3.5 times as many (the paper's section 3.3).
SWITCH_TABLE_1: tuple[SwitchRow, ...] = (
    SwitchRow("T5-Base", -1.731, None, 1600),
    SwitchRow("Switch-Base", -1.561, 62.8, 1000),
    SwitchRow("T5-Large", -1.550, 131.1, 470),
)
SWITCH_THRESHOLD = -1.50

#: Switch Transformer's step-basis result (Fedus et al. 2022, section 3.1 and Figure 4, right), at T5-Base's FLOPs
#: per token: "Our Switch-Base 64 expert model achieves the same performance of the T5-Base model at step 60k at
#: step 450k, which is a 7.5x speedup in terms of step time." (experts, Switch-Base's step, T5-Base's step)
SWITCH_STEP_BASIS: tuple[int, int, int] = (64, 60_000, 450_000)


def switch_per_step_line(step_basis: tuple[int, int, int] = SWITCH_STEP_BASIS) -> str:
    """The per-step half of Switch Transformer at scale, in one line: the steps a 64-expert Switch-Base needed to
    reach T5-Base's loss (section 3.1; Table 1's Switch-Base, read by ``switch_figure``, has 128 experts)."""
    experts, moe_step, dense_step = step_basis
    return (f"Switch-Base with {experts} experts (C4, T5-Base's FLOPs per token) reached T5-Base's "
            f"step-{dense_step // 1000}k loss at step {moe_step // 1000}k: {dense_step / moe_step:.1f}× fewer steps "
            "(section 3.1)")


def switch_figure(rows: Sequence[SwitchRow] = SWITCH_TABLE_1,
                  colors: Sequence[str] = ("#000000", "#0072B2", "#999999")):
    """Table 1 of Switch Transformer as three panels, one bar or dot per model: examples per second (per
    second), negative log perplexity after 100k steps (per step; the dotted line is the −1.50 threshold) and the
    hours to reach the threshold (every model that reached it needed more than 100k steps, says the caption; one
    that did not reach it in the 100k steps it was trained is marked, not drawn)."""
    import matplotlib.pyplot as plt

    fig, (speed, step, hours) = plt.subplots(1, 3, figsize=(11, 3.4))
    x = range(len(rows))
    names = [r.model for r in rows]
    speed.bar(x, [r.speed for r in rows], color=colors)
    step.scatter(x, [r.quality for r in rows], color=colors, s=60, zorder=3)
    step.axhline(SWITCH_THRESHOLD, color="#999999", ls=":", lw=1)
    step.set_ylim(-1.8, -1.45)
    hours.bar(x, [r.hours or 0 for r in rows], color=colors)
    for i, r in enumerate(rows):
        speed.annotate(f"{r.speed:,.0f}", (i, r.speed), ha="center", va="bottom", fontsize=9)
        step.annotate(f"{r.quality:.3f}", (i, r.quality), xytext=(0, 7), textcoords="offset points",
                      ha="center", fontsize=9)
        hours.annotate(f"{r.hours:.1f}" if r.hours else "not reached in\nits 100k steps", (i, r.hours or 0),
                       ha="center", va="bottom", fontsize=9)
    step.annotate("threshold", (len(rows) - 0.5, SWITCH_THRESHOLD), xytext=(0, 3), textcoords="offset points",
                  ha="right", fontsize=8, color="#666666")
    speed.set(title="per second (↑)", ylabel="examples per second")
    step.set(title="per step: after 100k steps (↑)", ylabel="neg. log perplexity")
    hours.set(title="time to the threshold (↓)", ylabel="hours of training to reach −1.50")
    hours.set_ylim(0, 1.25 * max(r.hours or 0 for r in rows))
    speed.set_ylim(0, 1.15 * max(r.speed for r in rows))
    for ax in (speed, step, hours):
        ax.set_xticks(list(x), names)
        ax.set_xlim(-0.6, len(rows) - 0.4)
    fig.suptitle("Switch Transformer, Table 1 (pre-training on C4, 32 TPUv3 cores per model)", fontsize=11)
    fig.tight_layout()
    return fig


#: name: (how the gates are made, the ``MoE`` options that make them, the scale applied after them). DeepSeekMoE
#: (Dai et al. 2024; transformers' ``DeepseekV2TopkRouter``, ``norm_topk_prob`` False) keeps the chosen softmax
#: scores as they are; DeepSeek-V3 normalises the chosen sigmoids and scales them by its ``routed_scaling_factor``.
GATE_CONVENTIONS: dict[str, tuple[str, dict, float]] = {
    "Mixtral": ("softmax over all E, renormalised over the k", {}, 1.0),
    "DeepSeekMoE": ("softmax over all E, kept as they are", {"renormalise": False}, 1.0),
    "DeepSeek-V3": ("sigmoid per expert, normalised over the k, × 2.5", {"score": "sigmoid"}, 2.5),
}


def gate_layers(d_model: int = 16, n_experts: int = 8, top_k: int = 2, seed: int = 0) -> dict[str, tuple[MoE, float]]:
    """One ``MoE`` per convention of ``GATE_CONVENTIONS``, all with the same router weights; value: (layer, scale)."""
    torch.manual_seed(seed)
    layers = {name: (MoE(d_model, n_experts, top_k, d_ff=4, **options).eval(), scale)
              for name, (_, options, scale) in GATE_CONVENTIONS.items()}
    first = next(iter(layers.values()))[0].router.weight
    with torch.no_grad():
        for layer, _ in layers.values():
            layer.router.weight.copy_(first)
    return layers


def gate_table(x: torch.Tensor, layers: dict[str, tuple[MoE, float]] | None = None) -> list[str]:
    """For one token ``x`` (d_model,): each convention's chosen experts, their gates (best first) and the gates' sum."""
    layers = layers or gate_layers(d_model=x.shape[-1])
    rows = [f"{'model':<13}{'the gates':<50}{'chosen':>8}{'gates':>15}{'sum':>7}"]
    with torch.no_grad():
        for name, (layer, scale) in layers.items():
            routing = layer.route(x.reshape(1, -1))
            gates = (routing.weight[0] * scale).tolist()
            rows.append(f"{name:<13}{GATE_CONVENTIONS[name][0]:<50}{str(routing.expert_index[0].tolist()):>8}"
                        f"{' '.join(f'{g:6.3f}' for g in gates):>15}{sum(gates):>7.3f}")
    return rows


def deepseekmoe_diagram(n_routed: int = 16, chosen: Sequence[int] = (2, 7, 12)):
    """A DeepSeekMoE layer with DeepSeek-V3's bias router (section 3) as a block diagram: a token ``x`` goes to one
    always-on shared expert and to a router that scores ``n_routed`` fine-grained experts (``s_i = σ(w_i · x)`` in DeepSeek-V3), picks the top-k of
    ``s_i + b_i`` (``chosen``, highlighted) and weights each chosen expert's output by its gate ``g_i`` (the bias
    ``b_i`` only chooses); the outputs are summed into ``y``, which the residual adds to ``x``."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig, ax = plt.subplots(figsize=(11, 3.9))
    ax.set(xlim=(-0.2, 11.2), ylim=(-2.55, 1.75))
    ax.axis("off")

    def box(x, y, w, h, text, color, size=10):
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.03,rounding_size=0.08",
                                    facecolor=color, edgecolor="0.25", lw=1))
        ax.text(x, y, text, ha="center", va="center", fontsize=size)

    def arrow(a, b, color="0.3", ls="-"):
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=13, lw=1.3, color=color, ls=ls))

    box(0.55, 0, 0.9, 0.6, "x", "#DDEEFF", 12)
    box(5.6, 1.2, 3.0, 0.6, "shared expert: every token", "#F5C6A5")
    box(2.45, -1.0, 2.0, 1.0, "router: sends x to\nthe top-k of $s_i + b_i$", "#E8E8E8")
    left, step = 4.0, 0.27
    xs = [left + i * step for i in range(n_routed)]
    for i, xi in enumerate(xs):
        on = i in chosen
        ax.add_patch(FancyBboxPatch((xi - 0.1, -1.3), 0.2, 0.6, boxstyle="round,pad=0.01",
                                    facecolor="#009E73" if on else "#DDDDDD", edgecolor="0.3", lw=0.8))
    ax.text((xs[0] + xs[-1]) / 2, -1.65, f"{n_routed} fine-grained routed experts (green: the top-k chosen)",
            ha="center", va="top", fontsize=9.5)
    box(9.3, 0, 0.6, 0.6, "Σ", "white", 13)
    box(10.6, 0, 0.8, 0.6, "y", "#DDEEFF", 12)
    arrow((1.0, 0.12), (4.1, 1.15))
    arrow((1.0, -0.12), (1.45, -0.9))
    arrow((7.1, 1.15), (9.05, 0.15))
    arrow((3.45, -1.0), (xs[0] - 0.12, -1.0))
    for i in chosen:
        arrow((xs[i], -0.68), (9.05, -0.12), color="#009E73")
    ax.text(8.0, -0.62, "× gate $g_i$", fontsize=10, color="#006B4E")
    arrow((9.6, 0), (10.2, 0))
    ax.text(0.1, -2.45, "$b_i$: one number per expert, nudged by ±γ after each step by its load; it enters the "
                        "choice only, never the gates $g_i$ (section 3)", fontsize=9.5, color="0.25")
    ax.set_title("DeepSeekMoE's layer with DeepSeek-V3's router", fontsize=11.5)
    return fig
