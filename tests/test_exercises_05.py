"""Notebook 05's checkers: unlisted wrong answers fail, the course's helpers pass
(the generic contract for every checker is in test_exercise_contract.py).
"""
import pytest
import torch

from helpers import moe
from helpers.exercises.engine import FAILED
from helpers.exercises.nb05 import (EXERCISES, check_balance_loss, check_capacity_keep, check_routing_histogram,
                                  check_top_k_route, check_z_loss)

IDS = [ex.title for ex in EXERCISES]

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
