"""helpers.moe_configs: the published configurations, DeepSeekMoE's count of expert sets, the configuration figure."""
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from helpers.moe_configs import PUBLISHED, configuration_figure, expert_combinations, published_table, width_table


def test_published_table_derives_the_share_and_the_sets():
    lines = published_table()
    assert len(lines) == len(PUBLISHED) + 1
    v3 = next(line for line in lines if line.startswith("DeepSeek-V3"))
    assert " 6%" in v3 and "4.1e+14" in v3 and f"{math.comb(256, 8):.1e}" == "4.1e+14"
    assert "35960" in next(line for line in lines if line.startswith("gpt-oss-20b"))
    assert all(m.k <= m.routed for m in PUBLISHED)


def test_width_table_reads_the_granularity_off_the_configurations():
    lines = width_table()
    assert len(lines) == len(PUBLISHED) + 1 and all(m.d_model and m.expert_width and m.moe_layers for m in PUBLISHED)
    assert "0.29" in next(line for line in lines if line.startswith("DeepSeek-V3"))        # 2,048 / 7,168
    assert "3.50" in next(line for line in lines if line.startswith("Mixtral"))            # 14,336 / 4,096


def test_expert_combinations():
    assert expert_combinations(16, 2) == 120 and expert_combinations(16, 2, 4) == math.comb(64, 8) == 4_426_165_368
    assert expert_combinations(8, 2, 4, 1) == math.comb(31, 7) and expert_combinations(8, 8) == 1
    with pytest.raises(ValueError, match="at least one routed choice"):
        expert_combinations(8, 1, 2, 2)


def test_configuration_figure():
    import matplotlib.pyplot as plt

    for m, s in ((4, 1), (1, 0)):
        fig = configuration_figure(64, 8, 2, 128, m, s)
        assert len(fig.axes) == 2
        plt.close(fig)
