"""Tensor parallelism: the split in one process, then 2 real gloo processes equal to the one-process FFN.

The distributed tests start real worker processes (spawn) through helpers.distributed.launch, the machinery
expert parallelism uses too; they also check that a failing worker gives a clear error and leaves no process.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from helpers.distributed import ParallelError, launch, pid_alive, ring_all_reduce_bytes
from helpers.expert_parallel import expert_parallel_job, max_differences, single_process_pass
from helpers.ffn import FFN
from helpers.moe import MoE
from helpers.tensor_parallel import (TensorParallelFFN, demo_problem, hidden_block, max_relative_differences,
                                     reference_pass, run_tensor_parallel, tensor_parallel_bytes_per_token,
                                     tensor_parallel_job, tensor_parallel_partials)
from tests.test_expert_parallel import worker_children

ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------- in one process

def test_hidden_blocks_cover_every_unit_once():
    for d_ff, world in [(96, 2), (30, 4), (5, 5), (7, 1)]:
        blocks = [hidden_block(r, d_ff, world) for r in range(world)]
        assert [u for b in blocks for u in b] == list(range(d_ff))
        assert max(map(len, blocks)) - min(map(len, blocks)) <= 1
    with pytest.raises(ValueError, match="world_size must be at most d_ff=4"):
        hidden_block(0, 4, 5)


@pytest.mark.parametrize("variant", ["gelu", "relu", "swiglu", "geglu"])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_partials_plus_b2_equal_the_ffn(variant, world):
    ffn, x, _ = demo_problem(16, 30, variant, 5, seed=1, dtype=torch.float64)
    partials = tensor_parallel_partials(ffn, x, world)
    assert torch.allclose(sum(partials) + ffn.w2.bias, ffn(x), atol=1e-12, rtol=0)


def test_shard_takes_rows_of_w1_and_columns_of_w2():
    ffn = FFN.from_variant("swiglu", 8, 12, bias=True)
    shard = TensorParallelFFN(ffn, 1, 2)
    assert torch.equal(shard.w1, ffn.w1.weight[6:]) and torch.equal(shard.b1, ffn.w1.bias[6:])
    assert torch.equal(shard.w3, ffn.w3.weight[6:]) and torch.equal(shard.b3, ffn.w3.bias[6:])
    assert torch.equal(shard.w2, ffn.w2.weight[:, 6:]) and torch.equal(shard.b2, ffn.w2.bias)


def test_bytes_formulas():
    assert ring_all_reduce_bytes(100, 1) == 0
    assert ring_all_reduce_bytes(100, 2, 4) == 400
    assert tensor_parallel_bytes_per_token(4096, 8, bytes_per_element=2, backward=True) == 2 * 2 * 7 / 8 * 4096 * 2


def test_bad_input_is_explained():
    with pytest.raises(TypeError, match="ffn must be a helpers.ffn.FFN"):
        tensor_parallel_job(torch.nn.Linear(4, 4), torch.randn(2, 4), torch.randn(2, 4))
    ffn = FFN.from_variant("gelu", 4, 8)
    with pytest.raises(ValueError, match="grad_output must be a tensor of x's shape"):
        tensor_parallel_job(ffn, torch.randn(2, 4), torch.randn(3, 4))
    with pytest.raises(RuntimeError, match="needs torch.distributed to be initialised"):
        TensorParallelFFN(ffn, 0, 2)(torch.randn(2, 4))
    with pytest.raises(ValueError, match="jobs must list at least one Job"):
        launch([])


# ----------------------------------------------------------------------------- two real processes, one launch

def test_one_launch_runs_tensor_and_expert_parallel_forward_and_backward():
    torch.manual_seed(0)
    moe = MoE(16, 4, 2).eval()
    xm, gm = torch.randn(24, 16), torch.randn(24, 16)
    problems = [demo_problem(32, 96, "swiglu", 9, dtype=torch.float32),
                demo_problem(32, 90, "gelu", 1, dtype=torch.float64)]          # uneven blocks, one token
    run = launch([expert_parallel_job(moe, xm, gm)] + [tensor_parallel_job(*p) for p in problems], timeout=180)
    assert max(max_differences(run.results[0], single_process_pass(moe, xm, gm)).values()) <= 1e-6
    for (ffn, x, g), result, bound in zip(problems, run.results[1:], [1e-6, 1e-12]):
        rel = max_relative_differences(result, reference_pass(ffn, x, g))
        assert set(rel) == {"output", "x_grad", "param_grads"} and max(rel.values()) <= bound, rel
        assert list(result.grads) == [n for n, _ in ffn.named_parameters()]
        assert result.ranks_agree
        per_rank = tensor_parallel_bytes_per_token(ffn.d_model, 2, bytes_per_element=x.element_size(), backward=True)
        assert result.bytes_per_token(0) == pytest.approx(per_rank)
        assert [t.phase for t in result.traffic[1]] == ["forward", "backward"]
    assert not any(pid_alive(pid) for pid in run.worker_pids)
    assert worker_children() == []


def test_a_failing_tensor_parallel_worker_gives_a_clear_error_and_leaves_no_process():
    ffn, x, g = demo_problem(8, 16, "gelu", 4)
    with pytest.raises(ParallelError, match=r"tensor-parallel worker rank 0 of 2 failed with RuntimeError") as info:
        run_tensor_parallel(ffn, x, g, fail_rank=0, timeout=120)
    assert info.value.rank == 0 and "Traceback" in info.value.worker_traceback
    assert not any(pid_alive(pid) for pid in info.value.worker_pids)
    assert worker_children() == []


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")
def test_runs_under_torchrun():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "helpers.tensor_parallel",
                           "--tokens", "8"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("OK: equal to the single-process FFN") == 2                 # float32 and float64
    assert proc.stdout.count("tensor parallelism over 2 processes") == 2                  # only rank 0 reports
