"""Checkers of notebook 07: what the generic contract test does not cover."""
import math

import torch

from helpers.exercises import nb07
from helpers.moe import MoE, bias_update_step


def test_v3_reference_agrees_with_the_library_router():
    torch.manual_seed(0)
    layer = MoE(8, 6, 3, d_ff=8, score="sigmoid").eval()
    layer.selection_bias.copy_(torch.tensor([0.0, 0.4, -0.2, 0.0, 0.1, 0.0]))
    r = layer.route(torch.randn(20, 8))
    gates = nb07._v3_gates(r.logits.double(), layer.selection_bias.double(), 3)
    expected = torch.zeros(20, 6, dtype=torch.float64).scatter(1, r.expert_index, r.weight.double())
    torch.testing.assert_close(gates, expected, atol=1e-6, rtol=1e-6)


def test_v3_reference_agrees_with_the_library_router_at_k1():
    """At k = 1 both keep the affinity sigma(logit) of the chosen expert (no normalisation to 1)."""
    torch.manual_seed(1)
    layer = MoE(8, 5, 1, d_ff=8, score="sigmoid").eval()
    layer.selection_bias.copy_(torch.tensor([0.0, 0.3, -0.2, 0.0, 0.1]))
    r = layer.route(torch.randn(12, 8))
    gates = nb07._v3_gates(r.logits.double(), layer.selection_bias.double(), 1)
    expected = torch.zeros(12, 5, dtype=torch.float64).scatter(1, r.expert_index, r.weight.double())
    torch.testing.assert_close(gates, expected, atol=1e-6, rtol=1e-6)
    assert bool((gates.sum(1) < 1).all())


def test_bias_reference_agrees_with_the_library():
    bias, load = torch.randn(5, dtype=torch.float64), torch.tensor([3, 9, 5, 5, 3])
    torch.testing.assert_close(nb07._bias_step(bias, load, 0.02), bias_update_step(bias, load, 0.02))


def test_combinations_match_deepseekmoe_example():
    assert nb07._combinations(16, 2, 1, 0) == 120
    assert nb07._combinations(16, 2, 4, 0) == 4_426_165_368 == math.comb(64, 8)


def test_gap_in_errors_is_welch_t():
    a, b = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 6.0, 8.0])
    assert nb07._gap_in_errors(a, b) == (6.0 - 2.0) / math.sqrt(1.0 / 3 + 4.0 / 3)


def test_blank_stubs_are_not_attempted():
    def blank(*args):
        raise NotImplementedError

    for ex in nb07.EXERCISES:
        assert ex.evaluate(blank).status == "not attempted"
