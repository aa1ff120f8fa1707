"""The course's performance figures in one command: ``python -m helpers.tools.benchmark``.

It prints, in one run:

* **achieved speed**: the FFN forward's rate (GFLOP/s, counting the
  ``4·d·d_ff`` FLOPs per token of its two matrix products) against a bare
  matrix multiply of the same shapes, as a ratio per size;
* **activation memory**: bytes autograd saves for one FFN at T=4096, chunked
  and checkpointed over plain (deterministic: measured with saved-tensor hooks);
* **mixture of experts**: the ratios of ``helpers.tools.benchmark_moe.run_moe_benchmark()``
  (the MoE layer against its readable loop, Hugging Face's ``MixtralSparseMoeBlock`` and a dense FFN of
  the same active FLOPs).

Method, targets and measured figures: ``helpers/tools/BENCHMARKS.md``.

Timings on a shared machine are noisy: every size is timed in several rounds,
the FFN and the matmul alternate inside a round, and the medians are kept.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from helpers import validate
from helpers.chunking import ActivationMemory, activation_memory
from helpers.costs import ffn_flops_per_token
from helpers.ffn import FFN
from helpers.costs import torch_threads


@dataclass(frozen=True)
class RateRow:
    """One size of the FFN-vs-matmul comparison. Rates in GFLOP/s of the ``4·d·d_ff·T`` matmul FLOPs.

    ``ffn_seconds``, ``matmul_seconds``: median seconds per call over the rounds.
    ``ratio``: FFN rate / matmul rate computed from those two medians, so it
    equals ``ffn_gflops / matmul_gflops`` (1.0: bias and activation cost nothing).
    ``paired_ratio``: the median over rounds of the ratio of the two timed back
    to back, which resists bursts of load from other programs; on a quiet
    machine the two ratios agree.
    """

    d_model: int
    d_ff: int
    n_tokens: int
    ffn_seconds: float
    matmul_seconds: float
    paired_ratio: float

    @property
    def ratio(self) -> float:
        """FFN rate / matmul rate from the medians: ``matmul_seconds / ffn_seconds``."""
        return self.matmul_seconds / self.ffn_seconds

    @property
    def gflop(self) -> float:
        """GFLOP of one forward: the two matrix products."""
        return ffn_flops_per_token(self.d_model, self.d_ff) * self.n_tokens / 1e9

    @property
    def ffn_gflops(self) -> float:
        return self.gflop / self.ffn_seconds

    @property
    def matmul_gflops(self) -> float:
        return self.gflop / self.matmul_seconds



def interleaved_samples(fns: dict[str, Callable[[], object]], repeats: int,
                        sample_seconds: float) -> dict[str, list[float]]:
    """Seconds per call of each function, one sample per round; ``repeats`` rounds.

    In every round each function is timed once, in the dict's order on even
    rounds and the reverse order on odd ones, so functions listed next to each
    other are always timed back to back (their ratio sees the same machine load).
    Each sample repeats its call enough times to last about ``sample_seconds``.
    """
    calls = {}
    for name, fn in fns.items():
        fn()                                                  # warm up (allocations, thread pool)
        start = time.perf_counter()
        fn()
        calls[name] = max(1, round(sample_seconds / max(time.perf_counter() - start, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            fn, n = fns[name], calls[name]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - start) / n)
    return samples


def ffn_vs_matmul(d_models: Sequence[int] = (64, 128, 256, 512), n_tokens: int = 1024, *, variant: str = "gelu",
                  repeats: int = 5, sample_seconds: float = 0.01, threads: int | None = 1,
                  seed: int = 0) -> list[RateRow]:
    """Time an FFN forward against its two bare matrix products, for each width in ``d_models``.

    The FFN is ``FFN.from_variant(variant, d)`` (biases, activation; ``d_ff = 4d``
    for dense variants) on ``x`` ``(n_tokens, d)``; the matmul baseline is
    ``x @ W1ᵀ`` and ``h @ W2ᵀ`` with the same weights and a ready-made ``h``
    ``(n_tokens, d_ff)``: the products alone, nothing else. Both run under
    ``torch.inference_mode``. All of them take turns round by round
    (``repeats`` rounds, see ``interleaved_samples``); medians are kept. The
    row's ``ratio`` is the ratio of the two medians (it matches the two rates);
    ``paired_ratio`` is the median of per-round ratios of an FFN and its matmuls
    timed back to back, which resists other programs' bursts of load.

    ``threads``: torch threads while timing (restored afterwards; ``None`` keeps the
    current setting). One thread is the default because on a shared machine several
    threads wait for each other whenever another program takes a core, which makes
    the ratio jump; the rates are then one core's.
    """
    validate.positive_int("n_tokens", n_tokens)
    validate.positive_int("repeats", repeats)
    validate.positive_float("sample_seconds", sample_seconds)
    if not d_models:
        raise ValueError("d_models must list at least one width, got an empty sequence")
    for d in d_models:
        validate.positive_int("d_models[i]", d)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    fns: dict[str, Callable[[], object]] = {}
    shapes = {}
    for d in d_models:
        ffn = FFN.from_variant(variant, d).eval()
        if ffn.gated:
            raise ValueError(f"variant must be a dense FFN variant (two matrices), got {variant!r}")
        x = torch.randn(n_tokens, d, generator=gen)
        h = torch.randn(n_tokens, ffn.d_ff, generator=gen)
        w1, w2 = ffn.w1.weight.detach(), ffn.w2.weight.detach()
        fns[f"ffn{d}"] = lambda ffn=ffn, x=x: ffn(x)
        fns[f"mm{d}"] = lambda x=x, h=h, w1=w1, w2=w2: (x @ w1.T, h @ w2.T)
        shapes[d] = ffn.d_ff
    with torch.inference_mode(), torch_threads(threads):
        samples = interleaved_samples(fns, repeats, sample_seconds)
    rows = []
    for d in d_models:
        ffn_t, mm_t = samples[f"ffn{d}"], samples[f"mm{d}"]
        paired = statistics.median(m / f for f, m in zip(ffn_t, mm_t))
        rows.append(RateRow(d, shapes[d], n_tokens, statistics.median(ffn_t), statistics.median(mm_t), paired))
    return rows


def format_rates(rows: Sequence[RateRow]) -> str:
    """The speed table: GFLOP, both rates, their ratio (from the medians) and the paired per-round ratio."""
    lines = [f"{'d_model':>8} {'GFLOP':>7} {'FFN GFLOP/s':>12} {'matmul GFLOP/s':>15} {'FFN/matmul':>11} "
             f"{'paired rounds':>14}"]
    for row in rows:
        lines.append(f"{row.d_model:>8} {row.gflop:>7.3f} {row.ffn_gflops:>12.1f} {row.matmul_gflops:>15.1f} "
                     f"{row.ratio:>11.2f} {row.paired_ratio:>14.2f}")
    return "\n".join(lines)


@dataclass(frozen=True)
class ChunkingMemory:
    """Saved activations of one FFN trained on ``n_tokens`` tokens: plain, chunked, chunked + checkpointed."""

    n_tokens: int
    d_model: int
    n_chunks: int
    plain: ActivationMemory
    chunked: ActivationMemory
    checkpointed: ActivationMemory

    @property
    def ratio(self) -> float:
        """Peak saved bytes chunked + checkpointed / plain."""
        return self.checkpointed.peak_bytes / self.plain.peak_bytes


def chunking_memory(n_tokens: int = 4096, d_model: int = 64, *, variant: str = "gelu", n_chunks: int = 8,
                    seed: int = 0) -> ChunkingMemory:
    """Measure ``activation_memory`` of one FFN plain, in ``n_chunks`` chunks, and chunked + checkpointed."""
    torch.manual_seed(seed)
    ffn = FFN.from_variant(variant, d_model)
    x = torch.randn(1, n_tokens, d_model, generator=torch.Generator().manual_seed(seed))
    return ChunkingMemory(n_tokens, d_model, n_chunks, activation_memory(ffn, x, 1),
                          activation_memory(ffn, x, n_chunks), activation_memory(ffn, x, n_chunks, checkpoint=True))


def moe_figures(**kwargs: object) -> tuple[object | None, str]:
    """Run ``helpers.tools.benchmark_moe.run_moe_benchmark(**kwargs)`` if that module exists: ``(its result, a note)``."""
    try:
        module = importlib.import_module("helpers.tools.benchmark_moe")
    except ModuleNotFoundError as err:
        if err.name not in ("helpers.tools.benchmark_moe", "helpers"):
            raise
        return None, "MoE figures: helpers.tools.benchmark_moe is not in this checkout yet (skipped)"
    if not hasattr(module, "run_moe_benchmark"):
        return None, "MoE figures: helpers.tools.benchmark_moe has no run_moe_benchmark() (skipped)"
    return module.run_moe_benchmark(**kwargs), "MoE figures: helpers.tools.benchmark_moe.run_moe_benchmark()"


def threads_label(n: int) -> str:
    """``1 thread``, ``2 threads``."""
    return f"{n} thread" if n == 1 else f"{n} threads"


def _format_moe(result: object) -> list[str]:
    if result is None:
        return []
    if isinstance(result, dict):
        try:                                                   # the MoE benchmark's own table, when it is one
            from helpers.tools.benchmark_moe import format_moe_benchmark

            return ["  " + line for line in format_moe_benchmark(result).splitlines()]
        except (ImportError, KeyError, ValueError):
            pass
        return [f"  {key}: {value:.3f}" if isinstance(value, float) else f"  {key}: {value}"
                for key, value in result.items()]
    if isinstance(result, (list, tuple)):
        return [f"  {item}" for item in result]
    return [f"  {result}"]


def main(argv: list[str] | None = None) -> int:
    """Print the FFN/matmul rate ratios, the chunking memory ratio and the MoE ratios."""
    parser = argparse.ArgumentParser(prog="python -m helpers.tools.benchmark", description=main.__doc__)
    parser.add_argument("--repeats", type=int, default=15, help="timing rounds (medians are kept)")
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per FFN call in the speed test")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the speed test (0: torch's default)")
    parser.add_argument("--skip-moe", action="store_true", help="do not run the MoE benchmark")
    args = parser.parse_args(argv)

    threads = args.threads if args.threads > 0 else None
    n_threads = threads or torch.get_num_threads()
    # one header for the whole run: parts 1 and 3 are timed with the same number of threads
    print(f"torch {torch.__version__}; timings on {threads_label(n_threads)} (--threads), "
          f"{args.repeats} interleaved rounds (--repeats)")
    print(f"1. FFN forward (GELU, d_ff=4d, {args.tokens} tokens) vs its two bare matmuls, medians")
    print(format_rates(ffn_vs_matmul(n_tokens=args.tokens, repeats=args.repeats, threads=threads)))
    print("  target: FFN/matmul >= 0.80 at the larger sizes")

    mem = chunking_memory()
    print(f"2. Saved activations of one GELU FFN, T={mem.n_tokens}, d_model={mem.d_model}, d_ff={4 * mem.d_model} "
          "(deterministic, not timed)")
    for name, m in (("plain", mem.plain), (f"{mem.n_chunks} chunks", mem.chunked),
                    (f"{mem.n_chunks} chunks + checkpointing", mem.checkpointed)):
        print(f"  {name:<28} peak {m.peak_bytes / 2**20:6.2f} MiB  ({m.peak_bytes / mem.plain.peak_bytes:.3f} of plain)")
    print(f"  chunked+checkpointed / plain = {mem.ratio:.3f} (target <= 0.25)")

    if args.skip_moe:
        print("3. MoE figures: skipped (--skip-moe)")
        return 0
    try:                                    # as python -m helpers.tools.benchmark_moe does: no page faults in timed calls
        from helpers.tools.benchmark_moe import keep_freed_memory
        keep_freed_memory()
    except ImportError:
        pass
    result, note = moe_figures(threads=threads, repeats=args.repeats)
    print(f"3. {note}")
    for line in _format_moe(result):
        print(line)
    if result is not None:
        from helpers.tools.benchmark_moe import TARGETS
        print(f"  {TARGETS} (MoE/Mixtral when transformers is installed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
