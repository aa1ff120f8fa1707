"""Expert parallelism: the split plan, and the real thing over 2 gloo processes (equal to the one-process MoE).

The distributed tests start real worker processes (spawn), a few seconds each; they also check
that a failing or stalled worker gives a clear error within the timeout and leaves no process behind.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.expert_parallel import (ExpertParallelError, ExpertParallelTimeout, expected_bytes_per_token,
                                     expert_parallel_forward, experts_of_rank, max_differences, owner_of,
                                     pid_alive, plan_dispatch, run_expert_parallel, shard_experts, single_process_pass,
                                     split_sizes)
from helpers.moe import MoE

ROOT = Path(__file__).resolve().parent.parent


def worker_children() -> list[str]:
    """Command lines of this process's children, apart from multiprocessing's resource tracker."""
    if not Path("/proc").is_dir():
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmd = (entry / "cmdline").read_text().replace("\0", " ")
            except (OSError, IndexError, ValueError):
                continue
            if ppid == os.getpid() and "resource_tracker" not in cmd:
                found.append(cmd)
    return found


# ----------------------------------------------------------------------------- the plan (no processes)

def test_ownership_is_contiguous_blocks():
    assert list(experts_of_rank(1, 8, 4)) == [2, 3]
    assert owner_of(torch.arange(8), 8, 2).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_split_sizes_count_kept_slots_per_owner():
    expert_index = torch.tensor([[0, 3], [1, 0], [2, 3]])
    kept = torch.tensor([[True, True], [True, False], [True, True]])
    assert split_sizes(expert_index, kept, 4, 2) == [2, 3]      # rank 0: (0,e0), (1,e1); rank 1: e3, e2, e3
    assert split_sizes(expert_index, kept, 4, 4) == [1, 1, 1, 2]
    assert split_sizes(expert_index, kept, 4, 1) == [5]


def test_plan_sorts_rows_by_expert_and_keeps_weights():
    expert_index = torch.tensor([[3, 0], [1, 3]])
    weight = torch.tensor([[0.7, 0.3], [0.6, 0.4]])
    kept = torch.tensor([[True, True], [True, True]])
    plan = plan_dispatch(expert_index, weight, kept, 4, 2)
    assert plan.expert.tolist() == [0, 1, 3, 3]
    assert plan.token.tolist() == [0, 1, 0, 1]
    assert plan.weight.tolist() == pytest.approx([0.3, 0.6, 0.7, 0.4])
    assert plan.send_counts == [2, 2]


def test_pid_alive():
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)


def test_expected_bytes_per_token():
    assert expected_bytes_per_token(32, 2, 2) == 2 * 2 * 32 * 4 / 2
    assert expected_bytes_per_token(4096, 2, 8, bytes_per_element=2, backward=True) == 2 * 2 * 2 * 4096 * 2 * 7 / 8
    assert expected_bytes_per_token(64, 1, 1) == 0


def test_shard_experts_keeps_only_the_owned_ones():
    moe = MoE(8, 4, 2)
    owned = shard_experts(moe, 1, 2)
    assert list(owned) == [2, 3]
    with pytest.raises(RuntimeError, match="expert 0 lives on rank 0"):
        moe.experts[0](torch.randn(1, 8))


def test_bad_input_is_explained():
    moe = MoE(8, 4, 2)
    x = torch.randn(6, 8)
    with pytest.raises(ValueError, match="n_experts must be a multiple of world_size"):
        run_expert_parallel(moe, x, world_size=3)
    with pytest.raises(ValueError, match=r"fail_rank must be an int in \[0, 1\], got 2"):
        run_expert_parallel(moe, x, fail_rank=2)
    with pytest.raises(ValueError, match="grad_output must have x's shape"):
        run_expert_parallel(moe, x, torch.randn(5, 8))
    with pytest.raises(ValueError, match="x must have last dimension d_model=8"):
        run_expert_parallel(moe, torch.randn(6, 7))
    with pytest.raises(ValueError, match="x must hold at least world_size=2 tokens"):
        run_expert_parallel(moe, torch.randn(1, 8))
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        run_expert_parallel(moe, x, timeout=0)
    with pytest.raises(RuntimeError, match="needs torch.distributed to be initialised"):
        expert_parallel_forward(moe, x)
    with pytest.raises(TypeError, match=r"expert_index must be a \(N, k\) torch.long tensor"):
        split_sizes(torch.zeros(3, 2), torch.ones(3, 2, dtype=torch.bool), 4, 2)
    with pytest.raises(TypeError, match="kept must be a bool tensor"):
        split_sizes(torch.zeros(3, 2, dtype=torch.long), torch.ones(3, 2), 4, 2)
    with pytest.raises(ValueError, match=r"expert_index must hold expert ids in \[0, 3\]"):
        split_sizes(torch.full((3, 2), 4), torch.ones(3, 2, dtype=torch.bool), 4, 2)


# ----------------------------------------------------------------------------- two real processes

def test_two_processes_match_the_single_process_moe_forward_and_backward():
    torch.manual_seed(0)
    moe = MoE(16, 4, 2).eval()
    x, g = torch.randn(2, 20, 16), torch.randn(2, 20, 16)
    result = run_expert_parallel(moe, x, g, timeout=120)
    reference = single_process_pass(moe, x, g)
    diffs = max_differences(result, reference)
    assert set(diffs) == {"output", "x_grad", "param_grads"}
    assert max(diffs.values()) <= 1e-6, diffs
    assert list(result.grads) == [name for name, _ in moe.named_parameters()]
    # the bookkeeping agrees with the plan: rank r sends what split_sizes says, and receives what others send
    shards = torch.tensor_split(x.reshape(-1, 16), 2)
    for record, shard in zip(result.records, shards):
        routing = moe.route(shard)
        assert record.send_counts == split_sizes(routing.expert_index, routing.kept, 4, 2)
    assert result.records[0].recv_counts == [result.records[0].send_counts[0], result.records[1].send_counts[0]]
    assert not any(pid_alive(pid) for pid in result.worker_pids)
    assert worker_children() == []


def test_capacity_drops_match_the_grouped_reference():
    # with a capacity, each process applies it to its own tokens (GShard's groups): compare per group
    torch.manual_seed(3)
    moe = MoE(8, 4, 1, capacity_factor=0.75, variant="gelu", bias=True).eval()
    x = torch.randn(30, 8)
    g = torch.randn(30, 8)
    result = run_expert_parallel(moe, x, g, timeout=120)
    reference = single_process_pass(moe, x, g, groups=2)
    assert max(max_differences(result, reference).values()) <= 1e-6
    dropped = sum(int((~moe.route(s).kept).sum()) for s in torch.tensor_split(x, 2))
    assert dropped > 0, "the test should exercise dropped slots"


def test_a_failing_worker_gives_a_clear_error_and_leaves_no_process():
    moe = MoE(8, 4, 2)
    with pytest.raises(ExpertParallelError, match=r"worker rank 1 of 2 failed with RuntimeError: rank 1 stopped "
                                                  r"on purpose") as info:
        run_expert_parallel(moe, torch.randn(10, 8), fail_rank=1, timeout=120)
    assert info.value.rank == 1
    assert "Traceback" in info.value.worker_traceback
    assert len(info.value.worker_pids) == 2
    assert not any(pid_alive(pid) for pid in info.value.worker_pids)
    assert worker_children() == []


def test_a_stalled_worker_times_out_and_leaves_no_process():
    moe = MoE(8, 4, 2)
    with pytest.raises(ExpertParallelTimeout, match="did not finish within 4 s") as info:
        run_expert_parallel(moe, torch.randn(10, 8), stall_rank=0, timeout=4)
    assert isinstance(info.value, TimeoutError)
    assert not any(pid_alive(pid) for pid in info.value.worker_pids)
    assert worker_children() == []


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")
def test_runs_under_torchrun():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "helpers.expert_parallel",
                           "--tokens", "48"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK: equal to the single-process MoE within 1e-6" in proc.stdout
    assert proc.stdout.count("expert parallelism over 2 processes") == 1          # only rank 0 reports


def test_format_records_can_show_the_metadata_beside_the_activations():
    from helpers.expert_parallel import DispatchRecord, format_records
    record = DispatchRecord(rank=0, world_size=2, n_tokens=32, d_model=32, element_size=4,
                            send_counts=[31, 33], recv_counts=[31, 31])
    summed, split = format_records([record]), format_records([record], split_metadata=True)
    assert "8464" in summed.splitlines()[1] and "bytes sent (+ metadata)" not in summed
    assert "bytes sent (+ metadata)" in split and "8,192 + 272" in split.splitlines()[1]
    assert record.metadata_bytes == 8 + 8 * 33
