"""helpers.moe_step_time (notebook 07's time per step from counts and a datasheet) and the DeepSeekMoE diagram."""

import math

import pytest

from helpers.moe_step_time import H100_SXM, step_time, step_time_lines


def test_a_dense_step_is_the_longer_of_its_flops_and_its_bytes():
    d, w = 7168, 18432
    one = step_time(1, d, w)
    assert one.flops == 2 * 3 * d * w and one.weight_bytes == 2 * 3 * d * w and one.bound == "bytes"
    assert math.isclose(one.seconds, 3 * d * w * 2 / H100_SXM.hbm)
    big = step_time(65_536, d, w)
    assert big.bound == "FLOPs" and math.isclose(big.seconds, 2 * 3 * d * w * 65_536 / H100_SXM.flops)


def test_one_token_through_the_moe_reads_only_its_k_plus_s_experts():
    m = step_time(1, 7168, 2048, n_routed=256, top_k=8, n_shared=1)
    assert math.isclose(m.weight_bytes, 2 * (9 * 3 * 7168 * 2048 + 7168 * 256))
    assert math.isclose(m.moved_bytes, 2 * 8 * 7168 * 2)


def test_a_large_batch_reaches_every_expert_and_the_ratio_falls_towards_the_traffic():
    m = step_time(65_536, 7168, 2048, n_routed=256, top_k=8, n_shared=1)
    assert math.isclose(m.weight_bytes, 2 * (257 * 3 * 7168 * 2048 + 7168 * 256), rel_tol=1e-9)
    d = step_time(65_536, 7168, 9 * 2048)
    assert 1.0 < m.seconds / d.seconds < 2.0


@pytest.mark.parametrize("spread", [True, False])
def test_traffic_only_when_the_experts_sit_elsewhere(spread):
    m = step_time(64, 64, 128, n_routed=8, top_k=1, spread=spread)
    assert (m.traffic > 0) == spread


def test_the_table_prints_each_batch_and_the_ridge_points():
    lines = step_time_lines([1, 64], 7168, 2048, 256, 8, 1, 9 * 2048)
    assert len(lines) == 5 and lines[2].rstrip().endswith("1.0×") and "295" in lines[-1] and "8,430" in lines[-1]


def test_the_deepseekmoe_diagram_draws_its_chosen_experts():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.moe_configs import deepseekmoe_diagram

    fig = deepseekmoe_diagram(n_routed=12, chosen=(1, 5))
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "12 fine-grained routed experts" in texts and "shared expert" in texts
    plt.close(fig)


def test_expert_parallel_reads_only_the_local_experts_and_counts_the_groups_tokens():
    from helpers.moe_step_time import expert_parallel_time

    mean = expert_parallel_time(1, 32, 7168, 2048, 256, 8, 1, busiest=False)
    reached = 8 * (1 - (1 - 8 / 256) ** 32) + 1
    assert math.isclose(mean.weight_bytes, 2 * (reached * 3 * 7168 * 2048 + 7168 * 256))
    busiest = expert_parallel_time(1, 32, 7168, 2048, 256, 8, 1)              # the step waits for the busiest GPU
    assert busiest.weight_bytes > mean.weight_bytes
    full = expert_parallel_time(64, 32, 7168, 2048, 256, 8, 1)       # 64 tokens per expert: all 8 local ones read
    assert math.isclose(full.weight_bytes, 2 * (9 * 3 * 7168 * 2048 + 7168 * 256), rel_tol=1e-9)
    far = expert_parallel_time(64, 32, 7168, 2048, 256, 8, 1, across_nodes=True)
    remote = 3 * (1 - (3 / 4) ** 8)                                  # 8 experts on 4 nodes, own node over NVLink
    assert far.traffic > full.traffic and math.isclose(far.moved_bytes - full.moved_bytes, 2 * 64 * remote * 7168 * 2)


def test_remote_nodes_leave_out_the_own_node_and_respect_the_node_limit():
    from helpers.moe_step_time import remote_nodes

    assert remote_nodes(8, 8) == 0.0                                 # one node: NVLink only
    assert math.isclose(remote_nodes(32, 8), 3 * (1 - 0.75 ** 8))
    assert math.isclose(remote_nodes(64, 8), 4 * (1 - 0.75 ** 8) * 7 / 8)   # 4 of 8 nodes chosen
    assert remote_nodes(320, 8) < 4


def test_the_busiest_gpu_matches_a_seeded_simulation_of_the_draws():
    import numpy as np

    from helpers.moe_step_time import busiest_reached

    rng = np.random.default_rng(0)
    draws, gpus, experts, k = 1000, 32, 256, 8
    picks = np.argpartition(rng.random((draws, gpus, experts)), k, axis=-1)[..., :k]
    hit = np.zeros((draws, experts), bool)
    hit[np.arange(draws)[:, None, None], picks] = True
    simulated = hit.reshape(draws, gpus, experts // gpus).sum(-1).max(-1).mean()
    assert abs(busiest_reached(gpus, 1, experts, k) - simulated) < 0.05
    assert math.isclose(busiest_reached(32, 64, 256, 8), 8.0) and busiest_reached(32, 1, 256, 8) < 8
    assert math.isclose(busiest_reached(1, 1, 8, 1), 1.0)            # one GPU, one token: exactly one expert
    from helpers.moe_step_time import average_reached
    average = hit.reshape(draws, gpus, experts // gpus).sum(-1).mean()
    assert abs(average_reached(gpus, 1, experts, k) - average) < 0.05 and average_reached(32, 1, 256, 8) < 5.2


def test_the_expert_parallel_table_prints_memory_the_reviewed_ratios_and_the_25x_as_bytes():
    from helpers.moe_step_time import expert_parallel_lines

    lines = expert_parallel_lines([(32, 1), (32, 64), (64, 64)], 7168, 2048, 256, 8, 1, 9 * 2048, 58)
    assert "22.6 GB" in lines[0] and "1.31 TB" in lines[0] and "at least 19 GPUs of 80 GB" in lines[0]
    assert "busiest GPU reads" in lines[2] and lines[3].split()[-3] == "8.6"
    assert [row.split()[-2] for row in lines[3:6]] == ["0.96×", "1.14×", "0.70×"]
    assert "25× the HBM bytes" in lines[-1] and "one device" in lines[-1]
    one = expert_parallel_lines([(32, 1), (32, 64)], 7168, 2048, 256, 8, 1, 9 * 2048, 58, nvlink_column=False)
    assert "MoE / dense" in one[2]
    assert [row.split()[-1] for row in one[3:5]] == ["0.97×", "1.56×"]
    both = expert_parallel_lines([(32, 64), (32, 8192)], 7168, 2048, 256, 8, 1, 9 * 2048, 58, nvlink_column=False,
                                 overlap_column=True)
    assert "added" in both[2] and "overlapped" in both[2]
    assert [row.split()[-2:] for row in both[3:5]] == [["1.56×", "1.00×"], ["3.57×", "2.57×"]]   # added, hidden


def test_the_per_second_lines_join_the_toy_to_the_expert_parallel_range():
    from helpers.moe_long_run import load_ten_seeds
    from helpers.moe_step_time import per_second_lines

    lines = per_second_lines(load_ten_seeds(), "MoE, lr 0.02", "dense, width 11, lr 0.04", [(32, 1), (32, 8192)],
                             7168, 2048, 256, 8, 1, 9 * 2048)
    assert "10 of 10 seeds" in lines[1] and "0.96× to 3.57×" in lines[2] and "not a prediction" in lines[2]


def test_the_all_to_all_is_priced_on_bandwidth_alone_as_deepeps_low_latency_rates_allow():
    from helpers.moe_step_time import H100_INFINIBAND, expert_parallel_time, remote_nodes

    one = expert_parallel_time(1, 32, 7168, 2048, 256, 8, 1, across_nodes=True)
    nvlink = 2 * 8 * 7168 * 2 / H100_SXM.link
    infiniband = 2 * remote_nodes(32, 8) * 7168 * 2 / H100_INFINIBAND.link
    assert math.isclose(one.traffic, nvlink + infiniband) and one.traffic < 3e-6     # no fixed cost: about 2 µs
    # DeepEP docs/legacy.md, low-latency kernels, EP32, 128 tokens per GPU, top-8, every copy over InfiniBand:
    # FP8 dispatch (7,168 bytes + 224 scale bytes) in 155 µs, bf16 combine in 273 µs: the ~50 GB/s link rate
    assert 47e9 < 128 * 8 * (7168 + 224) / 155e-6 < 50e9 and 52e9 < 128 * 8 * 7168 * 2 / 273e-6 < 55e9
