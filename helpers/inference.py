r"""Arithmetic intensity: FLOPs per byte of weights read, the number that decides what limits a step.

A step pushes ``B`` tokens through a weight matrix: ``2·B`` FLOPs per weight (one
multiply-add per token) for one read of that weight from memory. So per byte of
weights read a dense FFN does

    intensity = 2·B / bytes_per_element        (FLOPs per byte; the width cancels)

The *roofline* (Williams, Waterman & Patterson 2009) bounds what a device can reach:
``min(peak FLOP/s, bandwidth · intensity)``. Below the *ridge* ``peak / bandwidth``
a step waits for memory and its time hardly depends on ``B``; above it, for
arithmetic. ``H100_SXM`` holds NVIDIA's published figures for one such device.

A mixture of experts keeps every expert in memory while a token uses ``k`` of
``E``: ``B`` tokens routed uniformly touch ``E·(1 − (1 − k/E)^B)`` experts on
average, so the intensity of its experts is ``2·B·k / (bytes · touched)``: the
dense value for one token, ``k/E`` of it once every expert is read. To reach the
same ridge an MoE needs about ``E/k`` times the batch (``batch_for_intensity``).

Routed in *balance* instead (every expert as busy as the others), ``B`` tokens touch
``min(E, k·B)`` experts (``balanced_experts_touched``): more than at random for small
batches, so a balanced MoE reads more bytes per decode step, not fewer. ``sample_routing``
draws such routings (random, balanced, Zipf-skewed, collapsed) to measure it.

Decoding also reads the *KV cache*: the keys and values attention keeps for every earlier
token of every sequence, ``2 · n_layers · n_kv_heads · head_dim · bytes`` per token of
context (``kv_cache_bytes_per_token``). Unlike the weights it is not shared by the batch,
so it caps a decode step's intensity whatever ``B`` (``decode_step``, ``LLAMA3_8B_CONFIG``).

The same ratio, read against a link's bandwidth instead of memory's, says whether
communication can hide behind computation (``link_ridge``, ``plot_link_roofline``).

No timing lives here: CPU timings move with the machine and its load, and these
formulas do not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from helpers import validate
from helpers.costs import ffn_flops_per_token

# ----------------------------------------------------------------------------- published hardware figures


@dataclass(frozen=True)
class Hardware:
    """A device's dense peak (FLOP/s, in the number format named) and its memory bandwidth (bytes/s)."""

    name: str
    flops: float
    memory_bandwidth: float

    @property
    def ridge(self) -> float:
        """FLOPs per byte where reading the weights takes as long as computing with them: ``flops / bandwidth``."""
        return self.flops / self.memory_bandwidth

    def link_ridge(self, link_bandwidth: float) -> float:
        """FLOPs per byte sent at which computing takes as long as sending over a link of ``link_bandwidth`` B/s."""
        validate.positive_float("link_bandwidth", link_bandwidth)
        return self.flops / link_bandwidth


#: NVIDIA H100 SXM datasheet: BF16 Tensor Core 1,979 TFLOP/s "with sparsity" (dense: half, 989),
#: GPU memory bandwidth 3.35 TB/s (HBM3). Ridge ≈ 295 FLOPs per byte.
H100_SXM = Hardware("H100 SXM, bf16 dense", 989e12, 3.35e12)
#: The same datasheet's FP8 Tensor Core peak, 3,958 TFLOP/s "with sparsity" (dense: half, 1,979): twice bf16's.
H100_SXM_FP8 = Hardware("H100 SXM, fp8 dense", 1979e12, 3.35e12)
#: H100 SXM datasheet: 80 GB of HBM3 per GPU (the product's label; the device holds more, below).
H100_SXM_MEMORY = 80e9
#: What ``nvidia-smi`` reports for an "H100 80GB HBM3": 81,559 MiB = 85.52e9 bytes (NVIDIA/nccl issue #1264).
H100_SXM_MEMORY_REPORTED = 81559 * 2 ** 20
#: NVLink 4 on an H100 SXM: 900 GB/s per GPU in total, 450 GB/s in each direction (datasheet).
NVLINK4_PER_DIRECTION = 450e9
#: One InfiniBand NDR port (ConnectX-7): 400 Gb/s = 50 GB/s in each direction.
INFINIBAND_NDR = 50e9


# ----------------------------------------------------------------------------- formulas

def ffn_intensity(n_tokens: int, *, bytes_per_element: float = 4) -> float:
    """FLOPs per byte of weights read by one dense or gated FFN on ``n_tokens`` tokens: ``2·B / bytes``.

    Every weight is read once per step and used in one multiply-add (2 FLOPs) per
    token; biases, activations and the inputs themselves are left out (``O(d + d_ff)``
    per token against ``O(d·d_ff)`` weights, small while ``B`` is well below ``d``).
    """
    validate.positive_int("n_tokens", n_tokens)
    validate.positive_float("bytes_per_element", bytes_per_element)
    return 2 * n_tokens / bytes_per_element


def expected_experts_touched(n_tokens: int, n_experts: int, top_k: int) -> float:
    """Average number of distinct experts ``B`` tokens use when each picks ``k`` of ``E`` uniformly at random.

    An expert is missed by one token with probability ``1 − k/E``, by all ``B`` with
    ``(1 − k/E)^B``: ``E·(1 − (1 − k/E)^B)``. It is ``k`` for one token and tends to ``E``.
    """
    validate.positive_int("n_tokens", n_tokens)
    validate.positive_int("n_experts", n_experts)
    validate.int_in_range("top_k", top_k, 1, n_experts)
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** n_tokens)


def balanced_experts_touched(n_tokens: int, n_experts: int, top_k: int) -> int:
    """Distinct experts ``B`` tokens use when routing is perfectly balanced: ``min(E, k·B)``.

    Each token takes ``k`` distinct experts, and an even load spreads the ``k·B`` slots over as many
    experts as there are: the most a batch can touch (every token on the same ``k`` experts is the least).
    """
    validate.positive_int("n_tokens", n_tokens)
    validate.positive_int("n_experts", n_experts)
    validate.int_in_range("top_k", top_k, 1, n_experts)
    return min(n_experts, top_k * n_tokens)


#: the stylised routers ``sample_routing`` draws from
ROUTERS = ("random", "balanced", "skewed", "collapsed")


def sample_routing(n_tokens: int, n_experts: int, top_k: int, router: str = "random", *,
                   generator=None):
    """``(n_tokens, top_k)`` int64 expert indices, ``k`` distinct per token, drawn by a stylised router.

    ``"random"``: ``k`` of ``E`` uniformly at random (``expected_experts_touched``); ``"balanced"``: token ``t``
    takes experts ``(t·k + j) mod E``, every expert equally busy (``balanced_experts_touched``); ``"skewed"``: ``k``
    without replacement with weights ``∝ 1/(e+1)`` (Zipf's law, the Gumbel top-k trick); ``"collapsed"``: every
    token on experts ``0 … k−1``, the fewest bytes and the busiest experts. ``generator``: a ``torch.Generator``.
    """
    import torch

    validate.positive_int("n_tokens", n_tokens)
    validate.positive_int("n_experts", n_experts)
    validate.int_in_range("top_k", top_k, 1, n_experts)
    validate.one_of("router", router, ROUTERS)
    if router == "balanced":
        return (torch.arange(n_tokens).unsqueeze(1) * top_k + torch.arange(top_k)) % n_experts
    if router == "collapsed":
        return torch.arange(top_k).expand(n_tokens, top_k).clone()
    scores = torch.rand(n_tokens, n_experts, generator=generator, dtype=torch.float64)
    if router == "skewed":                       # log-weights plus Gumbel noise: top-k samples without replacement
        scores = -torch.log(torch.arange(1, n_experts + 1, dtype=torch.float64)) - torch.log(-torch.log(scores))
    return scores.topk(top_k, dim=-1).indices


def moe_intensity(n_tokens: int, n_experts: int, top_k: int, *, bytes_per_element: float = 4) -> float:
    """FLOPs per byte of expert weights read by an MoE layer on ``n_tokens`` tokens (uniform routing).

    ``2·B·k / (bytes · touched)`` with ``touched = expected_experts_touched``: the
    dense FFN's ``2B/bytes`` for one token, ``k/E`` of it once every expert is read.
    """
    touched = expected_experts_touched(n_tokens, n_experts, top_k)
    validate.positive_float("bytes_per_element", bytes_per_element)
    return 2 * n_tokens * top_k / (bytes_per_element * touched)


def batch_for_intensity(target: float, n_experts: int = 1, top_k: int = 1, *,
                        bytes_per_element: float = 2) -> int:
    """Smallest batch ``B`` whose (MoE) intensity reaches ``target`` FLOPs per byte (uniform routing).

    ``n_experts = top_k = 1`` is a dense FFN: ``ceil(target · bytes / 2)``. For an MoE
    the answer is close to ``target · bytes / 2 · E/k`` once that batch touches every expert.
    """
    validate.positive_float("target", target)
    validate.positive_int("n_experts", n_experts)
    validate.int_in_range("top_k", top_k, 1, n_experts)
    low, high = 1, 2
    while moe_intensity(high, n_experts, top_k, bytes_per_element=bytes_per_element) < target:
        low, high = high, 2 * high
    while low < high:                                   # the intensity grows with B: bisect
        mid = (low + high) // 2
        if moe_intensity(mid, n_experts, top_k, bytes_per_element=bytes_per_element) >= target:
            high = mid
        else:
            low = mid + 1
    return low


def roofline(intensity: float | Sequence[float], peak_flops: float, bandwidth: float) -> float | list[float]:
    """Attainable FLOP/s ``min(peak_flops, bandwidth · intensity)`` (Williams et al. 2009)."""
    validate.positive_float("peak_flops", peak_flops)
    validate.positive_float("bandwidth", bandwidth)
    if isinstance(intensity, (int, float)):
        return min(peak_flops, bandwidth * intensity)
    return [min(peak_flops, bandwidth * i) for i in intensity]


def plot_roofline(ax, hardware: Sequence[Hardware], groups: Sequence[tuple[str, str, Sequence[tuple[float, str]]]],
                  *, intensity_range: tuple[float, float] = (0.5, 2e4), hollow: Sequence[str] = (),
                  hollow_label: str | None = None, markers: Sequence[str] | None = None):
    """Draw the roofline of each device on ``ax`` and place points on the first device's roof.

    Log-log axes: attainable TFLOP/s ``min(peak, bandwidth · I)`` against the intensity ``I`` (FLOPs per byte)
    over ``intensity_range``, one line per device, its ridge dotted. ``groups`` holds
    ``(legend label, colour, [(intensity, point label), ...])``: each point is drawn at the first device's
    attainable FLOP/s for its intensity and labelled beside it. Points whose label is in ``hollow`` (e.g. steps
    that do not fit in memory) are drawn open, with one legend entry ``hollow_label``. ``markers``: one matplotlib
    marker per group (default ``"o"`` for all), so groups whose points nearly coincide stay apart. Returns ``ax``.
    """
    if not hardware:
        raise ValueError("hardware: expected at least one Hardware, got an empty sequence")
    markers = ["o"] * len(groups) if markers is None else list(markers)
    if len(markers) != len(groups):
        raise ValueError(f"markers: expected one marker per group ({len(groups)}), got {len(markers)}")
    low, high = intensity_range
    validate.positive_float("intensity_range[0]", low)
    if not high > low:
        raise ValueError(f"intensity_range: expected (low, high) with high > low, got {intensity_range}")
    for index, device in enumerate(hardware):
        xs = [low, device.ridge, high]
        style = dict(color="black", lw=2) if index == 0 else dict(color="0.55", lw=1.5, ls="--")
        ax.plot(xs, [f / 1e12 for f in roofline(xs, device.flops, device.memory_bandwidth)],
                label=f"{device.name} roof (ridge {device.ridge:,.0f})", **style)
        ax.axvline(device.ridge, color=style["color"], ls=":", lw=1)
    first = hardware[0]
    for index, (label, color, points) in enumerate(groups):
        xs = [i for i, _ in points]
        ys = [f / 1e12 for f in roofline(xs, first.flops, first.memory_bandwidth)]
        filled = [(x, y) for x, y, (_, text) in zip(xs, ys, points) if text not in hollow]
        ax.plot(*zip(*filled) if filled else ([], []), markers[index], color=color, ms=8, mec="black", label=label,
                zorder=3)
        if len(filled) < len(points):
            ax.plot(*zip(*[(x, y) for x, y, (_, text) in zip(xs, ys, points) if text in hollow]), markers[index],
                    mfc="white", mec=color, mew=2, ms=8, zorder=4)      # above other groups
        for x, y, (_, text) in zip(xs, ys, points):
            ax.annotate(text, (x, y), textcoords="offset points", fontsize=8, color=color,
                        xytext=(-8, 7) if index % 2 == 0 else (6, -13), ha="right" if index % 2 == 0 else "left")
    if hollow and hollow_label:
        ax.plot([], [], "o", mfc="white", mec="black", mew=2, ms=8, label=hollow_label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlim=intensity_range, xlabel="arithmetic intensity (FLOPs per byte read from memory)",
           ylabel="attainable TFLOP/s")
    return ax


def plot_link_roofline(ax, curves: Sequence[tuple[str, str, Sequence[tuple[int, float]]]],
                       links: Sequence[tuple[str, float, int | None]], *,
                       points: Sequence[tuple[int, float, str, str]] = (), styles: Sequence[str] | None = None,
                       markers: Sequence[str | None] | None = None):
    """Draw FLOPs per byte sent against the group size ``R`` on ``ax``, with each link's ratio as a line.

    The communication twin of ``plot_roofline``: a split's transfers can hide behind its arithmetic where its
    curve lies above a link's ``link_ridge``. ``curves`` holds ``(label, colour, [(R, FLOPs per byte), ...])``;
    ``links`` holds ``(name, FLOPs per byte it hides, largest R it joins or None)``, drawn as a horizontal
    dashed line up to that ``R`` (NVLink stops at a server's 8 GPUs); ``points`` are ``(R, FLOPs per byte,
    label, colour)`` marked on top (labelled below on the left at the largest ``R``). ``styles``: one matplotlib line
    style per curve (default solid), so curves that nearly coincide stay apart; ``markers``: one matplotlib marker
    (or None) per curve, a curve with a marker drawn on top. Log-log axes, ``R`` in base 2.
    Returns ``ax``.
    """
    if not curves:
        raise ValueError("curves: expected at least one (label, colour, [(R, FLOPs per byte), ...]), got none")
    group_sizes = [r for _, _, values in curves for r, _ in values]
    for r in group_sizes:
        if not (isinstance(r, int) and r >= 2):
            raise ValueError(f"curves: expected group sizes R >= 2 (ints), got {r!r}")
    low, high = min(group_sizes), max(group_sizes)
    styles = ["-"] * len(curves) if styles is None else list(styles)
    if len(styles) != len(curves):
        raise ValueError(f"styles: expected one line style per curve ({len(curves)}), got {len(styles)}")
    markers = [None] * len(curves) if markers is None else list(markers)
    if len(markers) != len(curves):
        raise ValueError(f"markers: expected one marker (or None) per curve ({len(curves)}), got {len(markers)}")
    for (label, color, values), style, marker in zip(curves, styles, markers):
        ax.plot(*zip(*values), color=color, lw=2, ls=style, label=label, marker=marker, ms=5,
                zorder=2.5 if marker else 2)
    for index, (name, ratio, reach) in enumerate(links):
        validate.positive_float(f"links[{index}] ratio", ratio)
        end = high if reach is None else min(reach, high)
        ax.plot([low, end], [ratio, ratio], color="0.3", ls="--", lw=1.5)
        ax.annotate(f"{name}: {ratio:,.0f}" + ("" if reach is None else f" (R ≤ {reach})"),
                    (math.sqrt(low * end), ratio), textcoords="offset points", xytext=(0, 5), ha="center",
                    fontsize=9, color="0.2")                                # centred on its span
    for r, value, label, color in points:
        ax.plot([r], [value], "o", color=color, ms=7, mec="black", zorder=3)
        left = r >= high
        ax.annotate(label, (r, value), textcoords="offset points", xytext=(-6, -8) if left else (6, -12), fontsize=8,
                    color=color, ha="right" if left else "left", va="top" if left else "baseline")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(xlim=(low, high), xlabel="ranks in the group R", ylabel="FLOPs per byte sent")
    return ax


SPLITS = ("TP", "EP", "FSDP")


def training_flops_per_byte(split: str, world_size: int, *, d_model: int = 4096, d_ff: int = 14336, top_k: int = 2,
                            tokens_per_rank: int = 4096) -> float:
    """Training FLOPs one rank does per byte it sends in bf16, for one way of splitting ``world_size`` ranks.

    ``"TP"``: ``1/R`` of a token's ``top_k`` gated experts' FLOPs against a ring share of one all-reduce of
    ``d_model`` numbers per pass, ``(9/4)·k·d_ff/(R−1)``. ``"EP"``: all their FLOPs against the ``k`` rows sent out
    and back under uniform routing, ``(9/4)·d_ff·R/(R−1)``. ``"FSDP"``: any model (the weights cancel),
    ``b·R/(R−1)`` for ``tokens_per_rank`` = b. Defaults: Mixtral's experts.
    """
    from helpers import expert_parallel, fully_sharded, tensor_parallel    # they run collectives; load on use

    validate.one_of("split", split, SPLITS)
    validate.int_in_range("world_size", world_size, 2, 1 << 20)
    if split == "FSDP":
        return fully_sharded.fully_sharded_flops_per_byte(tokens_per_rank, world_size)
    flops = top_k * ffn_flops_per_token(d_model, d_ff, gated=True, backward=True)
    if split == "TP":
        sent = tensor_parallel.tensor_parallel_bytes_per_token(d_model, world_size, bytes_per_element=2, backward=True)
        return flops / world_size / sent
    return flops / expert_parallel.expected_bytes_per_token(d_model, top_k, world_size, bytes_per_element=2,
                                                            backward=True)


#: DeepSeek-V3's routed experts (DeepSeek-AI 2024, report §4.2): width 7168, expert width 2048, 8 per token;
#: keyword overrides for ``training_flops_per_byte`` (whose defaults are Mixtral's experts).
DEEPSEEK_V3_EXPERTS = dict(d_model=7168, d_ff=2048, top_k=8)


def largest_hidden_group(split: str, link_ratio: float, *, max_ranks: int = 1024, **shape: int) -> int:
    """The largest group size ``R`` (2 … ``max_ranks``) whose ``training_flops_per_byte(split, R, **shape)`` is
    at least ``link_ratio``: the most ranks whose transfers a link can hide; 1 if no ``R`` ≥ 2 reaches it.

    Every split's ratio falls as ``R`` grows (TP's as ``1/(R−1)``), so this is where its curve crosses the
    link's line. Gated experts in bf16, compared in floats (an exact tie needs integers: Exercise 2).
    """
    validate.positive_float("link_ratio", link_ratio)
    validate.int_in_range("max_ranks", max_ranks, 2, 1 << 20)
    hidden = [r for r in range(2, max_ranks + 1) if training_flops_per_byte(split, r, **shape) >= link_ratio]
    return max(hidden, default=1)


# ----------------------------------------------------------------------------- Mixtral 8x7B, counted

#: Mixtral 8×7B's published configuration (Hugging Face ``mistralai/Mixtral-8x7B-v0.1`` config.json; Jiang
#: et al. 2024): 32 layers, width 4096, grouped-query attention with 32 query and 8 key/value heads of 128,
#: 8 SwiGLU experts of d_ff 14336 per layer, top-2, 32000-token vocabulary, untied input and output embeddings.
MIXTRAL_CONFIG = dict(n_layers=32, d_model=4096, d_ff=14336, n_heads=32, n_kv_heads=8, head_dim=128,
                      vocab_size=32000, n_experts=8, top_k=2)


def mixtral_param_counts(config: dict[str, int] | None = None) -> dict[str, int]:
    """Parameters of Mixtral 8×7B counted from its configuration (default ``MIXTRAL_CONFIG``).

    ``shared`` (attention, norms, routers, input and output embeddings: used by every token),
    ``expert_slot`` (one expert of every layer: ``n_layers · 3 · d_model · d_ff``), ``total``
    (shared + E slots), ``active`` (shared + k slots) and ``input_embedding`` (the table a step
    reads only one row of per token). Mistral AI's release post gives 46.7 B and 12.9 B.
    """
    c = dict(MIXTRAL_CONFIG if config is None else config)
    d, layers = c["d_model"], c["n_layers"]
    q_and_out = 2 * d * c["n_heads"] * c["head_dim"]
    k_and_v = 2 * d * c["n_kv_heads"] * c["head_dim"]
    per_layer = q_and_out + k_and_v + d * c["n_experts"] + 2 * d            # attention, router, two RMSNorms
    shared = layers * per_layer + 2 * c["vocab_size"] * d + d               # + embeddings, unembedding, final norm
    expert_slot = layers * 3 * d * c["d_ff"]                                # W1, W3 (d_ff, d) and W2 (d, d_ff)
    return dict(shared=shared, expert_slot=expert_slot, total=shared + c["n_experts"] * expert_slot,
                active=shared + c["top_k"] * expert_slot, input_embedding=c["vocab_size"] * d)


_MIXTRAL = mixtral_param_counts()
#: Mixtral 8×7B: parameters in total (46.7 B) and active per token (12.9 B), counted from ``MIXTRAL_CONFIG``
MIXTRAL_TOTAL_PARAMS = _MIXTRAL["total"]
MIXTRAL_ACTIVE_PARAMS = _MIXTRAL["active"]


ROUTINGS = ("random", "balanced")


def mixtral_params_read(n_tokens: int, routing: str = "random") -> float:
    """Weights a Mixtral 8×7B decode step with ``n_tokens`` tokens reads (KV cache not counted).

    Every shared matrix once, but of the input-embedding table only one row per token;
    plus every expert slot some token uses: ``expected_experts_touched`` for ``routing="random"``
    (each token's two experts drawn uniformly at random), ``balanced_experts_touched`` for
    ``"balanced"`` (an even load). About 12.75 B for one token, tending to the 46.6 B of all
    weights apart from the unread embedding rows.
    """
    validate.positive_int("n_tokens", n_tokens)
    validate.one_of("routing", routing, ROUTINGS)
    c = MIXTRAL_CONFIG
    rows = min(n_tokens, c["vocab_size"]) * c["d_model"]
    shared = _MIXTRAL["shared"] - _MIXTRAL["input_embedding"] + rows
    touched = (expected_experts_touched if routing == "random" else balanced_experts_touched)(
        n_tokens, c["n_experts"], c["top_k"])
    return shared + touched * _MIXTRAL["expert_slot"]


# ----------------------------------------------------------------------------- decoding a dense model: weights + KV cache

#: Llama-3-8B's published configuration (Hugging Face ``meta-llama/Meta-Llama-3-8B`` config.json): 32 layers, width
#: 4096, 32 query heads and 8 key/value heads of 128 (grouped-query attention), SwiGLU FFN of d_ff 14336, a
#: 128,256-token vocabulary, untied input and output embeddings, context 8192. 8.03 B parameters.
LLAMA3_8B_CONFIG = dict(n_layers=32, d_model=4096, d_ff=14336, n_heads=32, n_kv_heads=8, head_dim=128,
                        vocab_size=128256, n_ctx=8192)


def dense_param_counts(config: dict[str, int] | None = None) -> dict[str, int]:
    """Parameters of a Llama-style dense decoder (default ``LLAMA3_8B_CONFIG``), by part.

    ``attention`` (Q and output ``d × n_heads·head_dim``, K and V ``d × n_kv_heads·head_dim``, every layer),
    ``ffn`` (three ``d × d_ff`` matrices per layer), ``norms`` (two RMSNorms per layer and a final one),
    ``input_embedding`` and ``output_embedding`` (``vocab × d`` each, untied) and ``total``.
    """
    c = dict(LLAMA3_8B_CONFIG if config is None else config)
    d, layers = c["d_model"], c["n_layers"]
    parts = dict(attention=layers * 2 * d * c["head_dim"] * (c["n_heads"] + c["n_kv_heads"]),
                 ffn=layers * 3 * d * c["d_ff"], norms=layers * 2 * d + d,
                 input_embedding=c["vocab_size"] * d, output_embedding=c["vocab_size"] * d)
    return {**parts, "total": sum(parts.values())}


def kv_cache_bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int, *, bytes_per_number: float = 2) -> float:
    """Bytes of KV cache one token of context holds: a key and a value of ``n_kv_heads·head_dim`` numbers per layer.

    ``2 · n_layers · n_kv_heads · head_dim · bytes``: Llama-3-8B in bf16, 2·32·8·128·2 = 131,072 bytes (128 KiB).
    """
    for name, value in dict(n_layers=n_layers, n_kv_heads=n_kv_heads, head_dim=head_dim).items():
        validate.positive_int(name, value)
    validate.positive_float("bytes_per_number", bytes_per_number)
    return 2 * n_layers * n_kv_heads * head_dim * bytes_per_number


@dataclass(frozen=True)
class DecodeStep:
    """One decode step of ``batch`` sequences, each with ``context`` tokens in its KV cache (bytes and FLOPs).

    ``weight_bytes``: every weight read once (of the input embedding only the batch's rows); ``ffn_bytes``: the
    FFNs' share of them; ``kv_bytes``: every sequence's whole cache; ``flops``: matrix products with the weights
    (2 per weight and token) plus attention's scores and mixing over the context (``4·context·n_heads·head_dim``
    per layer and token).
    """

    batch: int
    context: int
    weight_bytes: float
    ffn_bytes: float
    kv_bytes: float
    flops: float
    held_bytes: float = 0.0

    @property
    def memory_bytes(self) -> float:
        """Bytes the device must hold for the step: every weight (``held_bytes``, the whole embedding too) and
        every sequence's cache."""
        return self.held_bytes + self.kv_bytes

    @property
    def total_bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def intensity(self) -> float:
        """FLOPs per byte read by the whole step."""
        return self.flops / self.total_bytes

    def seconds(self, hardware: Hardware) -> float:
        """The roofline's lower bound on the step's time: the longer of reading its bytes and doing its FLOPs."""
        return max(self.total_bytes / hardware.memory_bandwidth, self.flops / hardware.flops)


def decode_step(batch: int, context: int, config: dict[str, int] | None = None, *,
                bytes_per_number: float = 2) -> DecodeStep:
    """Bytes and FLOPs of one decode step of a Llama-style dense model (default ``LLAMA3_8B_CONFIG``).

    ``batch`` sequences each add one token and attend over ``context`` cached tokens. The weights are read once
    and shared by the batch; each sequence's KV cache is its own, so the cache's bytes grow with ``batch·context``
    like the attention FLOPs: past a few hundred tokens of context no batch reaches the weights' ridge.
    """
    validate.positive_int("batch", batch)
    validate.non_negative_int("context", context)
    c = dict(LLAMA3_8B_CONFIG if config is None else config)
    counts = dense_param_counts(c)
    weights_read = counts["total"] - counts["input_embedding"] + min(batch, c["vocab_size"]) * c["d_model"]
    multiplied = counts["total"] - counts["input_embedding"] - counts["norms"]   # a lookup is not a product
    attention = 4 * context * c["n_heads"] * c["head_dim"] * c["n_layers"]
    kv = batch * context * kv_cache_bytes_per_token(c["n_layers"], c["n_kv_heads"], c["head_dim"],
                                                     bytes_per_number=bytes_per_number)
    return DecodeStep(batch, context, weights_read * bytes_per_number, counts["ffn"] * bytes_per_number, kv,
                      batch * (2 * multiplied + attention), counts["total"] * bytes_per_number)


def decode_intensity_limit(context: int, config: dict[str, int] | None = None, *, bytes_per_number: float = 2) -> float:
    """The intensity ``decode_step`` tends to as the batch grows: one token's FLOPs over its own cache's bytes.

    ``(2·N + 4·n_layers·context·n_heads·head_dim) / (context · kv_cache_bytes_per_token)``, ``N`` the weights a
    token multiplies with; infinite for an empty context (then the weights' ``2B/bytes`` grows without bound).
    """
    validate.positive_int("context", context)
    c = dict(LLAMA3_8B_CONFIG if config is None else config)
    one = decode_step(1, context, c, bytes_per_number=bytes_per_number)
    return one.flops / one.kv_bytes


def largest_batch_that_fits(context: int, memory: float = H100_SXM_MEMORY, config: dict[str, int] | None = None, *,
                            bytes_per_number: float = 2) -> int:
    """Most sequences of ``context`` tokens whose caches fit in ``memory`` bytes beside every weight; 0 if none.

    ``floor((memory − s·N_total) / (context · kv_cache_bytes_per_token))``. The default ``memory`` is the
    datasheet's 80 × 10⁹ bytes (Llama-3-8B in bf16 leaves 63.9 GB for the cache); an "80GB" H100 reports
    ``H100_SXM_MEMORY_REPORTED`` = 81,559 MiB = 85.5 GB, which notebook 06 passes (69.5 GB for the cache).
    """
    validate.positive_int("context", context)
    validate.positive_float("memory", memory)
    step = decode_step(1, context, config, bytes_per_number=bytes_per_number)
    return max(0, int((memory - step.held_bytes) // step.kv_bytes))


def ridge_context_that_fits(hardware: Hardware = H100_SXM, memory: float = H100_SXM_MEMORY,
                            config: dict[str, int] | None = None, *, bytes_per_number: float = 2) -> tuple[int, int]:
    """The longest context at which a batch that fits in ``memory`` reaches ``hardware``'s ridge, and that batch.

    Returns ``(context, batch)``; ``(0, 0)`` if even one token of context fails. Intensity grows with the batch,
    so the largest batch that fits is the one to try; it shrinks as the context grows, and so does its intensity.
    """
    best = (0, 0)
    for context in range(1, 1 << 17):
        batch = largest_batch_that_fits(context, memory, config, bytes_per_number=bytes_per_number)
        if batch == 0 or decode_step(batch, context, config,
                                     bytes_per_number=bytes_per_number).intensity < hardware.ridge:
            return best
        best = (context, batch)
    return best
