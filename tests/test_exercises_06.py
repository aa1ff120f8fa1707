"""Notebook 06's checkers: unlisted wrong answers, accepted result types, varied hidden cases
(the generic contract for every checker is in test_exercise_contract.py).
"""
import pytest
import torch

from helpers.exercises import nb06 as ex
from helpers.exercises.engine import FAILED, PASSED

EXERCISES = {
    "flops": ex.check_model_flops,
    "saved": ex.check_saved_floats,
    "peak": ex.check_peak_bytes,
    "splits": ex.check_split_sizes,
}

#: a wrong answer that is not one of the listed mistakes, for every exercise
UNLISTED_WRONG = {
    "flops": lambda n, d, f, t, g, tr: ex.model_flops_reference(n, d, f, t, g, tr) + 1,
    "saved": lambda d, f, v: d + 3 * f,
    "peak": lambda t, d, f, n: 4 * (t * d + t * 2 * f // n) + 8,
    "splits": lambda ei, kept, e, w: [int(kept.sum())] + [0] * (w - 1),
}


@pytest.mark.parametrize("name", EXERCISES)
def test_unlisted_wrong_answer_fails_without_a_hint(name):
    result = EXERCISES[name].evaluate(UNLISTED_WRONG[name])
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


def test_split_sizes_accepts_a_tensor_or_a_tuple():
    def as_tensor(ei, kept, e, w):
        return torch.bincount(ei[kept] // (e // w), minlength=w)

    assert ex.check_split_sizes.evaluate(as_tensor).status == PASSED
    assert ex.check_split_sizes.evaluate(lambda *a: tuple(as_tensor(*a).tolist())).status == PASSED


def test_split_sizes_wrong_length_is_reported():
    result = ex.check_split_sizes.evaluate(lambda ei, kept, e, w: [0])
    assert result.status == FAILED and "items" in result.message


def test_hidden_cases_vary():
    shapes = {tuple(c.args[0].shape) for c in ex.check_split_sizes.cases()}
    assert len(shapes) >= 4
    assert len({c.args for c in ex.check_model_flops.cases()}) >= 6
    assert any(c.args[0] % c.args[3] for c in ex.check_peak_bytes.cases()), "a T that does not split evenly"
