"""The benchmark command's pieces (not a timing test: only that they run and report sane, deterministic parts)."""
import importlib

import pytest
import torch

from helpers.moe import MoE
from helpers.tools import benchmark


def test_ffn_vs_matmul_rows_and_threads_restored():
    before = torch.get_num_threads()
    rows = benchmark.ffn_vs_matmul(d_models=(16, 32), n_tokens=64, repeats=3, sample_seconds=0.001)
    assert torch.get_num_threads() == before
    assert [(r.d_model, r.d_ff, r.n_tokens) for r in rows] == [(16, 64, 64), (32, 128, 64)]
    assert rows[0].gflop == pytest.approx(4 * 16 * 64 * 64 / 1e9)
    assert all(r.ratio > 0 and r.ffn_gflops > 0 and r.matmul_gflops > 0 for r in rows)


def test_chunking_memory_ratio_is_deterministic_and_below_a_quarter():
    mem = benchmark.chunking_memory()
    assert mem.plain == mem.chunked
    # GELU, d=64, d_ff=256, T=4096 in 8 chunks: (T·d + T/8·2·d_ff) / (T·(d + 2·d_ff)) = 2/9
    assert mem.ratio == pytest.approx(2.0 / 9.0)
    assert mem.ratio <= 0.25


def test_bad_input_is_explained():
    with pytest.raises(ValueError, match="d_models must list at least one width"):
        benchmark.ffn_vs_matmul(d_models=())
    with pytest.raises(ValueError, match="variant must be a dense FFN variant"):
        benchmark.ffn_vs_matmul(d_models=(8,), variant="swiglu")
    with pytest.raises(ValueError, match="repeats must be a positive int"):
        benchmark.ffn_vs_matmul(repeats=0)


def test_moe_figures_are_skipped_cleanly_when_the_module_is_missing(monkeypatch):
    real = importlib.import_module

    def fake(name, *args):
        if name == "helpers.tools.benchmark_moe":
            raise ModuleNotFoundError("No module named 'helpers.tools.benchmark_moe'", name=name)
        return real(name, *args)

    monkeypatch.setattr(benchmark.importlib, "import_module", fake)
    result, note = benchmark.moe_figures()
    assert result is None and "not in this checkout" in note


def test_main_runs(capsys):
    assert benchmark.main(["--repeats", "1", "--tokens", "32", "--skip-moe"]) == 0
    out = capsys.readouterr().out
    assert "chunked+checkpointed / plain = 0.222" in out and "FFN/matmul" in out


def test_one_thread_setting_for_every_timing(monkeypatch, capsys):
    """The header names one thread count, and the MoE part is timed with that same setting."""
    seen = {}

    def fake_moe_figures(**kwargs):
        seen.update(kwargs)
        return None, "MoE figures: stand-in"

    import helpers.tools.benchmark_moe
    kept = []                                            # the real one changes malloc for the whole test run
    monkeypatch.setattr(helpers.tools.benchmark_moe, "keep_freed_memory", lambda: kept.append(1) or True)
    monkeypatch.setattr(benchmark, "moe_figures", fake_moe_figures)
    assert benchmark.main(["--repeats", "1", "--tokens", "32", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "timings on 1 thread (--threads)" in out and "thread(s)" not in out
    assert seen == {"threads": 1, "repeats": 1} and kept == [1]


def test_moe_table_is_printed_with_its_header():
    from helpers.tools.benchmark_moe import run_moe_benchmark

    result = run_moe_benchmark(n_tokens=64, d_model=16, experts=(4,), repeats=1, warmup=0)
    lines = benchmark._format_moe(result)
    assert "1 thread," in lines[0] and "MoE/dense" in lines[1] and lines[2].split()[0] == "4"


# ---------------------------------------------------------------- the MoE benchmark (helpers.tools.benchmark_moe)
def test_benchmark_returns_ratios_and_restores_threads():
    from helpers.tools.benchmark_moe import format_moe_benchmark, run_moe_benchmark
    before = torch.get_num_threads()
    result = run_moe_benchmark(n_tokens=64, d_model=16, top_k=2, experts=(2, 4), repeats=2, warmup=1)
    assert torch.get_num_threads() == before
    assert result["threads"] == 1 and result["d_ff_expert"] == 42 and result["clock"] == "cpu"
    for e in (2, 4):
        for key in ("loop / MoE", "MoE / dense-active", "MoE / dense-active in blocks", "MoE ms", "loop ms"):
            assert result[f"E={e} {key}"] > 0
    table = format_moe_benchmark(result)
    assert "loop/MoE" in table and "MoE/Mixtral" in table and "MoE/dense-in-blocks" in table
    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, 2\], got 3"):
        run_moe_benchmark(n_tokens=8, d_model=8, top_k=3, experts=(2,), repeats=1)


def test_keep_freed_memory_in_its_own_process():
    import subprocess
    import sys
    code = "from helpers.tools.benchmark_moe import keep_freed_memory; print(keep_freed_memory())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("True", "False")


def test_benchmark_mixtral_column_is_skipped_with_a_note_or_agrees():
    from helpers.tools.benchmark_moe import format_moe_benchmark, mixtral_block, run_moe_benchmark
    result = run_moe_benchmark(n_tokens=32, d_model=8, top_k=2, experts=(4,), repeats=1, warmup=0)
    assert result["clock"] == "cpu"
    text = format_moe_benchmark(result)
    try:
        import transformers  # noqa: F401
    except ImportError:
        assert result["mixtral"] == 0.0 and "MoE/Mixtral: skipped (transformers is not installed" in text
        assert mixtral_block(MoE(8, 4, 2)) is None
    else:
        assert result["mixtral"] == 1.0 and result["E=4 Mixtral max |diff|"] <= 1e-5
    with pytest.raises(ValueError, match="clock must be one of"):
        run_moe_benchmark(n_tokens=8, d_model=8, experts=(2,), repeats=1, clock="gpu")
