"""How fast is the course's MoE layer? ``python -m helpers.tools.benchmark_moe [--repeats N] [--threads N]``.

At T = 4096 tokens, d_model = 256, top-2 routing, for E = 8 and E = 64 SwiGLU experts of width
``matched_gated_width(256)`` = 682, it times one forward pass (inference, ``torch.no_grad``) of:

* ``MoE``: ``helpers.moe.MoE``, dropless, with its sort-gather-combine dispatch;
* ``loop``: ``helpers.moe.moe_forward_loop``, the readable reference (one boolean mask per expert and choice);
* ``Mixtral``: Hugging Face ``transformers``' ``MixtralSparseMoeBlock`` holding the same weights (its fused
  ``gate_up_proj`` = [W1; W3] of every expert, ``down_proj`` = W2, the same router); its output is checked
  against ``MoE``'s (to 1e-5) before it is timed. Skipped, with a note, without ``transformers``;
* ``dense``: one SwiGLU ``FFN`` of width k · 682 = 1364 on all tokens, the *dense-active* FFN that does the same
  matrix-product FLOPs per token, and ``dense in blocks``, the same FFN fed 1024 tokens at a time (about what one
  of 8 experts gets), whose hidden tensors stay in the CPU's cache as an expert's do.

Method (the reasons are in ``helpers/tools/BENCHMARKS.md``): torch on 1 thread; the clock is the process's CPU
time (``time.process_time``), which a loaded machine inflates less than the wall clock; all calls are timed in
every round, in a new seeded order each round, each after 128 MB of memory is written so that it starts from
cold caches; the ratio of two calls is taken per round and the median over rounds reported (21 by default).
``main`` also keeps freed memory inside the process (``keep_freed_memory``), so that no timed call pays page
faults for memory an earlier call returned to the operating system.

Targets: ``loop/MoE`` > 1 and ``MoE/Mixtral`` ≤ 1 at E = 8 and E = 64.
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
from helpers.moe import MoE, moe_forward_loop

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
#: tokens per block of the blocked dense baseline (about what one of 8 experts gets at T = 4096, top-2)
BLOCK_TOKENS = 1024
#: bytes written before every timed call: 4× a 32 MB last-level cache (raise it for a CPU with more)
EVICT_BYTES = 128 * 2**20
TARGETS = "targets: loop/MoE > 1 and MoE/Mixtral <= 1 at E=8 and E=64"
_EVICT: list[torch.Tensor] = []


def _evict_caches() -> None:
    """Write ``EVICT_BYTES`` of memory, so that the next call finds none of its data in the CPU's caches."""
    if not _EVICT:
        _EVICT.append(torch.empty(EVICT_BYTES // 4, dtype=torch.float32))
    _EVICT[0].fill_(1.0)


def keep_freed_memory() -> bool:
    """Ask glibc's ``malloc`` to keep freed blocks of up to 32 MB in the process (``mallopt``), instead of
    returning them to the OS and page-faulting them back on the next call. Process-wide and not undone, so only
    the commands' ``main`` call it. False where it does not apply (not Linux with glibc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3                    # from glibc's malloc.h
        return bool(libc.mallopt(m_mmap_threshold, 32 * 2**20)) and bool(libc.mallopt(m_trim_threshold, 2**30))
    except (OSError, AttributeError):
        return False


def mixtral_block(moe: MoE) -> torch.nn.Module | None:
    """transformers' ``MixtralSparseMoeBlock`` with ``moe``'s weights (``helpers.real_code.mixtral_block``), or
    ``None`` without ``transformers``. ``moe`` must be a dropless SwiGLU MoE without biases (Mixtral's layer)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return None
    from helpers.real_code import mixtral_block as build

    return build(moe)


def _mixtral_forward(block: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = block(x[None])
    return (out[0] if isinstance(out, tuple) else out)[0]


def run_moe_benchmark(n_tokens: int = 4096, d_model: int = 256, top_k: int = 2, experts: Sequence[int] = (8, 64),
                      d_ff: int | None = None, repeats: int = 21, threads: int | None = 1, seed: int = 0,
                      warmup: int = 2, clock: str | None = None, mixtral: bool = True) -> dict[str, float]:
    """Time MoE, the loop, Mixtral's block and the dense-active FFN; return a flat, printable dict.

    For every E in ``experts``: ``"E=8 loop / MoE"``, ``"E=8 MoE / Mixtral"``, ``"E=8 MoE / dense-active"``,
    ``"E=8 MoE / dense-active in blocks"`` (medians over rounds of per-round ratios), ``"E=8 MoE ms"``,
    ``"E=8 loop ms"``, ``"E=8 Mixtral ms"`` (median times) and ``"E=8 Mixtral max |diff|"``; plus
    ``"dense-active ms"``, ``"dense-active in blocks ms"``, ``"threads"``, ``"n_tokens"``, ``"d_model"``,
    ``"top_k"``, ``"d_ff_expert"``, ``"repeats"``, ``"clock"`` and ``"mixtral"`` (1.0 when measured, else 0.0).
    """
    for name, value in (("n_tokens", n_tokens), ("d_model", d_model), ("repeats", repeats)):
        validate.positive_int(name, value)
    validate.non_negative_int("warmup", warmup)
    if threads is not None:
        validate.positive_int("threads", threads)
    for e in experts:
        validate.int_in_range("top_k", top_k, 1, validate.positive_int("experts entry", e))
    clock = validate.one_of("clock", clock or ("cpu" if threads == 1 else "wall"), CLOCKS)
    tick = CLOCKS[clock]
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        x = torch.randn(n_tokens, d_model, generator=torch.Generator().manual_seed(seed))
        torch.manual_seed(seed)
        layers = {e: MoE(d_model, e, top_k, d_ff=d_ff, variant="swiglu").eval() for e in experts}
        d_ff_expert = next(iter(layers.values())).d_ff
        dense = FFN.from_variant("swiglu", d_model, top_k * d_ff_expert, bias=False).eval()
        calls: dict[str, Callable[[], object]] = {"dense": lambda: dense(x),
                                                  "blocks": lambda: [dense(b) for b in x.split(BLOCK_TOKENS)]}
        diffs: dict[int, float] = {}
        for e, layer in layers.items():
            calls[f"{e} moe"] = lambda layer=layer: layer(x)
            calls[f"{e} loop"] = lambda layer=layer: moe_forward_loop(layer, x)
            block = mixtral_block(layer) if mixtral else None
            if block is not None:
                with torch.no_grad():
                    diffs[e] = float((_mixtral_forward(block, x) - layer(x)[0]).abs().max())
                if diffs[e] > 1e-5:
                    raise RuntimeError(f"MixtralSparseMoeBlock disagrees with MoE at E={e}: max |diff| = {diffs[e]:.2e}")
                calls[f"{e} mixtral"] = lambda block=block: _mixtral_forward(block, x)
        times: dict[str, list[float]] = {name: [] for name in calls}
        with torch.no_grad():
            for _ in range(warmup):
                for fn in calls.values():
                    fn()
            order, shuffler = list(calls.items()), random.Random(seed)
            for _ in range(repeats):
                shuffler.shuffle(order)                 # a new order every round: no call always follows another
                for name, fn in order:
                    _evict_caches()
                    start = tick()
                    fn()
                    times[name].append(tick() - start)
        result: dict[str, float] = {"threads": torch.get_num_threads(), "n_tokens": n_tokens, "d_model": d_model,
                                    "top_k": top_k, "d_ff_expert": d_ff_expert, "repeats": repeats, "clock": clock,
                                    "mixtral": float(bool(diffs)), "dense-active ms": 1e3 * statistics.median(
                                        times["dense"]), "dense-active in blocks ms": 1e3 * statistics.median(
                                        times["blocks"])}

        def ratio(a: str, b: str) -> float:
            return statistics.median(ta / tb for ta, tb in zip(times[a], times[b]))

        for e in experts:
            result[f"E={e} loop / MoE"] = ratio(f"{e} loop", f"{e} moe")
            if e in diffs:
                result[f"E={e} MoE / Mixtral"] = ratio(f"{e} moe", f"{e} mixtral")
            result[f"E={e} MoE / dense-active"] = ratio(f"{e} moe", "dense")
            result[f"E={e} MoE / dense-active in blocks"] = ratio(f"{e} moe", "blocks")
            for name, key in (("MoE", "moe"), ("loop", "loop"), ("Mixtral", "mixtral")):
                if f"{e} {key}" in times:
                    result[f"E={e} {name} ms"] = 1e3 * statistics.median(times[f"{e} {key}"])
            if e in diffs:
                result[f"E={e} Mixtral max |diff|"] = diffs[e]
        return result
    finally:
        _EVICT.clear()                                  # free the 128 MB buffer
        torch.set_num_threads(previous_threads)


def format_moe_benchmark(result: dict[str, float]) -> str:
    """The result of ``run_moe_benchmark`` as a small table, one row per number of experts."""
    experts = sorted({int(key.split()[0][2:]) for key in result if key.startswith("E=")})
    lines = [f"MoE forward, T={result['n_tokens']}, d_model={result['d_model']}, top-{result['top_k']}, SwiGLU "
             f"experts of width {result['d_ff_expert']} (dense-active width {result['top_k'] * result['d_ff_expert']}); "
             f"{result['threads']} thread{'' if result['threads'] == 1 else 's'}, median of {result['repeats']} "
             f"interleaved rounds, {result.get('clock', 'wall')} clock",
             f"{'experts':>7} {'loop/MoE':>9} {'MoE/Mixtral':>12} {'MoE/dense':>10} {'MoE/dense-in-blocks':>20} "
             f"{'MoE ms':>8} {'loop ms':>8} {'Mixtral ms':>11}"]
    for e in experts:
        def cell(key: str, width: int, digits: int) -> str:
            return f"{result[key]:>{width}.{digits}f}" if key in result else f"{'-':>{width}}"
        lines.append(f"{e:>7} {cell(f'E={e} loop / MoE', 9, 2)} {cell(f'E={e} MoE / Mixtral', 12, 2)} "
                     f"{cell(f'E={e} MoE / dense-active', 10, 2)} {cell(f'E={e} MoE / dense-active in blocks', 20, 2)} "
                     f"{cell(f'E={e} MoE ms', 8, 1)} {cell(f'E={e} loop ms', 8, 1)} {cell(f'E={e} Mixtral ms', 11, 1)}")
    lines.append(f"dense-active: {result['dense-active ms']:.1f} ms on all tokens, "
                 f"{result['dense-active in blocks ms']:.1f} ms in blocks of {BLOCK_TOKENS}")
    if result.get("mixtral"):
        worst = max(result[key] for key in result if key.endswith("Mixtral max |diff|"))
        lines.append(f"MixtralSparseMoeBlock holds the same weights; outputs agree within 1e-5 (max |diff| {worst:.1e})")
    else:
        lines.append("MoE/Mixtral: skipped (transformers is not installed; "
                     "pip install transformers to compare with MixtralSparseMoeBlock)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helpers.tools.benchmark_moe", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21, help="timing rounds, default %(default)s (the median of "
                        "per-round ratios is kept; on a shared machine one round's ratio can be 0.3 off)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: leave torch's default)")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per forward")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default=None,
                        help="cpu (process time; default with 1 thread) or wall (default with more threads)")
    args = parser.parse_args(argv)
    kept = keep_freed_memory()
    result = run_moe_benchmark(n_tokens=args.tokens, repeats=args.repeats, threads=args.threads or None,
                               clock=args.clock)
    print(format_moe_benchmark(result))
    if not kept:
        print("freed memory may go back to the OS (not glibc): page faults can add noise")
    print(TARGETS)


if __name__ == "__main__":
    main()
