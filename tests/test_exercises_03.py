"""Notebook 03's checkers: the reference passes, blanks are 'not attempted', known mistakes get their hint."""
import pytest
import torch
import torch.nn.functional as F

from helpers import exercises_03 as ex
from helpers.checking import FAILED, NOT_ATTEMPTED, PASSED

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


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_passes(name):
    exercise = EXERCISES[name]
    result = exercise.evaluate(exercise.reference)
    assert result.status == PASSED, result.message
    assert len(exercise.cases()) >= 4


@pytest.mark.parametrize("name", EXERCISES)
def test_blank_answers_are_not_attempted(name):
    assert EXERCISES[name].evaluate(stub).status == NOT_ATTEMPTED
    assert EXERCISES[name].evaluate(lambda *a: None).status == NOT_ATTEMPTED


@pytest.mark.parametrize("name", EXERCISES)
def test_every_listed_mistake_fails_with_its_hint(name):
    exercise = EXERCISES[name]
    assert len(exercise.mistakes) >= 3
    for hint, wrong in exercise.mistakes:
        result = exercise.evaluate(wrong)
        assert result.status == FAILED, hint
        assert f"Likely mistake: {hint}" in result.message, (hint, result.message)


@pytest.mark.parametrize("name", EXERCISES)
def test_unlisted_wrong_answer_fails_without_a_hint(name):
    result = EXERCISES[name].evaluate(UNLISTED_WRONG[name])
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


def test_cases_are_fixed_between_calls():
    """Hidden cases are seeded: two calls build identical inputs (so verdicts never flicker)."""
    for exercise in EXERCISES.values():
        first, second = exercise.cases(), exercise.cases()
        for a, b in zip(first, second):
            for x, y in zip(a.args, b.args):
                if isinstance(x, torch.Tensor):
                    assert torch.equal(x, y)


def test_exceptions_in_learner_code_become_a_message():
    result = ex.check_memory_coefficients.evaluate(lambda x, W1, b1: x @ torch.zeros(1, 1))
    assert result.status == FAILED and "raised" in result.message


def test_agreement_cases_are_informative():
    """The hidden agreement cases have rates well away from 0 and 1."""
    for case in ex.check_agreement_rate.cases():
        assert 0.2 < ex._agreement_rate(*case.args) < 0.9
