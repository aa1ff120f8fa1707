"""How fast is the MoE layer? ``python -m helpers.tools.benchmark_moe [--repeats N] [--threads N]``.

At T=4096 tokens, d_model=256, top-2 routing, for E=8 and E=64 SwiGLU experts
(hidden width ``matched_gated_width(256)`` = 682 each), it times one forward
pass (inference, ``torch.no_grad``) of:

* ``MoE``: ``helpers.moe.MoE``, dropless, with its sorted, grouped dispatch;
* ``loop``: ``helpers.moe.moe_forward_loop``, the readable reference (one boolean
  mask per expert and choice);
* ``dense``: one SwiGLU ``FFN`` of width ``k · 682`` = 1364, which does the
  same matrix-multiply FLOPs per token as the k experts a token visits
  (the *dense-active* FFN);
* ``dense, blocks``: the same dense FFN run on blocks of 1024 tokens. On a CPU the
  whole-batch dense FFN's hidden tensors (4096 × 1364 floats, 22 MB each) spill out
  of the cache while an expert's block of tokens fits, so the plain dense baseline is
  partly memory-bound; the blocked one shows how much of a ratio below 1 comes
  from that rather than from the MoE. It is the course's plain ``FFN`` (``nn.Linear``,
  width 1364, activation out of place), the baseline the course's targets use;
* ``dense, prepared blocks``: the same blocks run as a ``helpers.moe.PreparedFFN``, with
  every speed-up the MoE's inference path has (width padded to 1376, weights transposed,
  activation in place). ``MoE/prepared-blocks`` is therefore what splitting one FFN into
  experts costs against an equally tuned dense FFN;
* ``Mixtral``: Hugging Face ``transformers``' ``MixtralSparseMoeBlock`` holding the same
  weights (router, and every expert's W1/W3 as its fused ``gate_up_proj``, W2 as
  ``down_proj``); the benchmark checks that its output agrees with ``MoE``'s to 1e-5 before
  timing it. Skipped, with a note, when ``transformers`` is not installed.

All are timed back to back in every round, in a new (seeded) random order each
round, and before every timed call the benchmark writes 128 MB of memory, so
that each call starts with its weights and data out of the CPU's caches,
whatever ran before it (as in a model, where the other layers run between two
calls of this one). Without that, the result depended on the order: the dense
FFN's 4 MB of weights stay in a 32 MB cache from one call to the next, 64
experts' 135 MB do not. The ratios are taken per round and the median over
rounds is reported, so that slow drifts in the machine's speed affect numerator
and denominator alike. On a shared virtual machine one round's ratio can be 0.3
away from the median, so the default is 21 rounds; the columns still move by
0.05 to 0.2 between the lowest and highest of ten runs (more rounds: ``--repeats``). The ``ms`` columns are
medians of times and need not divide into the ratio columns, which are medians of
per-round ratios.

Memory: the command (``main``) first calls ``keep_freed_memory()``, so that glibc's
``malloc`` keeps freed blocks of up to 32 MB in the process instead of handing them
back to the OS; at the default sizes no timed call then pays page faults for memory
an earlier call gave back. Without it the whole-batch dense FFN (hidden tensors of
22 MB) paid 11,000-16,000 page faults, 30-45 ms of kernel time, per call in every
process checked, which flattered ``MoE/dense-active``. Larger blocks (``--tokens``
above about 6,000) still fault. ``run_moe_benchmark`` alone leaves the allocator as it is.

Clock: with one thread the default clock is the CPU time of the process
(``time.process_time``), which on an idle machine equals the wall time and on a
shared one leaves out the time the process waited for a core; with more threads
(or ``--clock wall``) it is the wall clock.

Threads: by default the benchmark runs torch on **1 thread** and restores the
previous setting afterwards. On a busy shared machine a parallel op has to
wait until every one of its threads gets a core, so a computation made of
many small ops (any MoE: one group of ops per expert) is penalised by the
scheduler rather than by its arithmetic; one thread measures the arithmetic.
``--threads 2`` (or ``threads=None``: leave torch's setting alone) measures the other case.
"""

from __future__ import annotations

import argparse
import ctypes
import random
import statistics
import time
from collections.abc import Callable, Sequence

import torch

from helpers import validate
from helpers.ffn import FFN
from helpers.moe import MoE, PreparedFFN, moe_forward_loop

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


#: tokens per block of the blocked dense baseline (about what one of 8 experts gets at T=4096, top-2)
BLOCK_TOKENS = 1024


#: bytes written before every timed call: 4× this machine's 32 MB last-level cache (raise it for a CPU with more)
EVICT_BYTES = 128 * 2**20
_EVICT: list[torch.Tensor] = []


def _evict_caches() -> None:
    """Write ``EVICT_BYTES`` of memory, so that the next call finds none of its data in the CPU's caches."""
    if not _EVICT:
        _EVICT.append(torch.empty(EVICT_BYTES // 4, dtype=torch.float32))
    _EVICT[0].fill_(1.0)


def keep_freed_memory() -> bool:
    """Make glibc's ``malloc`` keep freed memory in the process instead of handing it back to the OS.

    By default glibc returns large freed blocks to the OS (``munmap``, heap trimming), and the next call
    that allocates them pays a page fault for every 4 kB page it touches: the whole-batch dense FFN of the
    benchmark paid 11,000-16,000 faults (30-45 ms of kernel time) per call in every process checked; the
    blocked one at most a few hundred in the benchmark's own processes (22,000 in one that held a second MoE). Setting ``M_MMAP_THRESHOLD`` to its 32 MB maximum and
    ``M_TRIM_THRESHOLD`` to 1 GB (``mallopt``) keeps freed blocks of up to 32 MB in the process, so at the
    benchmark's default sizes no timed call faults (blocks above 32 MB still do). Process-wide and not undone,
    so only the commands' ``main`` functions call it. Returns False where it does not apply (not Linux with glibc).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3                    # from glibc's malloc.h
        return bool(libc.mallopt(m_mmap_threshold, 32 * 2**20)) and bool(libc.mallopt(m_trim_threshold, 2**30))
    except (OSError, AttributeError):
        return False


def _time_once(fn: Callable[[], object], clock: Callable[[], float] = time.perf_counter) -> float:
    start = clock()
    fn()
    return clock() - start


def mixtral_block(moe: MoE) -> torch.nn.Module | None:
    """A ``transformers`` ``MixtralSparseMoeBlock`` with ``moe``'s weights, or ``None`` without ``transformers``.

    ``moe`` must be a plain token-choice SwiGLU MoE without biases or capacity limit (Mixtral's layer).
    """
    try:
        from transformers import MixtralConfig
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    except ImportError:
        return None
    if moe.variant != "swiglu" or moe.experts[0].has_bias or moe.capacity_factor is not None:
        raise ValueError("mixtral_block needs a dropless SwiGLU MoE without biases")
    config = MixtralConfig(hidden_size=moe.d_model, intermediate_size=moe.d_ff, num_local_experts=moe.n_experts,
                           num_experts_per_tok=moe.top_k, hidden_act="silu")
    try:                                                     # run transformers' own (eager) expert loop
        config._experts_implementation = "eager"
    except AttributeError:
        pass
    block = MixtralSparseMoeBlock(config).eval()
    with torch.no_grad():
        block.gate.weight.copy_(moe.router.weight)
        experts = block.experts
        if hasattr(experts, "gate_up_proj"):                 # transformers >= 5: stacked expert weights
            for e, ffn in enumerate(moe.experts):
                experts.gate_up_proj[e].copy_(torch.cat([ffn.w1.weight, ffn.w3.weight]))
                experts.down_proj[e].copy_(ffn.w2.weight)
        else:                                                # transformers 4.x: one module per expert
            for e, ffn in enumerate(moe.experts):
                experts[e].w1.weight.copy_(ffn.w1.weight)
                experts[e].w3.weight.copy_(ffn.w3.weight)
                experts[e].w2.weight.copy_(ffn.w2.weight)
    return block


def _mixtral_forward(block: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = block(x[None])
    return (out[0] if isinstance(out, tuple) else out)[0]


def run_moe_benchmark(n_tokens: int = 4096, d_model: int = 256, top_k: int = 2, experts: Sequence[int] = (8, 64),
                      d_ff: int | None = None, repeats: int = 21, threads: int | None = 1, seed: int = 0,
                      warmup: int = 2, clock: str | None = None, mixtral: bool = True) -> dict[str, float]:
    """Time MoE, the reference loop and the dense-active SwiGLU FFN; return the ratios.

    Returns a flat dict (insertion-ordered, printable as ``key: value``) with, for every E in
    ``experts``: ``"E=8 MoE / dense-active"``, ``"E=8 loop / dense-active"``, ``"E=8 loop / MoE"`` (medians
    over rounds of the per-round ratios), ``"E=8 MoE / dense-active in blocks"`` (against the dense FFN run on
    blocks of ``BLOCK_TOKENS`` tokens), ``"E=8 MoE / dense-active prepared in blocks"`` (against those blocks
    run as a ``PreparedFFN``) and the median milliseconds ``"E=8 MoE ms"``, ``"E=8 loop ms"``,
    ``"E=8 dense-active ms"``, ``"E=8 dense-active in blocks ms"``, ``"E=8 dense-active prepared in blocks ms"``; plus ``"threads"``, ``"n_tokens"``, ``"d_model"``,
    ``"top_k"``, ``"d_ff_expert"``, ``"repeats"``, ``"clock"``. With ``transformers`` installed (and
    ``mixtral``) also ``"E=8 MoE / Mixtral"``, ``"E=8 Mixtral ms"`` and ``"E=8 Mixtral max |diff|"``;
    ``"mixtral"`` is 1.0 when that column was measured, else 0.0.
    """
    validate.positive_int("n_tokens", n_tokens)
    validate.positive_int("d_model", d_model)
    validate.positive_int("repeats", repeats)
    validate.non_negative_int("warmup", warmup)
    if threads is not None:
        validate.positive_int("threads", threads)
    for e in experts:
        validate.positive_int("experts entry", e)
        validate.int_in_range("top_k", top_k, 1, e)
    if clock is None:
        clock = "cpu" if threads == 1 else "wall"
    validate.one_of("clock", clock, CLOCKS)
    tick = CLOCKS[clock]
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(n_tokens, d_model, generator=gen)
        torch.manual_seed(seed)
        layers = {e: MoE(d_model, e, top_k, d_ff=d_ff, variant="swiglu").eval() for e in experts}
        d_ff_expert = next(iter(layers.values())).d_ff
        dense = FFN.from_variant("swiglu", d_model, top_k * d_ff_expert, bias=False).eval()
        prepared = PreparedFFN(dense)
        calls: dict[str, Callable[[], object]] = {"dense": lambda: dense(x),
                                                  "blocks": lambda: [dense(b) for b in x.split(BLOCK_TOKENS)],
                                                  "prepared": lambda: [prepared(b) for b in x.split(BLOCK_TOKENS)]}
        diffs: dict[int, float] = {}
        for e, layer in layers.items():
            calls[f"{e} moe"] = (lambda layer=layer: layer(x))
            calls[f"{e} loop"] = (lambda layer=layer: moe_forward_loop(layer, x))
            block = mixtral_block(layer) if mixtral else None
            if block is not None:
                with torch.no_grad():
                    diffs[e] = float((_mixtral_forward(block, x) - layer(x)[0]).abs().max())
                if diffs[e] > 1e-5:
                    raise RuntimeError(f"MixtralSparseMoeBlock disagrees with MoE at E={e}: max |diff| = {diffs[e]:.2e}")
                calls[f"{e} mixtral"] = (lambda block=block: _mixtral_forward(block, x))
        times: dict[str, list[float]] = {name: [] for name in calls}
        with torch.no_grad():
            for _ in range(warmup):
                for fn in calls.values():
                    fn()
            order, shuffler = list(calls.items()), random.Random(seed)
            for _ in range(repeats):
                shuffler.shuffle(order)                 # a new order every round: no call always follows the same one
                for name, fn in order:
                    _evict_caches()
                    times[name].append(_time_once(fn, tick))
        result: dict[str, float] = {"threads": torch.get_num_threads(), "n_tokens": n_tokens, "d_model": d_model,
                                    "top_k": top_k, "d_ff_expert": d_ff_expert, "repeats": repeats,
                                    "clock": clock, "mixtral": float(bool(diffs))}
        dense_t, blocks_t, prepared_t = times["dense"], times["blocks"], times["prepared"]
        for e in experts:
            moe_t, loop_t = times[f"{e} moe"], times[f"{e} loop"]
            result[f"E={e} MoE / dense-active"] = statistics.median(m / d for m, d in zip(moe_t, dense_t))
            result[f"E={e} MoE / dense-active in blocks"] = statistics.median(
                m / d for m, d in zip(moe_t, blocks_t))
            result[f"E={e} MoE / dense-active prepared in blocks"] = statistics.median(
                m / d for m, d in zip(moe_t, prepared_t))
            result[f"E={e} loop / dense-active"] = statistics.median(lp / d for lp, d in zip(loop_t, dense_t))
            result[f"E={e} loop / MoE"] = statistics.median(lp / m for lp, m in zip(loop_t, moe_t))
            result[f"E={e} MoE ms"] = 1e3 * statistics.median(moe_t)
            result[f"E={e} loop ms"] = 1e3 * statistics.median(loop_t)
            result[f"E={e} dense-active ms"] = 1e3 * statistics.median(dense_t)
            result[f"E={e} dense-active in blocks ms"] = 1e3 * statistics.median(blocks_t)
            result[f"E={e} dense-active prepared in blocks ms"] = 1e3 * statistics.median(prepared_t)
            if e in diffs:
                mix_t = times[f"{e} mixtral"]
                result[f"E={e} MoE / Mixtral"] = statistics.median(m / mx for m, mx in zip(moe_t, mix_t))
                result[f"E={e} Mixtral ms"] = 1e3 * statistics.median(mix_t)
                result[f"E={e} Mixtral max |diff|"] = diffs[e]
        return result
    finally:
        _EVICT.clear()                                  # free the 128 MB buffer
        torch.set_num_threads(previous_threads)


def format_moe_benchmark(result: dict[str, float]) -> str:
    """The result of ``run_moe_benchmark`` as a small table (one row per number of experts)."""
    experts = sorted({int(key.split()[0][2:]) for key in result if key.startswith("E=")})
    mixtral = bool(result.get("mixtral", 0.0))
    clock = result.get("clock", "wall")
    lines = [f"MoE forward, T={result['n_tokens']}, d_model={result['d_model']}, top-{result['top_k']}, "
             f"SwiGLU experts of width {result['d_ff_expert']}, dense-active width "
             f"{result['top_k'] * result['d_ff_expert']}; {result['threads']} "
             f"{'thread' if result['threads'] == 1 else 'threads'}, "
             f"median of {result['repeats']} interleaved rounds, {clock} clock",
             f"{'experts':>7} {'MoE/dense':>10} {'MoE/dense-in-blocks':>20} {'MoE/prepared-blocks':>20} "
             f"{'loop/dense':>11} {'loop/MoE':>9} {'MoE/Mixtral':>12} {'MoE ms':>8} {'loop ms':>8} {'dense ms':>9} "
             f"{'blocks ms':>10} {'prepared ms':>12} {'Mixtral ms':>11}"]
    for e in experts:
        mix = f"{result[f'E={e} MoE / Mixtral']:>12.2f}" if f"E={e} MoE / Mixtral" in result else f"{'-':>12}"
        mix_ms = f"{result[f'E={e} Mixtral ms']:>11.1f}" if f"E={e} Mixtral ms" in result else f"{'-':>11}"
        lines.append(f"{e:>7} {result[f'E={e} MoE / dense-active']:>10.2f} "
                     f"{result[f'E={e} MoE / dense-active in blocks']:>20.2f} "
                     f"{result[f'E={e} MoE / dense-active prepared in blocks']:>20.2f} "
                     f"{result[f'E={e} loop / dense-active']:>11.2f} "
                     f"{result[f'E={e} loop / MoE']:>9.2f} {mix} {result[f'E={e} MoE ms']:>8.1f} "
                     f"{result[f'E={e} loop ms']:>8.1f} {result[f'E={e} dense-active ms']:>9.1f} "
                     f"{result[f'E={e} dense-active in blocks ms']:>10.1f} "
                     f"{result[f'E={e} dense-active prepared in blocks ms']:>12.1f} {mix_ms}")
    if mixtral:
        worst = max(result[f"E={e} Mixtral max |diff|"] for e in experts if f"E={e} Mixtral max |diff|" in result)
        lines.append(f"MixtralSparseMoeBlock holds the same weights; outputs agree within 1e-5 "
                     f"(max |diff| {worst:.1e})")
    else:
        lines.append("MoE/Mixtral: skipped (transformers is not installed; "
                     "pip install transformers to compare with MixtralSparseMoeBlock)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helpers.tools.benchmark_moe", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21,
                        help="timing rounds, default %(default)s (the median over rounds is kept; on a shared "
                             "machine one round's ratio can be 0.3 off)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: leave torch's default)")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per forward")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default=None,
                        help="cpu (process time; default with 1 thread) or wall (default with more threads)")
    args = parser.parse_args(argv)
    kept = keep_freed_memory()
    result = run_moe_benchmark(n_tokens=args.tokens, repeats=args.repeats, threads=args.threads or None,
                               clock=args.clock)
    print(format_moe_benchmark(result))
    print("freed blocks up to 32 MB kept in the process (no page faults in timed calls at the default sizes)" if kept else
          "freed memory may go back to the OS (not glibc): page faults can add noise")
    print("targets: MoE/dense-in-blocks <= 1.05 at E=8 and E=64; loop/MoE > 1 at every E; "
          "MoE/Mixtral < 1 at E=8 and E=64 (when transformers is installed)")


if __name__ == "__main__":
    main()
