"""helpers.inference: the formulas exactly and the published figures."""
import math

import pytest

from helpers.inference import (H100_SXM, H100_SXM_FP8, INFINIBAND_NDR, LLAMA3_8B_CONFIG, MIXTRAL_ACTIVE_PARAMS, MIXTRAL_CONFIG,
                               MIXTRAL_TOTAL_PARAMS, NVLINK4_PER_DIRECTION, Hardware, balanced_experts_touched,
                               batch_for_intensity, decode_intensity_limit, largest_batch_that_fits, ridge_context_that_fits, H100_SXM_MEMORY, decode_step, dense_param_counts, expected_experts_touched,
                               ffn_intensity, kv_cache_bytes_per_token, mixtral_param_counts, mixtral_params_read,
                               moe_intensity, roofline)


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
    assert H100_SXM_FP8.flops == pytest.approx(2 * H100_SXM.flops, rel=1e-3)   # the datasheet's FP8 dense peak: twice bf16's
    assert H100_SXM_FP8.link_ridge(INFINIBAND_NDR) == pytest.approx(39580)
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


def test_balanced_routing_touches_min_e_kb_experts_and_random_routing_fewer():
    assert [balanced_experts_touched(b, 8, 2) for b in (1, 2, 4, 8)] == [2, 4, 8, 8]       # the review's 4 and 8
    assert [round(expected_experts_touched(b, 8, 2), 2) for b in (2, 4)] == [3.5, 5.47]
    for b in range(1, 40):
        assert 2 <= expected_experts_touched(b, 8, 2) <= balanced_experts_touched(b, 8, 2)
    assert balanced_experts_touched(3, 256, 8) == 24 and balanced_experts_touched(40, 256, 8) == 256
    counts, d = mixtral_param_counts(), MIXTRAL_CONFIG["d_model"]
    assert mixtral_params_read(1, "balanced") == pytest.approx(mixtral_params_read(1))
    assert mixtral_params_read(4, "balanced") == pytest.approx(counts["total"] - counts["input_embedding"] + 4 * d)
    assert mixtral_params_read(2, "balanced") > mixtral_params_read(2)
    with pytest.raises(ValueError, match="routing must be one of"):
        mixtral_params_read(2, "even")


def test_llama3_8b_counts_and_kv_cache_match_the_published_figures():
    counts = dense_param_counts()
    assert counts["total"] == 8_030_261_248                             # Meta's 8.03 B (config.json, untied)
    assert counts["ffn"] == 32 * 3 * 4096 * 14336 and LLAMA3_8B_CONFIG["n_kv_heads"] == 8
    per_token = kv_cache_bytes_per_token(32, 8, 128)
    assert per_token == 128 * 2 ** 10                                    # 2 · 32 · 8 · 128 · 2 bytes = 128 KiB
    step = decode_step(64, 8192)
    assert step.kv_bytes == 64 * 2 ** 30                                 # 64 GiB of cache read per step
    assert step.kv_bytes / (counts["total"] * 2) == pytest.approx(4.28, abs=0.01)
    assert step.weight_bytes == 2 * (counts["total"] - counts["input_embedding"] + 64 * 4096)


def test_decode_step_flops_bytes_and_its_capped_intensity():
    one = decode_step(1, 0)
    assert one.kv_bytes == 0 and one.intensity == pytest.approx(1.0, abs=1e-4)   # bf16, no context: I = B
    assert decode_step(296, 0).seconds(H100_SXM) == pytest.approx(decode_step(296, 0).flops / H100_SXM.flops)
    c = LLAMA3_8B_CONFIG
    step = decode_step(3, 100)
    counts = dense_param_counts()
    matmul = 2 * (counts["total"] - counts["input_embedding"] - counts["norms"])
    assert step.flops == 3 * (matmul + 4 * 100 * c["n_heads"] * c["head_dim"] * c["n_layers"])
    intensities = [decode_step(b, 8192).intensity for b in (1, 16, 256, 4096, 65536)]
    assert intensities == sorted(intensities) and intensities[-1] < 18 < H100_SXM.ridge   # capped by the cache
    assert decode_step(4096, 128).intensity > H100_SXM.ridge                             # short contexts reach it
    with pytest.raises(ValueError, match="batch must be a positive int"):
        decode_step(0, 10)


def test_the_decode_intensity_limit_is_what_large_batches_approach():
    for context in (128, 1024, 8192):
        limit = decode_intensity_limit(context)
        assert decode_step(10 ** 7, context).intensity == pytest.approx(limit, rel=1e-3)
        assert decode_step(64, context).intensity < limit
    assert round(decode_intensity_limit(8192)) == 18 and decode_intensity_limit(512) < H100_SXM.ridge
    with pytest.raises(ValueError, match="context must be a positive int"):
        decode_intensity_limit(0)


def test_sample_routing_draws_distinct_experts_with_each_router_s_load():
    import torch

    from helpers.inference import ROUTERS, sample_routing

    gen = torch.Generator().manual_seed(0)
    for router in ROUTERS:
        routing = sample_routing(50, 8, 2, router, generator=gen)
        assert routing.shape == (50, 2) and routing.dtype == torch.int64
        assert all(len(set(row)) == 2 for row in routing.tolist()), router
        assert 0 <= int(routing.min()) and int(routing.max()) < 8
    assert torch.bincount(sample_routing(40, 8, 2, "balanced").flatten(), minlength=8).tolist() == [10] * 8
    assert torch.unique(sample_routing(40, 8, 2, "collapsed")).tolist() == [0, 1]
    skewed = torch.bincount(sample_routing(8000, 8, 2, "skewed", generator=gen).flatten(), minlength=8)
    assert bool((skewed[:-1] > skewed[1:]).all()), skewed                # popularity falls with the index (Zipf)
    touched = [torch.unique(sample_routing(3, 8, 2, generator=gen)).numel() for _ in range(4000)]
    assert abs(sum(touched) / len(touched) - expected_experts_touched(3, 8, 2)) < 0.05
    with pytest.raises(ValueError, match="router"):
        sample_routing(4, 8, 2, "uniform")


def test_decode_memory_is_every_weight_plus_every_cache_and_capacity_binds_before_bandwidth():
    counts = dense_param_counts()
    step = decode_step(64, 8192)
    assert step.memory_bytes == 2 * counts["total"] + 64 * 8192 * 131072          # 84.8 GB: over one H100's 80
    assert step.memory_bytes > H100_SXM_MEMORY > decode_step(512, 128).memory_bytes
    fits = largest_batch_that_fits(384)
    assert decode_step(fits, 384).memory_bytes <= H100_SXM_MEMORY < decode_step(fits + 1, 384).memory_bytes
    assert largest_batch_that_fits(10 ** 6) == 0
    context, batch = ridge_context_that_fits()
    assert batch == largest_batch_that_fits(context)
    assert decode_step(batch, context).intensity >= H100_SXM.ridge
    assert decode_step(largest_batch_that_fits(context + 1), context + 1).intensity < H100_SXM.ridge
    assert context < 393 and context == 317                 # below the bandwidth-only crossover (Exercise 6)
    assert ridge_context_that_fits(memory=1e12)[0] > context                           # more memory, longer reach
    assert ridge_context_that_fits(memory=16e9) == (0, 0)                              # the weights alone overflow
    with pytest.raises(ValueError, match="memory"):
        largest_batch_that_fits(10, memory=0)


def test_the_reported_h100_capacity_holds_the_8k_rows_with_under_a_gigabyte_left():
    from helpers.inference import H100_SXM_MEMORY_REPORTED
    assert H100_SXM_MEMORY_REPORTED == 85_520_809_984                               # 81,559 MiB
    spare = H100_SXM_MEMORY_REPORTED - decode_step(64, 8192).memory_bytes
    assert 0.7e9 < spare < 0.8e9                                                    # 0.74 GB beside 84.8 GB
    assert ridge_context_that_fits(memory=H100_SXM_MEMORY_REPORTED) == (322, 1645)


def test_plot_roofline_draws_each_roof_and_places_points_on_the_first():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.inference import plot_roofline

    fig, ax = plt.subplots()
    toy = Hardware("toy", 100e12, 10e12)                               # ridge 10
    plot_roofline(ax, [toy, Hardware("toy x2", 200e12, 10e12)],
                  [("points", "C0", [(1.0, "low"), (100.0, "high")])], intensity_range=(0.5, 1000))
    roof, _ridge, roof2, _ridge2, points = ax.lines
    assert list(roof.get_xdata()) == [0.5, 10, 1000] and list(roof.get_ydata()) == [5, 100, 100]    # TFLOP/s
    assert list(roof2.get_ydata()) == [5, 200, 200]
    assert list(points.get_ydata()) == [10, 100]                        # on the first roof: 10 TB/s × 1, then the peak
    assert [t.get_text() for t in ax.texts] == ["low", "high"]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    ax2 = plt.figure().add_subplot()
    plot_roofline(ax2, [toy], [("points", "C0", [(1.0, "low"), (100.0, "high")])], intensity_range=(0.5, 1000),
                  hollow=["high"], hollow_label="does not fit")
    _roof, _ridge, filled, open_points, legend_only = ax2.lines
    assert list(filled.get_ydata()) == [10] and list(open_points.get_ydata()) == [100]
    assert open_points.get_markerfacecolor() == "white" and legend_only.get_label() == "does not fit"
    with pytest.raises(ValueError, match="hardware"):
        plot_roofline(ax, [], [])
    with pytest.raises(ValueError, match="intensity_range"):
        plot_roofline(ax, [toy], [], intensity_range=(10, 1))
    plt.close(fig)


def test_plot_roofline_draws_each_group_with_its_marker_and_rejects_a_wrong_count():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from helpers.inference import Hardware, plot_roofline
    toy = Hardware("toy", 100e12, 10e12)
    fig, ax = plt.subplots()
    plot_roofline(ax, [toy], [("a", "C0", [(1.0, "p")]), ("b", "C1", [(2.0, "q"), (3.0, "r")])],
                  hollow=["r"], markers=["o", "D"])
    drawn = {line.get_label(): line.get_marker() for line in ax.lines if not line.get_label().startswith("_")}
    assert drawn["a"] == "o" and drawn["b"] == "D"
    assert [line.get_marker() for line in ax.lines if line.get_mfc() == "white"] == ["D"]
    with pytest.raises(ValueError, match="markers"):
        plot_roofline(ax, [toy], [("a", "C0", [(1.0, "p")])], markers=["o", "D"])
    plt.close(fig)


def test_plot_link_roofline_draws_each_curve_and_each_link_up_to_its_reach():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.inference import plot_link_roofline

    fig, ax = plt.subplots()
    plot_link_roofline(ax, [("TP", "C0", [(2, 100.0), (4, 33.0), (16, 7.0)])],
                       [("fast", 50.0, 8), ("slow", 500.0, None)], points=[(4, 33.0, "here", "C0")])
    curve, fast, slow, point = ax.lines
    assert list(curve.get_xdata()) == [2, 4, 16] and list(curve.get_ydata()) == [100.0, 33.0, 7.0]
    assert list(fast.get_xdata()) == [2, 8] and list(fast.get_ydata()) == [50.0, 50.0]      # stops at its reach
    assert list(slow.get_xdata()) == [2, 16] and list(point.get_ydata()) == [33.0]
    assert [t.get_text() for t in ax.texts] == ["fast: 50 (R ≤ 8)", "slow: 500", "here"]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="curves"):
        plot_link_roofline(ax, [], [])
    with pytest.raises(ValueError, match="R >= 2"):
        plot_link_roofline(ax, [("x", "C0", [(1, 3.0)])], [])
    with pytest.raises(ValueError, match="ratio"):
        plot_link_roofline(ax, [("x", "C0", [(2, 3.0)])], [("bad", -1.0, None)])
    with pytest.raises(ValueError, match="styles"):
        plot_link_roofline(ax, [("x", "C0", [(2, 3.0)])], [], styles=["-", "--"])
    ax3 = plt.figure().add_subplot()
    plot_link_roofline(ax3, [("a", "C0", [(2, 3.0), (4, 2.0)])], [], styles=["--"])
    assert ax3.lines[0].get_linestyle() == "--"
    ax4 = plt.figure().add_subplot()
    plot_link_roofline(ax4, [("a", "C0", [(2, 3.0), (4, 2.0)]), ("b", "C1", [(2, 3.0)])], [], markers=["o", None])
    assert ax4.lines[0].get_marker() == "o" and ax4.lines[0].get_zorder() > ax4.lines[1].get_zorder()
    with pytest.raises(ValueError, match="markers"):
        plot_link_roofline(ax4, [("x", "C0", [(2, 3.0)])], [], markers=["o", "s"])
    plt.close("all")


def test_largest_hidden_group_is_the_last_r_whose_ratio_reaches_the_link():
    from helpers.inference import DEEPSEEK_V3_EXPERTS, largest_hidden_group, training_flops_per_byte
    for link in (2198.0, 19780.0, 9216.0):          # 9216: Mixtral's TP at R = 8 exactly
        r = largest_hidden_group("TP", link)
        assert training_flops_per_byte("TP", r) >= link > training_flops_per_byte("TP", r + 1)
    assert largest_hidden_group("TP", 2198.0) == 30 and largest_hidden_group("TP", 19780.0) == 4
    assert largest_hidden_group("TP", 1e9) == 1                               # no R >= 2 hides it
    assert largest_hidden_group("EP", 2198.0, max_ranks=64, **DEEPSEEK_V3_EXPERTS) == 64   # the ratio stays above
    assert largest_hidden_group("FSDP", 19780.0, max_ranks=64, tokens_per_rank=32768) == 64
    with pytest.raises(ValueError, match="link_ratio"):
        largest_hidden_group("TP", 0.0)
    with pytest.raises(ValueError, match="max_ranks"):
        largest_hidden_group("TP", 10.0, max_ranks=1)


def test_training_flops_per_byte_matches_each_split_s_closed_form():
    from helpers.inference import training_flops_per_byte
    for r in (2, 8, 64):
        assert training_flops_per_byte("TP", r) == pytest.approx(9 / 4 * 2 * 14336 / (r - 1))
        assert training_flops_per_byte("EP", r, d_model=7168, d_ff=2048, top_k=8) == pytest.approx(9 / 4 * 2048 * r / (r - 1))
        assert training_flops_per_byte("FSDP", r, tokens_per_rank=4096) == pytest.approx(4096 * r / (r - 1))
    with pytest.raises(ValueError, match="split"):
        training_flops_per_byte("DP", 8)
    with pytest.raises(ValueError, match="world_size"):
        training_flops_per_byte("TP", 1)
