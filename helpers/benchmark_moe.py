"""How fast is the MoE layer? ``python -m helpers.benchmark_moe [--repeats N] [--threads N]``.

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
  from that rather than from the MoE.

The three are timed back to back in every round, the ratio to ``dense`` is
taken per round, and the median over rounds is reported, so that load from
other processes on a shared machine affects numerator and denominator alike.

Threads: by default the benchmark runs torch on **1 thread** and restores the
previous setting afterwards. On a busy shared machine a parallel op has to
wait until every one of its threads gets a core, so a computation made of
many small ops (any MoE: one group of ops per expert) is penalised by the
scheduler rather than by its arithmetic; one thread measures the arithmetic.
``--threads 2`` (or ``threads=None``: leave torch's setting alone) measures the other case.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import torch

from helpers import validate
from helpers.ffn import FFN
from helpers.moe import MoE, moe_forward_loop


#: tokens per block of the blocked dense baseline (about what one of 8 experts gets at T=4096, top-2)
BLOCK_TOKENS = 1024


def _time_once(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_moe_benchmark(n_tokens: int = 4096, d_model: int = 256, top_k: int = 2, experts: Sequence[int] = (8, 64),
                      d_ff: int | None = None, repeats: int = 7, threads: int | None = 1, seed: int = 0,
                      warmup: int = 2) -> dict[str, float]:
    """Time MoE, the reference loop and the dense-active SwiGLU FFN; return the ratios.

    Returns a flat dict (insertion-ordered, printable as ``key: value``) with, for every E in
    ``experts``: ``"E=8 MoE / dense-active"``, ``"E=8 loop / dense-active"``, ``"E=8 loop / MoE"`` (medians
    over rounds of the per-round ratios), ``"E=8 MoE / dense-active in blocks"`` (against the dense FFN run on
    blocks of ``BLOCK_TOKENS`` tokens) and the median milliseconds ``"E=8 MoE ms"``,
    ``"E=8 loop ms"``, ``"E=8 dense-active ms"``; plus ``"threads"``, ``"n_tokens"``, ``"d_model"``,
    ``"top_k"``, ``"d_ff_expert"``, ``"repeats"``.
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
        calls: dict[str, Callable[[], object]] = {"dense": lambda: dense(x),
                                                  "blocks": lambda: [dense(b) for b in x.split(BLOCK_TOKENS)]}
        for e, layer in layers.items():
            calls[f"{e} moe"] = (lambda layer=layer: layer(x))
            calls[f"{e} loop"] = (lambda layer=layer: moe_forward_loop(layer, x))
        times: dict[str, list[float]] = {name: [] for name in calls}
        with torch.no_grad():
            for _ in range(warmup):
                for fn in calls.values():
                    fn()
            for _ in range(repeats):
                for name, fn in calls.items():
                    times[name].append(_time_once(fn))
        result: dict[str, float] = {"threads": torch.get_num_threads(), "n_tokens": n_tokens, "d_model": d_model,
                                    "top_k": top_k, "d_ff_expert": d_ff_expert, "repeats": repeats}
        dense_t, blocks_t = times["dense"], times["blocks"]
        for e in experts:
            moe_t, loop_t = times[f"{e} moe"], times[f"{e} loop"]
            result[f"E={e} MoE / dense-active"] = statistics.median(m / d for m, d in zip(moe_t, dense_t))
            result[f"E={e} MoE / dense-active in blocks"] = statistics.median(
                m / d for m, d in zip(moe_t, blocks_t))
            result[f"E={e} loop / dense-active"] = statistics.median(lp / d for lp, d in zip(loop_t, dense_t))
            result[f"E={e} loop / MoE"] = statistics.median(lp / m for lp, m in zip(loop_t, moe_t))
            result[f"E={e} MoE ms"] = 1e3 * statistics.median(moe_t)
            result[f"E={e} loop ms"] = 1e3 * statistics.median(loop_t)
            result[f"E={e} dense-active ms"] = 1e3 * statistics.median(dense_t)
            result[f"E={e} dense-active in blocks ms"] = 1e3 * statistics.median(blocks_t)
        return result
    finally:
        torch.set_num_threads(previous_threads)


def format_moe_benchmark(result: dict[str, float]) -> str:
    """The result of ``run_moe_benchmark`` as a small table (one row per number of experts)."""
    experts = sorted({int(key.split()[0][2:]) for key in result if key.startswith("E=")})
    lines = [f"MoE forward, T={result['n_tokens']}, d_model={result['d_model']}, top-{result['top_k']}, "
             f"SwiGLU experts of width {result['d_ff_expert']}, dense-active width "
             f"{result['top_k'] * result['d_ff_expert']}; {result['threads']} "
             f"{'thread' if result['threads'] == 1 else 'threads'}, "
             f"median of {result['repeats']} interleaved rounds",
             f"{'experts':>7} {'MoE/dense':>10} {'MoE/dense-in-blocks':>20} {'loop/dense':>11} {'loop/MoE':>9} "
             f"{'MoE ms':>8} {'loop ms':>8} {'dense ms':>9} {'blocks ms':>10}"]
    for e in experts:
        lines.append(f"{e:>7} {result[f'E={e} MoE / dense-active']:>10.2f} "
                     f"{result[f'E={e} MoE / dense-active in blocks']:>20.2f} "
                     f"{result[f'E={e} loop / dense-active']:>11.2f} "
                     f"{result[f'E={e} loop / MoE']:>9.2f} {result[f'E={e} MoE ms']:>8.1f} "
                     f"{result[f'E={e} loop ms']:>8.1f} {result[f'E={e} dense-active ms']:>9.1f} "
                     f"{result[f'E={e} dense-active in blocks ms']:>10.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helpers.benchmark_moe", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timing rounds (medians are kept)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: leave torch's default)")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per forward")
    args = parser.parse_args(argv)
    result = run_moe_benchmark(n_tokens=args.tokens, repeats=args.repeats, threads=args.threads or None)
    print(format_moe_benchmark(result))
    print("targets: MoE/dense <= 1.00 at E=8 and <= 1.25 at E=64")


if __name__ == "__main__":
    main()
