"""helpers.moe_configs: the published configurations, DeepSeekMoE's count of expert sets, the configuration figure."""
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from helpers.moe_configs import (PUBLISHED, SWITCH_TABLE_1, bytes_per_token_figure, configuration_figure, expert_combinations,
                                 published_table, switch_figure, switch_per_step_line, weight_bytes_per_token,
                                 width_table)


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


def test_weight_bytes_per_token_counts_the_experts_a_batch_reaches():
    import torch

    from helpers.costs import layer_cost
    from helpers.ffn import FFN
    from helpers.moe import MoE
    x = torch.randn(4096, 64)
    dense = layer_cost(FFN.from_variant("swiglu", 64, 128, bias=False), x).read_bytes
    assert weight_bytes_per_token(4096, 64, 128) * 4096 == dense == 3 * 64 * 128 * 4
    for m, s in ((1, 0), (4, 1)):      # a batch this large reaches every expert: what layer_cost reads
        moe = layer_cost(MoE(64, 8, 1, d_ff=128, granularity=m, n_shared=s), x).read_bytes
        assert weight_bytes_per_token(4096, 64, 128, 8, 1, granularity=m, n_shared=s) * 4096 == pytest.approx(moe)
    # one token reads the router and its k experts only; two tokens reach 1 + 7/8 experts on average
    assert weight_bytes_per_token(1, 64, 128, 8, 2) == 64 * 8 * 4 + 2 * dense
    assert weight_bytes_per_token(2, 64, 128, 8, 1) * 2 == pytest.approx(64 * 8 * 4 + (1 + 7 / 8) * dense)
    with pytest.raises(ValueError, match="batch"):
        weight_bytes_per_token(0, 64, 128)


def test_bytes_per_token_figure_draws_each_layer_and_its_ratio():
    import matplotlib.pyplot as plt

    fig = bytes_per_token_figure({"dense": dict(d_model=8, d_ff=16), "moe": dict(d_model=8, d_ff=16, n_experts=4)},
                                 batches=(1, 2, 64))
    left, right = fig.axes
    assert len(left.lines) == len(right.lines) == 2
    assert list(right.lines[0].get_ydata()) == [1.0, 1.0, 1.0] and right.lines[1].get_ydata()[-1] == pytest.approx(4 + 32 / 384)     # E/k and the router
    plt.close(fig)


def test_group_limited_sets_counts_deepseek_v3s_limit_and_reduces_to_the_binomial():
    import itertools
    import math

    from helpers.moe_configs import group_limited_sets
    assert group_limited_sets(256, 8, 8, 8) == math.comb(256, 8)
    assert group_limited_sets(256, 8, 8, 4) == 71_614_201_382_880          # review 07-round12: 17.5 % of C(256, 8)
    brute = sum(1 for s in itertools.combinations(range(12), 3) if len({e // 3 for e in s}) <= 2)
    assert group_limited_sets(12, 3, 4, 2) == brute


def test_switch_table_1_as_published_and_drawn():
    import matplotlib.pyplot as plt

    rows = {r.model: r for r in SWITCH_TABLE_1}
    assert (rows["T5-Base"].speed, rows["Switch-Base"].speed, rows["T5-Large"].speed) == (1600, 1000, 470)
    assert rows["T5-Base"].hours is None and (rows["Switch-Base"].hours, rows["T5-Large"].hours) == (62.8, 131.1)
    assert rows["T5-Base"].quality < rows["Switch-Base"].quality < rows["T5-Large"].quality < -1.50
    fig = switch_figure()
    assert len(fig.axes) == 3
    plt.close(fig)


def test_switch_per_step_line_reads_section_3_1():
    line = switch_per_step_line()
    assert line.startswith("Switch-Base with 64 experts") and "step-450k loss at step 60k: 7.5× fewer steps" in line


class _RoutingOfMoE:
    """An MoE block's own routing (``gate`` + ``route_tokens_to_experts``) behind the router interface: for
    transformers releases whose router returns only logits (Colab's 5.6)."""

    def __init__(self, moe, batched: bool):
        self.moe, self.batched, self.weight = moe, batched, moe.gate.weight

    def __call__(self, x):
        import torch

        logits = torch.nn.functional.linear(x.float(), self.weight.float())    # (tokens, experts)
        index, weights = self.moe.route_tokens_to_experts(logits[None] if self.batched else logits)
        return weights, index


def _router(kind: str, config):
    """transformers' router for ``kind``, or its MoE block's routing where the release has no router class."""
    import torch
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as v2
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as v3
    from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter

    if kind == "DeepSeekMoE" and not hasattr(v2, "DeepseekV2TopkRouter"):
        return _RoutingOfMoE(v2.DeepseekV2Moe(config), batched=True)
    router = {"Mixtral": MixtralTopKRouter, "DeepSeekMoE": getattr(v2, "DeepseekV2TopkRouter", None),
              "DeepSeek-V3": v3.DeepseekV3TopkRouter}[kind](config)
    if isinstance(router(torch.zeros(1, config.hidden_size)), torch.Tensor):      # logits only
        return _RoutingOfMoE(v3.DeepseekV3MoE(config), batched=False)
    return router


def test_gate_conventions_match_transformers_routers():
    """Each convention of ``GATE_CONVENTIONS`` against transformers' router built from a tiny config, same weights."""
    import torch

    pytest.importorskip("transformers")
    from transformers import DeepseekV2Config, DeepseekV3Config, MixtralConfig

    from helpers.moe_configs import gate_layers, gate_table

    layers = gate_layers(16, 8, 2, seed=3)
    routers = {
        "Mixtral": _router("Mixtral", MixtralConfig(hidden_size=16, num_local_experts=8, num_experts_per_tok=2)),
        "DeepSeekMoE": _router("DeepSeekMoE", DeepseekV2Config(
            hidden_size=16, num_attention_heads=2, num_key_value_heads=2, n_routed_experts=8, num_experts_per_tok=2,
            topk_method="greedy", n_group=1, topk_group=1, routed_scaling_factor=1.0, norm_topk_prob=False)),
        "DeepSeek-V3": _router("DeepSeek-V3", DeepseekV3Config(
            hidden_size=16, num_attention_heads=2, num_key_value_heads=2, n_routed_experts=8, num_experts_per_tok=2,
            n_group=1, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5)),
    }
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    for name, router in routers.items():
        layer, scale = layers[name]
        with torch.no_grad():
            router.weight.copy_(layer.router.weight)
            out = router(x)
            routing = layer.route(x)
        weights, index = out[-2], out[-1]
        order = index.argsort(-1)       # transformers need not sort the chosen; compare expert by expert
        ours = routing.expert_index.argsort(-1)
        assert torch.equal(index.gather(1, order), routing.expert_index.gather(1, ours)), name
        assert torch.allclose(weights.float().gather(1, order), (routing.weight * scale).gather(1, ours), atol=1e-6), name
    assert len(gate_table(x[0], layers)) == 4
    # the default MoE is unchanged by the option: renormalised, as in notebooks 05, 06 and 08
    assert layers["Mixtral"][0].renormalise and not layers["DeepSeekMoE"][0].renormalise


def test_published_figure_draws_every_model_and_router_table_prints_the_rest():
    """Notebook 07's section 1: one row per model in each of the three panels, the numbers the prose reads written on
    the bars (active share, C(E, k), width / d_model); the text columns in ``router_table``."""
    import matplotlib.pyplot as plt
    from helpers.moe_configs import published_figure, router_table
    fig = published_figure()
    size, experts, width = fig.axes
    assert [t.get_text() for t in size.get_yticklabels()] == [m.name for m in PUBLISHED]
    notes = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "37B of 671B (6%)" in notes
    assert "top-8 of 256 + 1 shared; C(E, k) 4.1e+14,\n7.2e+13 within 4 of 8 groups" in notes   # V3's group limit
    assert [t.get_text() for t in experts.get_xticklabels()][-1].endswith("{2}}$")   # the ticks stop at the data
    assert "top-4 of 32; C(E, k) 35,960" in notes and {"0.29", "0.38", "1.60", "3.50"} <= set(notes)
    plt.close(fig)
    lines = router_table()
    assert len(lines) == len(PUBLISHED) + 1 and "58 of 61 (first 3 dense)" in lines[2]
