import pytest
import torch

from helpers.costs import (SAVED_D_FF_TENSORS, ffn_flops_per_token, measure_flops, measure_saved_tensors, median_seconds,
                           saved_per_token, torch_threads)
from helpers.ffn import FFN, VARIANTS


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
