"""Notebook 10's checkers: what is specific to them (the shared contract is in test_exercise_contract.py).

Natural wrong answers, each breaking one sentence of its statement, must fail (with their hint where one explains
them); other correct forms (a loop, a float32 share cast to float64, a mask instead of a gather) must pass.
"""
import torch
import torch.nn.functional as F

from helpers.exercises.engine import FAILED, PASSED
from helpers.exercises.nb10 import (EXERCISES, check_expected_union, check_recall, check_silent_share,
                                    check_skip_swiglu)


def test_four_exercises_build_and_investigate():
    assert [ex.kind for ex in EXERCISES] == ["build", "build", "investigate", "investigate"]


# ---------------------------------------------------------------- exercise 1
def test_silent_share_other_correct_forms_pass():
    def loop(m, tau):
        return torch.tensor([sum(abs(v) <= tau for v in row.tolist()) / row.numel() for row in m],
                            dtype=torch.float64)

    def via_count(m, tau):
        return (m.abs() <= tau).sum(dim=-1).double() / m.shape[-1]

    for fn in (loop, via_count):
        assert check_silent_share.evaluate(fn).status == PASSED


def test_silent_share_wrong_answers_fail():
    def float32_share(m, tau):                        # right values, float32: only a precision note
        return (m.abs() <= tau).float().mean(dim=-1)

    def relu_zero_test(m, tau):                       # counts m <= 0 as silent whatever tau
        return ((m <= 0) | (m.abs() <= tau)).double().mean(dim=-1)

    assert check_silent_share.evaluate(float32_share).status == FAILED
    assert check_silent_share.evaluate(relu_zero_test).status == FAILED


def test_strict_threshold_gets_its_hint():
    result = check_silent_share.evaluate(lambda m, tau: (m.abs() < tau).double().mean(dim=-1))
    assert result.status == FAILED and "not <" in result.hint


# ---------------------------------------------------------------- exercise 2
def test_skip_swiglu_masked_form_passes():
    def masked(x, W1, W3, W2, tau):
        gate = x @ W1.T
        gate = gate * torch.sigmoid(gate)
        keep = gate.abs() > tau
        return W2 @ (gate * keep * (W3 @ x)), W1.numel() + 2 * W1.shape[1] * int(keep.sum())

    assert check_skip_swiglu.evaluate(masked).status == PASSED


def test_skip_swiglu_wrong_answers_fail():
    def keeps_ties(x, W1, W3, W2, tau):               # >= instead of >: counts a zero gate's weights at tau = 0
        gate = F.silu(W1 @ x)
        keep = gate.abs() >= tau
        return W2 @ (gate * keep * (W3 @ x)), W1.numel() + 2 * W1.shape[1] * int(keep.sum())

    def no_gate(x, W1, W3, W2, tau):                  # forgets to multiply by the gate
        gate = F.silu(W1 @ x)
        keep = gate.abs() > tau
        return W2 @ (keep * (W3 @ x)), W1.numel() + 2 * W1.shape[1] * int(keep.sum())

    def float_count(x, W1, W3, W2, tau):              # weights read as a share, not a count
        gate = F.silu(W1 @ x)
        keep = gate.abs() > tau
        return W2 @ (gate * keep * (W3 @ x)), float(keep.double().mean())

    def dense_output(x, W1, W3, W2, tau):             # nothing skipped in y
        gate = F.silu(W1 @ x)
        keep = gate.abs() > tau
        return W2 @ (gate * (W3 @ x)), W1.numel() + 2 * W1.shape[1] * int(keep.sum())

    assert "strictly" in check_skip_swiglu.evaluate(keeps_ties).hint
    for fn in (no_gate, float_count, dense_output):
        assert check_skip_swiglu.evaluate(fn).status == FAILED


def test_no_abs_gets_its_hint():
    def no_abs(x, W1, W3, W2, tau):
        gate = F.silu(W1 @ x)
        keep = gate > tau
        return W2 @ (gate * keep * (W3 @ x)), W1.numel() + 2 * W1.shape[1] * int(keep.sum())

    result = check_skip_swiglu.evaluate(no_abs)
    assert result.status == FAILED and "gate.abs() > tau" in result.hint


# ---------------------------------------------------------------- exercise 3
def test_expected_union_stable_form_passes():
    def stable(rates, batch):
        return float(-torch.expm1(batch * torch.log1p(-rates)).mean())

    def loop(rates, batch):
        return sum(1 - (1 - p) ** batch for p in rates.tolist()) / len(rates)

    assert check_expected_union.evaluate(stable).status == PASSED
    assert check_expected_union.evaluate(loop).status == PASSED


def test_expected_union_wrong_answers_fail():
    def per_neuron(rates, batch):                      # the vector, not its mean
        return 1 - (1 - rates) ** batch

    def batch_minus_one(rates, batch):
        return float((1 - (1 - rates) ** (batch - 1)).mean())

    for fn in (per_neuron, batch_minus_one):
        assert check_expected_union.evaluate(fn).status == FAILED
    hint = check_expected_union.evaluate(lambda r, b: float(1 - (1 - r.mean()) ** b)).hint
    assert "mean rate" in hint


# ---------------------------------------------------------------- exercise 4
def test_recall_other_forms_pass():
    def by_floats(predicted, active):
        total = active.float().sum()
        return 1.0 if total == 0 else ((predicted & active).float().sum() / total).item()

    assert check_recall.evaluate(by_floats).status == PASSED


def test_recall_wrong_answers_fail():
    def or_instead_of_and(predicted, active):
        n = int(active.sum())
        return 1.0 if n == 0 else int((predicted | active).sum()) / n

    def nan_when_empty(predicted, active):
        return (predicted & active).sum().item() / active.sum().item() if active.any() else float("nan")

    for fn in (or_instead_of_and, nan_when_empty):
        assert check_recall.evaluate(fn).status == FAILED
    result = check_recall.evaluate(lambda p, a: float((p == a).double().mean()))
    assert "accuracy" in result.hint
