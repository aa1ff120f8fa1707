"""Notebook 04's checkers: other correct forms pass, unlisted wrong answers fail
(the generic contract for every checker is in test_exercise_contract.py).
"""
import math

import torch
import torch.nn.functional as F

from helpers.exercises.engine import FAILED, PASSED
from helpers.exercises.nb04 import (check_gate_gradients, check_gated_params, check_gated_width, check_saved_per_token,
                                  check_swiglu)

# ---- learner-style solutions: other correct ways pass, unlisted wrong answers still fail
def test_swiglu_other_correct_forms_pass_and_unlisted_errors_fail():
    def with_linear(x, w1, w3, w2):
        return F.linear(F.silu(F.linear(x, w1)) * F.linear(x, w3), w2)

    def by_hand(x, w1, w3, w2):
        a = x @ w1.T
        return (a * torch.sigmoid(a) * (x @ w3.T)) @ w2.T

    assert check_swiglu.evaluate(with_linear).status == PASSED
    assert check_swiglu.evaluate(by_hand).status == PASSED
    doubled = check_swiglu.evaluate(lambda x, w1, w3, w2: 2 * by_hand(x, w1, w3, w2))
    assert doubled.status == FAILED and "Likely mistake" not in doubled.message
    first_only = check_swiglu.evaluate(lambda x, w1, w3, w2: by_hand(x[..., :1].expand_as(x), w1, w3, w2))
    assert first_only.status == FAILED


def test_gated_width_other_correct_forms_pass_and_unlisted_errors_fail():
    def integer_arithmetic(d, m):
        w = 8 * d // 3
        return -(-w // m) * m

    assert check_gated_width.evaluate(integer_arithmetic).status == PASSED
    assert check_gated_width.evaluate(lambda d, m: math.ceil(int(2 * 4 * d / 3) / m) * m).status == PASSED
    wrong = check_gated_width.evaluate(lambda d, m: 4 * d)        # the dense width
    assert wrong.status == FAILED and "Likely mistake" not in wrong.message
    assert check_gated_width.evaluate(lambda d, m: float(integer_arithmetic(d, m)) + 0.5).status == FAILED


def test_gated_params_unlisted_error_fails():
    assert check_gated_params.evaluate(lambda d, f, b: 3 * d * f + (2 * f + d) * b).status == PASSED
    wrong = check_gated_params.evaluate(lambda d, f, b: 3 * (d + 1) * f)
    assert wrong.status == FAILED and "Likely mistake" not in wrong.message


def test_gate_gradients_by_formula_or_autograd_pass_and_unlisted_error_fails():
    def by_formula(a, b, gh):
        s = torch.sigmoid(a)
        return gh * b * s * (1 + a * (1 - s)), gh * a * s

    def by_autograd(a, b, gh):
        a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
        return torch.autograd.grad(F.silu(a) * b, (a, b), gh)

    assert check_gate_gradients.evaluate(by_formula).status == PASSED
    assert check_gate_gradients.evaluate(by_autograd).status == PASSED
    wrong = check_gate_gradients.evaluate(lambda a, b, gh: (gh * b, gh * b))
    assert wrong.status == FAILED and "Likely mistake" not in wrong.message
    assert check_gate_gradients.evaluate(lambda a, b, gh: by_formula(a, b, gh)[0]).status == FAILED


def test_saved_per_token_unlisted_error_fails():
    wrong = check_saved_per_token.evaluate(lambda v, d, f: 2 * d + 4 * f)
    assert wrong.status == FAILED and "Likely mistake" not in wrong.message
