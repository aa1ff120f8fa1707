"""Notebook 02's checkers: unlisted wrong answers, the transposed-weight hints, the hidden cases
(the generic contract for every checker is in test_exercise_contract.py).
"""
import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import nb02 as ex
from helpers.exercises.engine import FAILED

EXERCISES = {
    "forward": ex.check_ffn_forward,
    "params": ex.check_param_count,
    "flops": ex.check_forward_flops,
    "contributions": ex.check_contributions,
    "pre_ln": ex.check_pre_ln_step,
}

#: a wrong answer that is not one of the listed mistakes, for every exercise
UNLISTED_WRONG = {
    "forward": lambda x, W1, b1, W2, b2: F.gelu(x @ W1 + b1) @ W2 + 2 * b2,
    "params": lambda d, d_ff, bias=True: 2 * d * d_ff + d_ff + d + 1,
    "flops": lambda n, d, d_ff: 4 * n * d * d_ff + 1,
    "contributions": lambda f, x: f.hidden(x).unsqueeze(-1) * f.w2.weight.T * 1.01,
    "pre_ln": lambda x, f, ln: x + 2 * f(ln(x)),
}


@pytest.mark.parametrize("name", EXERCISES)
def test_unlisted_wrong_answer_fails_without_a_hint(name):
    result = EXERCISES[name].evaluate(UNLISTED_WRONG[name])
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


@pytest.mark.parametrize("flips, words", [
    ((True, False), "W1 is used in the wrong orientation"),
    ((False, True), "W2 is used in the wrong orientation"),
    ((True, True), "both weights are used in the wrong orientation"),
])
def test_forward_says_which_weight_is_transposed(flips, words):
    def learner(x, W1, b1, W2, b2):  # expects nn.Linear's (out, in) layout for the flipped weights
        h = x @ W1.T if flips[0] else x @ W1
        m = F.gelu(h + b1)
        return (m @ W2.T if flips[1] else m @ W2) + b2

    result = ex.check_ffn_forward.evaluate(learner)
    assert result.status == FAILED
    assert "raised RuntimeError" in result.message and words in result.message


def test_forward_hidden_cases_are_non_square_and_varied():
    shapes = set()
    for case in ex.check_ffn_forward.cases():
        x, W1, b1, W2, b2 = case.args
        d, d_ff = W1.shape
        assert d != d_ff and x.shape[-2] not in (d, d_ff) and W2.shape == (d_ff, d)
        shapes.add((tuple(x.shape), d_ff))
    assert len(shapes) == len(ex.check_ffn_forward.cases())
    assert any(case.args[0].dim() == 3 for case in ex.check_ffn_forward.cases()), "one batched (B, T, d) input"


def test_tanh_gelu_is_far_enough_from_exact_to_be_caught():
    x, W1, b1, W2, b2 = ex.check_ffn_forward.cases()[0].args
    exact = F.gelu(x @ W1 + b1) @ W2 + b2
    approx = F.gelu(x @ W1 + b1, approximate="tanh") @ W2 + b2
    tolerance = ex.check_ffn_forward.atol + ex.check_ffn_forward.rtol * exact.abs()
    assert ((exact - approx).abs() / tolerance).max() > 5


def test_building_the_cases_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ex.check_contributions.cases()
    ex.check_pre_ln_step.cases()
    assert torch.equal(torch.rand(3), expected)


def test_contributions_sum_to_the_ffn_output():
    for case in ex.check_contributions.cases():
        ffn, x = case.args
        with torch.no_grad():
            total = ex.check_contributions.reference(ffn, x).sum(-2) + ffn.w2.bias
            assert torch.allclose(total, ffn(x), atol=1e-5)
