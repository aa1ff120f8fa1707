r"""What an FFN costs when serving: arithmetic intensity, the roofline, decode vs prefill.

Generating text runs the model on a few new tokens per step (*decode*); reading
the prompt runs it on many at once (*prefill*). Every step reads every weight
matrix the tokens need from memory once, whatever the number of tokens ``B``,
while the FLOPs grow with ``B``. So per byte of weights read a step does

    intensity = FLOPs / weight bytes = 2·B / bytes_per_element   (dense FFN)

FLOPs per byte (a multiply-add, 2 FLOPs, per weight per token). The *roofline*
(Williams, Waterman & Patterson 2009) bounds the rate a machine can reach:
``min(peak FLOP/s, bandwidth · intensity)``; below the ridge point
``peak / bandwidth`` a step waits for memory, above it for arithmetic (Pope et
al. 2022 make this argument for transformer inference).

A mixture of experts keeps every expert in memory but a token uses ``k`` of
``E``: a step with ``B`` tokens touches on average
``E·(1 − (1 − k/E)^B)`` experts when routing is uniform, so at small ``B`` it
reads little more than a dense FFN of equal *active* size, and from ``B`` of a
few times ``E/k`` on nearly all of its weights, while its FLOPs stay those of
the active experts.

Measurements here are wall-clock, on whatever machine runs them: the
functions return seconds, rates and the bytes and FLOPs they are based on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from helpers import validate
from helpers.costs import ffn_flops_per_token

#: Mixtral 8×7B's published configuration (Hugging Face ``mistralai/Mixtral-8x7B-v0.1`` config.json; Jiang et
#: et al. 2024): 32 layers, width 4096, grouped-query attention with 32 query and 8 key/value heads of 128,
#: 8 SwiGLU experts of d_ff 14336 per layer, top-2, 32000-token vocabulary, untied input and output embeddings.
MIXTRAL_CONFIG = dict(n_layers=32, d_model=4096, d_ff=14336, n_heads=32, n_kv_heads=8, head_dim=128,
                      vocab_size=32000, n_experts=8, top_k=2)
MIXTRAL_EXPERTS, MIXTRAL_TOP_K = MIXTRAL_CONFIG["n_experts"], MIXTRAL_CONFIG["top_k"]


def mixtral_param_counts(config: dict[str, int] | None = None) -> dict[str, int]:
    """Parameters of Mixtral 8×7B counted from its configuration (default ``MIXTRAL_CONFIG``).

    Returns ``shared`` (attention, norms, routers, input and output embeddings: used by every token),
    ``expert_slot`` (one expert of every layer: ``n_layers · 3 · d_model · d_ff``), ``total`` (shared + E
    slots) and ``active`` (shared + k slots). The paper rounds them to 47 B and 13 B; Mistral AI's release
    post (December 2023) gives 46.7 B and 12.9 B, which these counts reproduce.
    """
    c = dict(MIXTRAL_CONFIG if config is None else config)
    d, layers = c["d_model"], c["n_layers"]
    q_and_out = 2 * d * c["n_heads"] * c["head_dim"]
    k_and_v = 2 * d * c["n_kv_heads"] * c["head_dim"]
    per_layer = q_and_out + k_and_v + d * c["n_experts"] + 2 * d            # attention, router, two RMSNorms
    shared = layers * per_layer + 2 * c["vocab_size"] * d + d               # + embeddings, unembedding, final norm
    expert_slot = layers * 3 * d * c["d_ff"]                                # W1, W3 (d_ff, d) and W2 (d, d_ff)
    return dict(shared=shared, expert_slot=expert_slot, total=shared + c["n_experts"] * expert_slot,
                active=shared + c["top_k"] * expert_slot)


_MIXTRAL = mixtral_param_counts()
#: Mixtral 8×7B: parameters in total (46.7 B) and active per token (12.9 B), counted from ``MIXTRAL_CONFIG``
MIXTRAL_TOTAL_PARAMS = _MIXTRAL["total"]
MIXTRAL_ACTIVE_PARAMS = _MIXTRAL["active"]


# ----------------------------------------------------------------------------- formulas

def ffn_intensity(n_tokens: int, *, bytes_per_element: float = 4) -> float:
    """FLOPs per byte of weights read by one dense or gated FFN on ``n_tokens`` tokens: ``2·B / bytes``.

    Every weight is read once per call and used in one multiply-add (2 FLOPs)
    per token; biases and activations are left out (they are ``O(d_ff)`` per
    token against ``O(d·d_ff)``). The width cancels: the intensity depends on
    the batch and the number format only.
    """
    validate.positive_int("n_tokens", n_tokens)
    validate.positive_float("bytes_per_element", bytes_per_element)
    return 2 * n_tokens / bytes_per_element


def expected_experts_touched(n_tokens: int, n_experts: int, top_k: int) -> float:
    """Average number of distinct experts ``B`` tokens use when each picks ``k`` of ``E`` uniformly at random.

    An expert is missed by one token with probability ``1 − k/E``, by all ``B``
    with ``(1 − k/E)^B``: ``E·(1 − (1 − k/E)^B)``. It is ``k`` for one token and
    tends to ``E``.
    """
    validate.positive_int("n_tokens", n_tokens)
    validate.positive_int("n_experts", n_experts)
    validate.int_in_range("top_k", top_k, 1, n_experts)
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** n_tokens)


def moe_intensity(n_tokens: int, n_experts: int, top_k: int, *, bytes_per_element: float = 4) -> float:
    """FLOPs per byte of expert weights read by an MoE layer on ``n_tokens`` tokens (uniform routing).

    FLOPs ``B·k·F`` for ``F`` FLOPs per token and expert; bytes
    ``expected_experts_touched · F/2 · bytes`` (each touched expert's weights
    read once): ``2·B·k / (bytes · touched)``. Equals the dense FFN's ``2B/bytes``
    for one token, and ``k/E`` of it once every expert is touched.
    """
    touched = expected_experts_touched(n_tokens, n_experts, top_k)
    validate.positive_float("bytes_per_element", bytes_per_element)
    return 2 * n_tokens * top_k / (bytes_per_element * touched)


def roofline(intensity: float | Sequence[float], peak_flops: float, bandwidth: float) -> float | list[float]:
    """Attainable FLOP/s ``min(peak_flops, bandwidth · intensity)`` (Williams et al. 2009)."""
    validate.positive_float("peak_flops", peak_flops)
    validate.positive_float("bandwidth", bandwidth)
    if isinstance(intensity, (int, float)):
        return min(peak_flops, bandwidth * intensity)
    return [min(peak_flops, bandwidth * i) for i in intensity]


def mixtral_params_read(n_tokens: int) -> float:
    """Parameters a Mixtral 8×7B decode step with ``n_tokens`` tokens reads (uniform routing, every layer).

    The shared part (1.61 B: attention, norms, routers, embeddings) plus every expert slot some token
    uses (5.64 B each over all layers), from ``mixtral_param_counts``: ``active`` for one token, tending
    to ``total``.
    """
    return _MIXTRAL["shared"] + expected_experts_touched(n_tokens, MIXTRAL_EXPERTS, MIXTRAL_TOP_K) * _MIXTRAL["expert_slot"]


# ----------------------------------------------------------------------------- measurements

def _fastest_seconds(fn: Callable[[], object], repeats: int, min_seconds: float = 0.0, warm_up: bool = True) -> float:
    """Seconds per call of ``fn`` in the fastest of ``repeats`` rounds (each round at least ``min_seconds``).

    The fastest round, not the median: other programs on the machine can only slow a round down, so the
    fastest is the best estimate of what the machine itself can do.
    """
    if warm_up:
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        calls = 0
        while True:
            fn()
            calls += 1
            if time.perf_counter() - start >= min_seconds:
                break
        best = min(best, (time.perf_counter() - start) / calls)
    return best


@dataclass(frozen=True)
class Machine:
    """This machine's roofline: ``bandwidth`` (bytes/s read) and ``peak_flops`` (the ceiling, FLOP/s), as measured."""

    bandwidth: float
    peak_flops: float

    @property
    def ridge(self) -> float:
        """The intensity (FLOPs/byte) where memory time equals compute time: ``peak_flops / bandwidth``."""
        return self.peak_flops / self.bandwidth


def measure_bandwidth(tensors: torch.Tensor | Sequence[torch.Tensor], repeats: int = 5) -> float:
    """Bytes per second read by summing ``tensors`` (e.g. a model's weight matrices; more than the caches hold).

    The fastest of ``repeats`` rounds. A streaming sum is the easiest read a CPU does: a matrix-vector
    product over the same bytes usually reads them more slowly.
    """
    tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    if not tensors:
        raise ValueError("tensors must hold at least one tensor, got none")
    for t in tensors:
        validate.float_tensor("tensors[i]", t)
    validate.positive_int("repeats", repeats)
    n_bytes = sum(t.numel() * t.element_size() for t in tensors)
    with torch.inference_mode():
        seconds = _fastest_seconds(lambda: [t.sum() for t in tensors], repeats)
    return n_bytes / seconds


def measure_matmul_rate(n_tokens: int, d_in: int, d_out: int, repeats: int = 10, seed: int = 0) -> float:
    """FLOP/s of ``x @ W.T`` with ``x`` ``(n_tokens, d_in)`` and ``W`` ``(d_out, d_in)`` (``nn.Linear``'s layout), float32.

    ``2·n·d_in·d_out`` FLOPs per call; the fastest of ``repeats`` rounds (see ``_fastest_seconds``).
    """
    for name, value in (("n_tokens", n_tokens), ("d_in", d_in), ("d_out", d_out), ("repeats", repeats)):
        validate.positive_int(name, value)
    gen = torch.Generator().manual_seed(seed)
    x, w = torch.randn(n_tokens, d_in, generator=gen), torch.randn(d_out, d_in, generator=gen)
    with torch.inference_mode():
        seconds = _fastest_seconds(lambda: x @ w.T, repeats)
    return 2 * n_tokens * d_in * d_out / seconds


def seconds_per_token(layers: Sequence[nn.Module], batch_sizes: Sequence[int], d_model: int, *,
                      repeats: int = 3, seed: int = 0) -> dict[int, float]:
    """Seconds per token and per layer of one pass of ``B`` tokens through every module in ``layers``.

    The fastest of ``repeats`` rounds (see ``_fastest_seconds``).

    The layers are run one after the other, like a model's FFNs, so with more
    weights than the caches hold each pass reads them from memory. A module that
    returns a tuple (``helpers.moe.MoE``) contributes its first element.
    Returns ``{B: seconds / (B · len(layers))}``.
    """
    if not layers:
        raise ValueError("layers must hold at least one module, got none")
    validate.positive_int("d_model", d_model)
    validate.positive_int("repeats", repeats)
    gen = torch.Generator().manual_seed(seed)
    out = {}
    with torch.inference_mode():
        for i, batch in enumerate(batch_sizes):
            validate.positive_int("batch_sizes[i]", batch)
            x = torch.randn(batch, d_model, generator=gen)

            def run(x: torch.Tensor = x) -> None:
                for layer in layers:
                    y = layer(x)
                    if isinstance(y, tuple):
                        y = y[0]

            # one warm-up call before the first batch is enough: later batches reuse the warmed-up kernels
            out[batch] = _fastest_seconds(run, repeats, min_seconds=0.01, warm_up=i == 0) / (batch * len(layers))
    return out


def weight_bytes(layers: Sequence[nn.Module]) -> int:
    """Bytes of all parameters of ``layers`` with at least 2 dimensions (the matrices)."""
    return sum(p.numel() * p.element_size() for layer in layers for p in layer.parameters() if p.dim() >= 2)


def dense_flops_per_token(d_model: int, d_ff: int, gated: bool = False) -> int:
    """Forward matmul FLOPs per token of one FFN (``helpers.costs.ffn_flops_per_token``)."""
    return ffn_flops_per_token(d_model, d_ff, gated=gated)


def seconds_per_call(fn: Callable[[], object], repeats: int = 5, min_seconds: float = 0.005) -> float:
    """Seconds per call of ``fn()``, the fastest of ``repeats`` rounds of at least ``min_seconds`` each."""
    validate.positive_int("repeats", repeats)
    with torch.inference_mode():
        return _fastest_seconds(fn, repeats, min_seconds)
