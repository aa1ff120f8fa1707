"""helpers.inference: the formulas exactly, the measurements only for shape and sanity (not timed)."""
import pytest
import torch

from helpers.ffn import FFN
from helpers.inference import (MIXTRAL_ACTIVE_PARAMS, MIXTRAL_TOTAL_PARAMS, Machine, expected_experts_touched,
                               ffn_intensity, measure_bandwidth, measure_matmul_rate, mixtral_param_counts,
                               mixtral_params_read, moe_intensity, roofline, seconds_per_call, seconds_per_token,
                               weight_bytes)
from helpers.moe import MoE


def test_intensity_formulas():
    assert ffn_intensity(1) == 0.5 and ffn_intensity(16, bytes_per_element=2) == 16
    assert expected_experts_touched(1, 8, 2) == pytest.approx(2)
    assert expected_experts_touched(4, 8, 2) == pytest.approx(8 * (1 - 0.75 ** 4))
    assert moe_intensity(1, 8, 2) == pytest.approx(ffn_intensity(1))
    assert moe_intensity(10_000, 8, 2) == pytest.approx(ffn_intensity(10_000) * 2 / 8)


def test_roofline_and_ridge():
    m = Machine(bandwidth=10e9, peak_flops=100e9)
    assert m.ridge == 10
    assert roofline(1.0, m.peak_flops, m.bandwidth) == 10e9
    assert roofline([1.0, 100.0], m.peak_flops, m.bandwidth) == [10e9, 100e9]


def test_mixtral_counts_from_the_config_match_the_published_totals():
    counts = mixtral_param_counts()
    assert round(counts["total"] / 1e9, 1) == 46.7 and round(counts["active"] / 1e9, 1) == 12.9   # release post
    assert round(counts["shared"] / 1e9, 2) == 1.61 and round(counts["expert_slot"] / 1e9, 2) == 5.64
    assert counts["total"] == counts["shared"] + 8 * counts["expert_slot"]
    assert (MIXTRAL_TOTAL_PARAMS, MIXTRAL_ACTIVE_PARAMS) == (counts["total"], counts["active"])


def test_mixtral_reads_active_params_for_one_token_and_all_for_many():
    assert mixtral_params_read(1) == pytest.approx(MIXTRAL_ACTIVE_PARAMS)
    assert mixtral_params_read(1000) == pytest.approx(MIXTRAL_TOTAL_PARAMS)


def test_measurements_run_and_are_positive():
    layers = [FFN.from_variant("gelu", 16, 64, bias=False).eval() for _ in range(2)]
    assert weight_bytes(layers) == 2 * 2 * 16 * 64 * 4
    times = seconds_per_token(layers, [1, 4], 16, repeats=1)
    assert set(times) == {1, 4} and all(t > 0 for t in times.values())
    moe_times = seconds_per_token([MoE(16, 4, 2).eval()], [3], 16, repeats=1)
    assert moe_times[3] > 0
    assert measure_bandwidth([p for layer in layers for p in layer.parameters()], repeats=1) > 0
    assert measure_matmul_rate(8, 16, 32, repeats=1) > 0
    assert seconds_per_call(lambda: torch.ones(8).sum(), repeats=1) > 0


def test_bad_input_is_explained():
    with pytest.raises(ValueError, match="top_k must be an int in"):
        expected_experts_touched(4, 8, 9)
    with pytest.raises(ValueError, match="layers must hold at least one module"):
        seconds_per_token([], [1], 8)
    with pytest.raises(ValueError, match="tensors must hold at least one tensor"):
        measure_bandwidth([])
