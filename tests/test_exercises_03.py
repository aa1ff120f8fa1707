"""Notebook 03's checkers: unlisted wrong answers and informative hidden cases
(the generic contract for every checker is in test_exercise_contract.py).
"""
import pytest
import torch.nn.functional as F

from helpers.exercises import nb03 as ex
from helpers.exercises.engine import FAILED

EXERCISES = {
    "coefficients": ex.check_memory_coefficients,
    "triggers": ex.check_top_triggers,
    "values": ex.check_value_logits,
    "agreement": ex.check_agreement_rate,
    "rank_one": ex.check_rank_one_update,
}


def _triggers_unsorted(c, valid, neuron, k):
    examples, positions = ex._top_triggers(c, valid, neuron, k)
    order = examples.argsort()
    return examples[order], positions[order]


#: a wrong answer that is not one of the listed mistakes, for every exercise
UNLISTED_WRONG = {
    "coefficients": lambda x, W1, b1: F.gelu(x @ W1.T + b1) * 1.01,
    "triggers": _triggers_unsorted,
    "values": lambda f, i, ln, head: head(ln(f.w2.weight[:, i])) + 0.1,
    "agreement": lambda c, ids, valid, logits: ex._agreement_rate(c, ids, valid, logits) + 0.05,
    "rank_one": lambda W, C, k, v: ex._rank_one(W, C, k, v) * 1.001,
}


@pytest.mark.parametrize("name", EXERCISES)
def test_unlisted_wrong_answer_fails_without_a_hint(name):
    result = EXERCISES[name].evaluate(UNLISTED_WRONG[name])
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


def test_agreement_cases_are_informative():
    """The hidden agreement cases have rates well away from 0 and 1."""
    for case in ex.check_agreement_rate.cases():
        assert 0.2 < ex._agreement_rate(*case.args) < 0.9
