"""helpers.inference: the formulas exactly and the published figures."""
import math

import pytest

from helpers.inference import (H100_SXM, INFINIBAND_NDR, MIXTRAL_ACTIVE_PARAMS, MIXTRAL_CONFIG, MIXTRAL_TOTAL_PARAMS,
                               NVLINK4_PER_DIRECTION, Hardware, batch_for_intensity, expected_experts_touched,
                               ffn_intensity, mixtral_param_counts, mixtral_params_read, moe_intensity, roofline)


def test_intensity_formulas():
    assert ffn_intensity(1) == 0.5 and ffn_intensity(16, bytes_per_element=2) == 16
    assert expected_experts_touched(1, 8, 2) == pytest.approx(2)
    assert expected_experts_touched(4, 8, 2) == pytest.approx(8 * (1 - 0.75 ** 4))
    assert expected_experts_touched(5, 8, 8) == 8                      # k = E: every expert, always
    assert moe_intensity(1, 8, 2) == pytest.approx(ffn_intensity(1))
    assert moe_intensity(10_000, 8, 2) == pytest.approx(ffn_intensity(10_000) * 2 / 8)


def test_published_figures_and_ridges():
    assert H100_SXM.ridge == pytest.approx(295.2, abs=0.1)             # 989 TFLOP/s / 3.35 TB/s
    assert H100_SXM.link_ridge(NVLINK4_PER_DIRECTION) == pytest.approx(2197.8, abs=0.1)
    assert H100_SXM.link_ridge(INFINIBAND_NDR) == pytest.approx(19780)
    assert Hardware("toy", 100.0, 10.0).ridge == 10
    assert roofline(1.0, 100e9, 10e9) == 10e9
    assert roofline([1.0, 100.0], 100e9, 10e9) == [10e9, 100e9]


def test_batch_for_intensity_is_the_smallest_batch_that_reaches_the_target():
    ridge = H100_SXM.ridge
    assert batch_for_intensity(ridge) == math.ceil(ridge)               # dense, bf16: intensity = B
    assert batch_for_intensity(ridge, bytes_per_element=4) == math.ceil(2 * ridge)
    for experts, k in [(8, 2), (256, 8), (64, 4), (4, 4)]:
        b = batch_for_intensity(ridge, experts, k)
        assert moe_intensity(b, experts, k, bytes_per_element=2) >= ridge
        assert b == 1 or moe_intensity(b - 1, experts, k, bytes_per_element=2) < ridge
        assert b == pytest.approx(ridge * experts / k, abs=1)           # every expert touched by then
    assert batch_for_intensity(0.5) == 1


def test_mixtral_counts_from_the_config_match_the_published_totals():
    counts = mixtral_param_counts()
    assert round(counts["total"] / 1e9, 1) == 46.7 and round(counts["active"] / 1e9, 1) == 12.9   # release post
    assert round(counts["shared"] / 1e9, 2) == 1.61 and round(counts["expert_slot"] / 1e9, 2) == 5.64
    assert counts["total"] == counts["shared"] + 8 * counts["expert_slot"]
    assert counts["input_embedding"] == 32000 * 4096
    assert (MIXTRAL_TOTAL_PARAMS, MIXTRAL_ACTIVE_PARAMS) == (counts["total"], counts["active"])


def test_mixtral_step_reads_weights_only_and_one_embedding_row_per_token():
    counts, d = mixtral_param_counts(), MIXTRAL_CONFIG["d_model"]
    assert mixtral_params_read(1) == pytest.approx(counts["active"] - counts["input_embedding"] + d)
    assert round(mixtral_params_read(1) / 1e9, 2) == 12.75
    assert mixtral_params_read(1000) == pytest.approx(counts["total"] - counts["input_embedding"] + 1000 * d)
    reads = [mixtral_params_read(b) for b in (1, 2, 4, 8, 16, 64)]
    assert reads == sorted(reads)


def test_bad_input_is_explained():
    with pytest.raises(ValueError, match="top_k must be an int in"):
        expected_experts_touched(4, 8, 9)
    with pytest.raises(ValueError, match="target"):
        batch_for_intensity(0)
