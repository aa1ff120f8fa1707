import pytest
import torch

from helpers.costs import (SAVED_D_FF_TENSORS, count_ops, ffn_flops_per_token, layer_cost, measure_flops,
                           measure_saved_tensors, saved_per_token, torch_threads)
from helpers.ffn import FFN, VARIANTS
from helpers.moe import MoE


@pytest.mark.parametrize("variant, gated", [("gelu", False), ("swiglu", True)])
def test_flop_formula_matches_flop_counter(variant, gated):
    d, d_ff, tokens = 32, 96, 10
    ffn = FFN.from_variant(variant, d, d_ff, bias=False)
    x = torch.randn(tokens, d)
    assert measure_flops(lambda: ffn(x)) == tokens * ffn_flops_per_token(d, d_ff, gated=gated)
    x.requires_grad_(True)
    total = measure_flops(lambda: ffn(x).sum().backward())
    assert total == tokens * ffn_flops_per_token(d, d_ff, gated=gated, backward=True)


@pytest.mark.parametrize("variant, per_token", [("relu", lambda d, f: d + f), ("gelu", lambda d, f: d + 2 * f),
                                                 ("swiglu", lambda d, f: d + 4 * f)])
def test_saved_activations_match_formula(variant, per_token):
    d, d_ff, tokens = 16, 64, 12
    ffn = FFN.from_variant(variant, d, d_ff)
    x = torch.randn(tokens, d, requires_grad=True)
    saved = measure_saved_tensors(lambda: ffn(x), exclude=ffn)
    assert saved.per_token(tokens) == per_token(d, d_ff)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("bias", [True, False])
def test_saved_per_token_matches_the_hooks(variant, bias):
    d, d_ff, tokens = 8, 20, 15
    ffn = FFN.from_variant(variant, d, d_ff, bias=bias)
    x = torch.randn(3, 5, d, requires_grad=True)
    saved = measure_saved_tensors(lambda: ffn(x), exclude=ffn)
    assert saved.per_token(tokens) == saved_per_token(variant, d, d_ff)


def test_saved_table_covers_every_variant():
    assert set(SAVED_D_FF_TENSORS) == set(VARIANTS)
    assert saved_per_token("relu", 4, 16) == 20 and saved_per_token("swiglu", 4, 16) == 68


def test_torch_threads_restores():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n must be a positive int, got 0"):
        with torch_threads(0):
            pass


def test_count_ops_counts_kernels_and_matmuls():
    a, b = torch.randn(4, 3), torch.randn(3, 5)
    ops = count_ops(lambda: (a @ b).t().relu().sum())
    assert ops.matmuls == 1 and ops.kernels == 3 and ops.by_name["t"] == 1     # mm, relu, sum; t is a view


def test_layer_cost_counts_what_the_formulas_say():
    torch.manual_seed(0)
    n, d, width = 512, 16, 32
    x = torch.randn(n, d)
    dense = layer_cost(FFN.from_variant("swiglu", d, width, bias=False), x)
    assert dense.flops == 2 * n * 3 * d * width and dense.matmuls == 3 and dense.moved_bytes == 0
    assert dense.weight_bytes == dense.read_bytes == 3 * d * width * 4 and dense.rows == n
    moe = MoE(d, 8, 2, d_ff=width)
    c = layer_cost(moe, x)
    assert c.weight_bytes == c.read_bytes == sum(p.numel() for p in moe.parameters()) * 4     # every expert used
    assert c.matmuls == 3 * 8 + 1 and c.moved_bytes == 2 * n * 2 * d * 4 and c.rows == n * 2 / 8
    assert c.flops == 2 * n * d * 8 + 2 * n * 2 * 3 * d * width                              # router + 2 experts
    one = layer_cost(moe, x[:1])                                                             # one token: 2 experts
    assert one.read_bytes == (8 * d + 2 * 3 * d * width) * 4 and one.matmuls == 7
    fine = layer_cost(MoE(d, 8, 2, d_ff=width, granularity=4, n_shared=1), x)
    assert fine.matmuls == 3 * 31 + 1 + 3 and fine.moved_bytes == 2 * n * 7 * d * 4
    with pytest.raises(TypeError, match="an FFN or an MoE"):
        layer_cost(torch.nn.Linear(d, d), x)
