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

The same ratio, read against a link's bandwidth instead of memory's, says whether
communication can hide behind computation (``link_ridge``).

No timing lives here: CPU timings move with the machine and its load, and these
formulas do not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from helpers import validate

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


def mixtral_params_read(n_tokens: int) -> float:
    """Weights a Mixtral 8×7B decode step with ``n_tokens`` tokens reads (uniform routing; KV cache not counted).

    Every shared matrix once, but of the input-embedding table only one row per token;
    plus every expert slot some token uses (``expected_experts_touched``). About 12.75 B
    for one token, tending to the 46.6 B of all weights apart from the unread embedding rows.
    """
    validate.positive_int("n_tokens", n_tokens)
    c = MIXTRAL_CONFIG
    rows = min(n_tokens, c["vocab_size"]) * c["d_model"]
    shared = _MIXTRAL["shared"] - _MIXTRAL["input_embedding"] + rows
    return shared + expected_experts_touched(n_tokens, c["n_experts"], c["top_k"]) * _MIXTRAL["expert_slot"]
