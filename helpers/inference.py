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

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from helpers import validate
from helpers.costs import ffn_flops_per_token

#: Mixtral 8×7B (Jiang et al. 2024): parameters in total and active per token
MIXTRAL_TOTAL_PARAMS = 46.7e9
MIXTRAL_ACTIVE_PARAMS = 12.9e9
MIXTRAL_EXPERTS, MIXTRAL_TOP_K = 8, 2


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

    From the published totals: ``46.7 B = shared + 8·expert`` and ``12.9 B =
    shared + 2·expert`` give ``expert = 5.63 B`` (all layers' copies of one
    expert slot) and ``shared = 1.63 B`` (attention, norms, embeddings, routers).
    """
    expert = (MIXTRAL_TOTAL_PARAMS - MIXTRAL_ACTIVE_PARAMS) / (MIXTRAL_EXPERTS - MIXTRAL_TOP_K)
    shared = MIXTRAL_TOTAL_PARAMS - MIXTRAL_EXPERTS * expert
    return shared + expected_experts_touched(n_tokens, MIXTRAL_EXPERTS, MIXTRAL_TOP_K) * expert


# ----------------------------------------------------------------------------- measurements

def _median_seconds(fn: Callable[[], object], repeats: int, min_seconds: float = 0.0) -> float:
    fn()                                                          # warm up
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        calls = 0
        while True:
            fn()
            calls += 1
            if time.perf_counter() - start >= min_seconds:
                break
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


@dataclass(frozen=True)
class Machine:
    """This machine's roofline: ``bandwidth`` (bytes/s read) and ``peak_flops`` (matmul FLOP/s), as measured."""

    bandwidth: float
    peak_flops: float

    @property
    def ridge(self) -> float:
        """The intensity (FLOPs/byte) where memory time equals compute time: ``peak_flops / bandwidth``."""
        return self.peak_flops / self.bandwidth


def measure_bandwidth(tensors: torch.Tensor | Sequence[torch.Tensor], repeats: int = 3) -> float:
    """Bytes per second read by summing ``tensors`` (e.g. a model's weight matrices; more than the caches hold)."""
    tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    if not tensors:
        raise ValueError("tensors must hold at least one tensor, got none")
    for t in tensors:
        validate.float_tensor("tensors[i]", t)
    validate.positive_int("repeats", repeats)
    n_bytes = sum(t.numel() * t.element_size() for t in tensors)
    with torch.inference_mode():
        seconds = _median_seconds(lambda: [t.sum() for t in tensors], repeats)
    return n_bytes / seconds


def measure_matmul_rate(n_tokens: int, d_in: int, d_out: int, repeats: int = 3, seed: int = 0) -> float:
    """FLOP/s of ``(n_tokens × d_in) @ (d_in × d_out)`` in float32 (``2·n·d_in·d_out`` FLOPs per call)."""
    for name, value in (("n_tokens", n_tokens), ("d_in", d_in), ("d_out", d_out), ("repeats", repeats)):
        validate.positive_int(name, value)
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(n_tokens, d_in, generator=gen), torch.randn(d_in, d_out, generator=gen)
    with torch.inference_mode():
        seconds = _median_seconds(lambda: a @ b, repeats, min_seconds=0.02)
    return 2 * n_tokens * d_in * d_out / seconds


def seconds_per_token(layers: Sequence[nn.Module], batch_sizes: Sequence[int], d_model: int, *,
                      repeats: int = 3, seed: int = 0) -> dict[int, float]:
    """Median seconds per token and per layer of one pass of ``B`` tokens through every module in ``layers``.

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
        for batch in batch_sizes:
            validate.positive_int("batch_sizes[i]", batch)
            x = torch.randn(batch, d_model, generator=gen)

            def run(x: torch.Tensor = x) -> None:
                for layer in layers:
                    y = layer(x)
                    if isinstance(y, tuple):
                        y = y[0]

            out[batch] = _median_seconds(run, repeats, min_seconds=0.01) / (batch * len(layers))
    return out


def weight_bytes(layers: Sequence[nn.Module]) -> int:
    """Bytes of all parameters of ``layers`` with at least 2 dimensions (the matrices)."""
    return sum(p.numel() * p.element_size() for layer in layers for p in layer.parameters() if p.dim() >= 2)


def dense_flops_per_token(d_model: int, d_ff: int, gated: bool = False) -> int:
    """Forward matmul FLOPs per token of one FFN (``helpers.costs.ffn_flops_per_token``)."""
    return ffn_flops_per_token(d_model, d_ff, gated=gated)
