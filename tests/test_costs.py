import pytest
import torch

from helpers.costs import ffn_flops_per_token, measure_flops, measure_saved_tensors, median_seconds
from helpers.ffn import FFN


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


def test_median_seconds_is_positive():
    assert median_seconds(lambda: torch.ones(10).sum(), min_run_time=0.01) > 0
