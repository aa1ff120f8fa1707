"""A time per step from counts and a datasheet: where an MoE's per-step lead is eaten (notebook 07, section 6).

No timing is measured here. One FFN layer's forward pass over a batch of ``B`` tokens is priced on published figures
of one accelerator (``H100_SXM``: NVIDIA's datasheet, dense bf16 tensor-core peak, HBM3 bandwidth, NVLink) with the
roofline rule: the step takes the longer of its FLOPs at peak and its weight bytes at full bandwidth,

    t_layer = max(FLOPs / peak, weight bytes / bandwidth),

and, for an MoE whose experts sit on other GPUs, the token vectors sent to the ``k`` routed experts and back,
``2 · B · k · d_model · 2`` bytes at the NVLink rate per direction, are added (no overlap); ``StepTime.overlapped``
hides them behind the rest (full overlap).
Weights read are those of the experts the batch reaches, ``E (1 − (1 − k/E)^B)`` routed experts on average for
tokens routed evenly at random, plus the shared experts and the router.

``step_time`` prices one device that reads every expert a batch reaches, the cost in bytes summed over devices.
``expert_parallel_time`` prices a deployment: the routed experts split over ``G`` GPUs (expert parallelism), each GPU
holding ``E/G`` of them plus the shared expert and receiving ``B`` tokens; the group's ``G·B`` tokens reach each
expert ``G·B·k/E`` times on average, and each GPU streams only its own experts. The all-to-all is a barrier, so the
step is priced on the busiest GPU: the expected largest number of local experts reached over the ``G`` GPUs
(``busiest_reached``). The all-to-all is priced on bandwidth alone: no fixed latency per all-to-all is modelled, so at a
few tokens per GPU the price is a lower bound. DeepEP's low-latency kernels (github.com/deepseek-ai/DeepEP,
docs/legacy.md, "Low-latency kernels with pure RDMA": H800, CX7 400 Gb/s InfiniBand, 128 tokens per GPU, EP32) print
48 and 53 GB/s beside their 155 and 273 µs, the ~50 GB/s link rate, so at that size a bandwidth price fits. Across nodes, a token's own node is reached over NVLink; InfiniBand carries it only to the
other nodes it visits (``remote_nodes``), as in DeepSeek-V3 (report §3.2.2). The dense FFN is copied on every GPU
with the same ``B`` tokens and sends nothing. SwiGLU experts: ``3 · d_model · width``
weights each, ``2 ·`` that many FLOPs per token. Matmul counts: 3 per expert reached, issued one by one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Hardware", "H100_INFINIBAND", "H100_SXM", "StepTime", "average_reached", "busiest_reached", "expert_parallel_lines",
           "expert_parallel_time", "memory_lines", "per_second_lines", "remote_nodes", "step_time", "step_time_lines"]


@dataclass(frozen=True)
class Hardware:
    """Published figures of one accelerator: ``flops`` (FLOP/s), ``hbm`` and ``link`` (bytes/s; ``link`` per
    direction), ``name``."""

    name: str
    flops: float
    hbm: float
    link: float


#: NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense bf16 (1,979 with 2:4 sparsity), 3.35 TB/s HBM3, NVLink 900 GB/s
#: (both directions together: 450 GB/s each way).
H100_SXM = Hardware("H100 SXM, bf16", 989e12, 3.35e12, 450e9)
#: The same GPU talking to other nodes: one 400 Gb/s InfiniBand NDR adapter per GPU, 50 GB/s each way (DeepSeek-V3's
#: cluster: "IB (50 GB/s)", its report's §3.2.2).
H100_INFINIBAND = Hardware("H100 SXM, bf16, InfiniBand NDR", 989e12, 3.35e12, 50e9)


@dataclass(frozen=True)
class StepTime:
    """One layer's forward step over ``batch`` tokens: ``flops``, ``weight_bytes``, ``moved_bytes`` (all-to-all,
    0 for a dense layer), ``matmuls``, and the times (s) each costs on ``hardware``; ``seconds`` is
    ``max(compute, weights) + traffic``."""

    batch: int
    flops: float
    weight_bytes: float
    moved_bytes: float
    matmuls: int
    compute: float
    weights: float
    traffic: float

    @property
    def seconds(self) -> float:
        return max(self.compute, self.weights) + self.traffic

    @property
    def overlapped(self) -> float:
        """The step with the all-to-all fully hidden behind compute and weight reads."""
        return max(self.compute, self.weights, self.traffic)

    @property
    def bound(self) -> str:
        """What sets ``max(compute, weights)``: ``"FLOPs"`` or ``"bytes"``."""
        return "FLOPs" if self.compute >= self.weights else "bytes"


def step_time(batch: int, d_model: int, width: int, n_routed: int = 0, top_k: int = 0, n_shared: int = 0,
              bytes_per_weight: int = 2, hardware: Hardware = H100_SXM, spread: bool = True) -> StepTime:
    """The roofline step time of one SwiGLU FFN layer (``n_routed = 0``: a dense FFN of width ``width``) or MoE
    (``n_routed`` experts of width ``width``, top-``top_k``, plus ``n_shared`` always-on experts of that width)
    over ``batch`` tokens. ``spread``: the MoE's experts sit on other GPUs, so its tokens travel (all-to-all)."""
    expert = 3 * d_model * width                                 # weights of one SwiGLU expert
    if n_routed == 0:
        flops, reached, router, moved = 2 * expert * batch, 1.0, 0, 0.0
        matmuls = 3
    else:
        reached = n_routed * (1 - (1 - top_k / n_routed) ** batch) + n_shared
        router = d_model * n_routed
        flops = 2 * batch * ((top_k + n_shared) * expert + router)
        moved = 2.0 * batch * top_k * d_model * bytes_per_weight if spread else 0.0
        matmuls = 3 * round(reached) + 1
    weight_bytes = bytes_per_weight * (reached * expert + router)
    return StepTime(batch, float(flops), float(weight_bytes), moved, matmuls, flops / hardware.flops,
                    weight_bytes / hardware.hbm, moved / hardware.link)


def step_time_lines(batches: Sequence[int], d_model: int, width: int, n_routed: int, top_k: int, n_shared: int,
                    dense_width: int, hardware: Hardware = H100_SXM) -> list[str]:
    """Per batch size: the dense FFN of ``dense_width`` (the MoE's active width) and the MoE, each's time per
    forward step (µs) and what bounds it, the MoE's weight bytes and traffic times, and MoE time / dense time."""
    head = (f"one layer, forward, {hardware.name} ({hardware.flops / 1e12:.0f} TFLOP/s, {hardware.hbm / 1e12:.2f} TB/s"
            f" HBM, {hardware.link / 1e9:.0f} GB/s NVLink each way); times in µs")
    cols = (f"{'tokens':>7}{'dense':>9}{'bound':>7} |{'MoE FLOPs':>10}{'weights':>9}{'traffic':>9}{'total':>8}"
            f"{'bound':>7}{'matmuls':>9} |{'MoE / dense':>12}")
    rows = [head, cols]
    for b in batches:
        d = step_time(b, d_model, dense_width, hardware=hardware)
        m = step_time(b, d_model, width, n_routed, top_k, n_shared, hardware=hardware)
        rows.append(f"{b:>7,}{d.seconds * 1e6:>9,.0f}{d.bound:>7} |{m.compute * 1e6:>10,.0f}{m.weights * 1e6:>9,.0f}"
                    f"{m.traffic * 1e6:>9,.0f}{m.seconds * 1e6:>8,.0f}{m.bound:>7}{m.matmuls:>9,} |"
                    f"{m.seconds / d.seconds:>11.1f}×")
    ridge = hardware.flops / hardware.hbm                      # FLOP per byte: 2 FLOPs and 2 bytes per weight
    rows.append(f"FLOPs outweigh weight bytes from about {ridge:,.0f} tokens per step (dense) and "
                f"{ridge * (n_routed + n_shared) / (top_k + n_shared):,.0f} (MoE, every expert reached: "
                f"× (E + s)/(k + s))")
    return rows


def average_reached(gpus: int, batch: int, n_routed: int, top_k: int) -> float:
    """The expected number of its own routed experts one of ``gpus`` GPUs must read when ``gpus · batch`` tokens each
    pick ``top_k`` of ``n_routed`` experts at random: ``(E/G) · p``, each expert reached with probability
    ``p = 1 − (1 − k/E)^(G·B)`` (``busiest_reached``: the largest over the GPUs)."""
    return n_routed / gpus * (1 - (1 - top_k / n_routed) ** (gpus * batch))


def busiest_reached(gpus: int, batch: int, n_routed: int, top_k: int) -> float:
    """The expected largest number of its own routed experts any of ``gpus`` GPUs must read when ``gpus · batch``
    tokens each pick ``top_k`` of ``n_routed`` experts at random (``n_routed / gpus`` experts per GPU). Each expert is
    reached with probability ``p = 1 − (1 − k/E)^(G·B)``; treating experts as reached independently, a GPU reads
    Binomial(``E/G``, p) of its experts and ``E[max] = Σ_m (1 − F(m − 1)^G)``. A seeded simulation of the real draws
    (tests/test_moe_step_time.py) agrees to 0.01 at G = 32, B = 1."""
    per = n_routed // gpus
    p = 1 - (1 - top_k / n_routed) ** (gpus * batch)
    cdf, total = 0.0, 0.0
    for m in range(per):                                       # E[max] = Σ_{m=1..per} P(max ≥ m) = Σ (1 − F(m−1)^G)
        cdf += math.comb(per, m) * p ** m * (1 - p) ** (per - m)
        total += 1 - cdf ** gpus
    return total


def remote_nodes(gpus: int, top_k: int, gpus_per_node: int = 8, node_limit: int = 4) -> float:
    """The expected number of nodes other than its own one token is sent to: its ``top_k`` experts fall at random on
    ``min(node_limit, N)`` of the ``N = gpus / gpus_per_node`` nodes (DeepSeek-V3's node limit, 4), any of which may be
    its own; its own node is reached over NVLink."""
    nodes = max(1, gpus // gpus_per_node)
    chosen = min(node_limit, nodes)
    return chosen * (1 - (1 - 1 / chosen) ** top_k) * (1 - 1 / nodes)


def expert_parallel_time(batch: int, gpus: int, d_model: int, width: int, n_routed: int, top_k: int, n_shared: int,
                         across_nodes: bool = False, gpus_per_node: int = 8, node_limit: int = 4,
                         bytes_per_weight: int = 2, hardware: Hardware = H100_SXM,
                         infiniband: Hardware = H100_INFINIBAND, busiest: bool = True) -> StepTime:
    """The step of an expert-parallel MoE layer: ``n_routed`` experts over ``gpus`` GPUs, ``batch`` tokens per GPU
    (``gpus · batch`` in the group, routed evenly at random). Weights read: ``busiest`` (the step waits for the
    slowest GPU), the busiest GPU's expected count of its experts the group's tokens reach (``busiest_reached``);
    else the average GPU's, ``(E/G)(1 − (1 − k/E)^(G·B))``; plus the shared experts and the router. FLOPs: its
    ``batch`` tokens' share (even load). Traffic: ``2 · B · k · d_model`` values out and back over NVLink;
    ``across_nodes``: each token also crosses InfiniBand once per other node it is sent to (``remote_nodes``), and the
    two links are added. Bandwidth alone: no fixed latency per all-to-all (a lower bound at a few tokens per GPU)."""
    expert = 3 * d_model * width
    if busiest:
        routed = busiest_reached(gpus, batch, n_routed, top_k)
    else:
        routed = average_reached(gpus, batch, n_routed, top_k)
    reached = routed + n_shared
    router = d_model * n_routed
    flops = 2 * batch * ((top_k + n_shared) * expert + router)
    weight_bytes = bytes_per_weight * (reached * expert + router)
    moved = 2.0 * batch * top_k * d_model * bytes_per_weight
    traffic = moved / hardware.link
    if across_nodes:
        ib = 2.0 * batch * remote_nodes(gpus, top_k, gpus_per_node, node_limit) * d_model * bytes_per_weight
        traffic += ib / infiniband.link
        moved += ib
    return StepTime(batch, float(flops), float(weight_bytes), moved, 3 * round(reached) + 1, flops / hardware.flops,
                    weight_bytes / hardware.hbm, traffic)


def memory_lines(d_model: int, width: int, n_routed: int, n_shared: int, dense_width: int, layers: int,
                 gpu_bytes: float = 80e9, bytes_per_weight: int = 2) -> list[str]:
    """The first cost of sparsity: the expert weights must be resident. One MoE layer's and ``layers`` layers' expert
    weights, the fewest ``gpu_bytes`` GPUs that hold them laid out as expert parallelism lays them out (each GPU its
    share of the routed experts, whole, and a copy of the shared ones; nothing else counted), and the dense FFN of
    the same FLOPs (``dense_width``)."""
    expert = 3 * d_model * width * bytes_per_weight
    layer, dense = (n_routed + n_shared) * expert, 3 * d_model * dense_width * bytes_per_weight
    fewest = next(g for g in range(1, n_routed + 1)
                  if (-(-n_routed // g) + n_shared) * expert * layers <= gpu_bytes)
    return [f"memory, bf16: one MoE layer's {n_routed + n_shared} experts {layer / 1e9:.1f} GB, {layers} layers "
            f"{layer * layers / 1e12:.2f} TB: at least {fewest} GPUs of {gpu_bytes / 1e9:.0f} GB",
            f"  (each its whole routed experts and a copy of the shared one); the dense FFN of its FLOPs "
            f"{dense * layers / 1e9:.0f} GB in all, one copy per GPU"]


def expert_parallel_lines(setups: Sequence[tuple[int, int]], d_model: int, width: int, n_routed: int, top_k: int,
                          n_shared: int, dense_width: int, layers: int, hardware: Hardware = H100_SXM,
                          nvlink_column: bool = True, overlap_column: bool = False) -> list[str]:
    """Memory, then per ``(G, B)`` in ``setups`` (G GPUs, B tokens per GPU): the group's tokens per expert
    ``G·B·k/E``, each GPU's expert weights held (all layers), the experts the busiest GPU reads (a count of experts, the shared one included), and MoE / dense time
    per step (the busiest GPU's), the all-to-all over NVLink alone (``nvlink_column``) and across nodes, added and,
    with ``overlap_column``, fully overlapped. Last: the bytes one batch of 64 tokens makes the MoE read
    in all."""
    expert = 3 * d_model * width * 2
    rows = memory_lines(d_model, width, n_routed, n_shared, dense_width, layers)
    rows += [f"{'GPUs':>5}{'B':>7}{'tokens per expert':>19}{f'held per GPU ({layers} layers)':>26}"
             f"{'busiest GPU reads (experts)':>29}"
             + (f"{'NVLink':>9}{'+ InfiniBand':>14}" if nvlink_column
                else f"{'MoE / dense, added':>20}" if overlap_column else f"{'MoE / dense':>14}")
             + (f"{'overlapped':>12}" if overlap_column else "")]
    for g, b in setups:
        dense = step_time(b, d_model, dense_width, hardware=hardware).seconds
        near = expert_parallel_time(b, g, d_model, width, n_routed, top_k, n_shared, hardware=hardware)
        far = expert_parallel_time(b, g, d_model, width, n_routed, top_k, n_shared, across_nodes=True,
                                   hardware=hardware)
        held = (n_routed / g + n_shared) * expert * layers
        rows.append(f"{g:>5}{b:>7,}{g * b * top_k / n_routed:>19,.0f}{held / 1e9:>23.0f} GB"
                    f"{near.weight_bytes / expert:>29.1f}" + (f"{near.seconds / dense:>8.2f}×" if nvlink_column else "")
                    + f"{far.seconds / dense:>{19 if overlap_column and not nvlink_column else 13}.2f}×"
                    + (f"{far.overlapped / dense:>11.2f}×" if overlap_column else ""))
    one = step_time(64, d_model, width, n_routed, top_k, n_shared, spread=False)
    base = step_time(64, d_model, dense_width)
    rows.append(f"64 tokens on one device holding the whole layer: the MoE reads {one.weight_bytes / expert:.0f} "
                f"experts' weights, the dense FFN {base.weight_bytes / expert:.0f}: "
                f"{one.weight_bytes / base.weight_bytes:.0f}× the HBM bytes")
    return rows


def per_second_lines(long, moe: str, dense: str, setups: Sequence[tuple[int, int]], d_model: int, width: int,
                     n_routed: int, top_k: int, n_shared: int, dense_width: int,
                     hardware: Hardware = H100_SXM) -> list[str]:
    """Section 4's steps beside this module's cost per step: an illustration of the ``G B k / E`` argument (the toy
    and the priced layer are different models), not a prediction. ``long``: a ``helpers.moe_long_run.LongRun``
    with marks 300 and 3,000; ``moe``, ``dense``: keys of ``long.right``. Prints each arm's share of facts right
    (mean and the seed nearest the other arm), the seeds where the MoE at 300 steps beats the dense arm at 3,000,
    and the range of MoE / dense time per GPU step over ``setups`` ((G, B) pairs, both links)."""
    at = {m: i for i, m in enumerate(long.marks)}
    m300, d3000 = long.right[moe][at[300]], long.right[dense][at[3000]]
    ratios = []
    for g, b in setups:
        base = step_time(b, d_model, dense_width, hardware=hardware).seconds
        for far in (False, True):
            t = expert_parallel_time(b, g, d_model, width, n_routed, top_k, n_shared, across_nodes=far,
                                     hardware=hardware)
            ratios.append(t.seconds / base)
    return [f"share of facts right: {moe} after 300 steps {float(m300.mean()):.0%} (lowest seed "
            f"{float(m300.min()):.0%}); {dense} after 3,000 {float(d3000.mean()):.0%} (highest seed "
            f"{float(d3000.max()):.0%})",
            f"the MoE at 300 steps is ahead of the dense FFN at 3,000 in {int((m300 > d3000).sum())} of "
            f"{len(m300)} seeds: the dense FFN needs over 10× the steps",
            f"a DeepSeek-V3 layer's step, expert parallel, costs {min(ratios):.2f}× to {max(ratios):.2f}× the dense "
            f"one's (table above); the two scales are unrelated: an illustration of GBk/E, not a prediction"]
