"""Notebook 01's checkers: references checked independently, unlisted wrong answers, specific messages
(the generic contract for every checker is in test_exercise_contract.py).
"""
import math

import pytest
import torch

from helpers import activations
from helpers.exercises.engine import FAILED
from helpers.exercises.nb01 import (EXERCISES, check_collapse, check_dead_fraction, check_gelu_derivative,
                                  check_gelu_exact, check_gelu_tanh, check_swish)

IDS = [ex.title for ex in EXERCISES]


# The course's own helpers are independent implementations: they must pass too.
def test_course_helpers_pass_the_checkers():
    assert check_gelu_exact.evaluate(activations.gelu).passed
    assert check_gelu_tanh.evaluate(activations.gelu_tanh).passed
    assert check_swish.evaluate(activations.swish).passed


def test_gelu_derivative_reference_matches_autograd():
    x = torch.linspace(-5, 5, 201, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(activations.gelu(x).sum(), x)
    torch.testing.assert_close(check_gelu_derivative.reference(x.detach()), grad)


def test_dead_fraction_reference_on_a_small_example():
    pre = torch.tensor([[-1.0, 0.0, 2.0, -3.0], [-0.5, 0.0, -1.0, 0.1], [-2.0, 0.0, -1.0, -0.2]])
    assert check_dead_fraction.reference(pre) == 0.5  # units 0 and 1 never fire; 2 and 3 fire once


def test_collapse_reference_reproduces_the_two_layers():
    g = torch.Generator().manual_seed(0)
    w1, b1 = torch.randn(7, 3, generator=g, dtype=torch.float64), torch.randn(7, generator=g, dtype=torch.float64)
    w2, b2 = torch.randn(4, 7, generator=g, dtype=torch.float64), torch.randn(4, generator=g, dtype=torch.float64)
    x = torch.randn(10, 3, generator=g, dtype=torch.float64)
    w, b = check_collapse.reference(w1, b1, w2, b2)
    torch.testing.assert_close(x @ w.T + b, (x @ w1.T + b1) @ w2.T + b2)


# Wrong answers that are not in the mistake lists still fail (and get no misleading hint).
@pytest.mark.parametrize("ex, wrong", [
    (check_gelu_exact, lambda x: x * 0.5 * (1 + torch.erf(x / 1.4))),
    (check_gelu_tanh, lambda x: 0.5 * x * (1 + torch.tanh(0.8 * (x + 0.044715 * x ** 3)))),
    (check_swish, lambda x, beta: x * torch.sigmoid(beta * x + 0.01)),
    (check_gelu_derivative, lambda x: 0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-x * x / 2) / 2.5),
    (check_dead_fraction, lambda pre: (pre <= -0.5).all(dim=0).double().mean().item()),
    (check_collapse, lambda w1, b1, w2, b2: (w2 @ w1, w2 @ b1 - b2)),
], ids=IDS)
def test_unlisted_wrong_answer_fails(ex, wrong):
    result = ex.evaluate(wrong)
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


def test_wrong_shape_and_type_are_reported():
    assert "expected shape" in check_gelu_exact.evaluate(lambda x: x.flatten()[:3]).message
    assert "expected a number" in check_dead_fraction.evaluate(lambda pre: "half").message
    transposed = check_collapse.evaluate(lambda w1, b1, w2, b2: ((w2 @ w1).T, w2 @ b1 + b2))
    assert transposed.status == FAILED and "[0]" in transposed.message  # the first case is square: values differ
