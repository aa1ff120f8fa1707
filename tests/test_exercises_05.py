"""Notebook 05's exercise checkers: references pass, blanks are 'not attempted', mistakes get their hint."""
import pytest
import torch

from helpers import moe
from helpers.checking import FAILED, NOT_ATTEMPTED, PASSED
from helpers.exercises_05 import (EXERCISES, check_balance_loss, check_capacity_keep, check_routing_histogram,
                                  check_top_k_route, check_z_loss)

IDS = [ex.title for ex in EXERCISES]


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_reference_passes(ex):
    result = ex.evaluate(ex.reference)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_blank_is_not_attempted(ex):
    assert ex.evaluate(stub).status == NOT_ATTEMPTED
    assert ex.evaluate(lambda *a: None).status == NOT_ATTEMPTED


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_every_listed_mistake_fails_with_its_hint(ex):
    assert len(ex.mistakes) >= 3
    for hint, wrong in ex.mistakes:
        result = ex.evaluate(wrong)
        assert result.status == FAILED, hint
        assert "Likely mistake: " + hint in result.message, (hint, result.message)


UNLISTED = {
    check_top_k_route.title: lambda logits, k: (torch.full((logits.shape[0], k), 1.0 / k),
                                                torch.topk(logits, k, -1).indices),
    check_capacity_keep.title: lambda idx, e, f: torch.ones(idx.shape[0], dtype=torch.bool),
    check_balance_loss.title: lambda probs, idx: torch.tensor(1.0),
    check_z_loss.title: lambda logits: 3 * torch.logsumexp(logits, -1).square().mean(),
    check_routing_histogram.title: lambda idx, e: torch.bincount(idx.reshape(-1), minlength=e) + 1,
}


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_an_unlisted_wrong_answer_fails_without_a_wrong_hint(ex):
    result = ex.evaluate(UNLISTED[ex.title])
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_learner_errors_never_raise(ex):
    result = ex.evaluate(lambda *a: 1 / 0)
    assert result.status == FAILED and "ZeroDivisionError" in result.message


def test_the_course_helpers_pass_the_checkers():
    """helpers.moe computes the same things a different way (vectorised): it must pass too."""
    assert check_top_k_route.evaluate(
        lambda logits, k: moe.top_k_routing(torch.softmax(logits, -1), k)).passed
    assert check_capacity_keep.evaluate(
        lambda idx, e, f: moe.arrival_rank(idx, e) < moe.expert_capacity(idx.shape[0], e, 1, f)).passed
    assert check_balance_loss.evaluate(moe.load_balancing_loss).passed
    assert check_z_loss.evaluate(moe.router_z_loss).passed
    assert check_routing_histogram.evaluate(
        lambda idx, e: moe.Routing(idx, idx.float(), idx >= 0, torch.zeros(idx.shape[0], e),
                                   torch.zeros(idx.shape[0], e)).tokens_per_expert()).passed
