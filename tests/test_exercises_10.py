"""Notebook 10's checkers: what is specific to them (the shared contract is in test_exercise_contract.py).

Natural wrong answers, each breaking one sentence of its statement, must fail (with their hint where one explains
them); other correct forms (a loop, a float32 share, a mask instead of a gather) must pass.
"""
import math

import torch
import torch.nn.functional as F

from helpers.activation_sparsity import calibrate_threshold

from helpers.exercises.engine import FAILED, PASSED
from helpers.exercises.nb10 import _entries_for_share, _threshold_for_share
from helpers.exercises.nb10 import (EXERCISES, check_expected_union, check_recall, check_skip_swiglu,
                                    check_threshold_for_share)


def test_four_exercises_build_and_investigate():
    assert [ex.kind for ex in EXERCISES] == ["build", "build", "investigate", "investigate"]


# ---------------------------------------------------------------- exercise 1
def _ceil_rank(m, s):
    magnitudes = m.abs().flatten()
    return magnitudes.kthvalue(math.ceil(s * magnitudes.numel())).values, magnitudes


def test_threshold_other_correct_forms_pass():
    def sort_and_float32_share(m, s):                  # a tensor tau, a float32 share: both fine
        tau, magnitudes = _ceil_rank(m, s)
        return tau, (magnitudes <= tau).sum() / magnitudes.numel()

    def counting_loop(m, s):                           # the definition itself: the smallest |m| skipping >= s
        values = sorted(m.abs().flatten().tolist())
        for v in values:
            share = sum(x <= v for x in values) / len(values)
            if share >= s:
                return v, share

    for fn in (sort_and_float32_share, counting_loop):
        assert check_threshold_for_share.evaluate(fn).status == PASSED


def test_threshold_wrong_answers_fail_with_their_hints():
    def rounded(m, s):                                 # k = round(s·n), as helpers' calibrate_threshold does
        magnitudes = m.abs().flatten()
        tau = magnitudes.kthvalue(round(s * magnitudes.numel())).values.item()
        return tau, (magnitudes <= tau).double().mean().item()

    def floored(m, s):
        magnitudes = m.abs().flatten()
        tau = magnitudes.kthvalue(max(int(s * magnitudes.numel()), 1)).values.item()
        return tau, (magnitudes <= tau).double().mean().item()

    def asked_share(m, s):                             # returns s, not what ties make of it
        return _ceil_rank(m, s)[0].item(), s

    def strict_share(m, s):
        tau, magnitudes = _ceil_rank(m, s)
        return tau.item(), (magnitudes < tau).double().mean().item()

    def copied_helper(m, s):
        tau = calibrate_threshold(m, s)
        return tau, (m.abs() <= tau).double().mean().item()

    for fn, words in [(rounded, "round up"), (floored, "round up"), (asked_share, "tied with τ"),
                      (strict_share, "equal to τ"), (copied_helper, "calibrate_threshold")]:
        result = check_threshold_for_share.evaluate(fn)
        assert result.status == FAILED and words in result.hint, fn.__name__


def test_threshold_quantile_answers_fail_with_the_quantile_hint():
    def quantile(how, dtype):                          # torch.quantile interpolates, or indexes s·(n − 1)
        def answer(m, s):
            magnitudes = m.abs().flatten().to(dtype)
            tau = torch.quantile(magnitudes, s, interpolation=how).item()
            return tau, (magnitudes <= tau).double().mean().item()
        return answer

    for how in ("linear", "lower", "higher", "nearest", "midpoint"):
        for dtype in (torch.float32, torch.float64):
            result = check_threshold_for_share.evaluate(quantile(how, dtype))
            assert result.status == FAILED and "torch.quantile" in result.hint, (how, dtype)


def test_threshold_answers_without_a_named_mistake_fail():
    def signed(m, s):
        values = m.flatten()
        tau = values.kthvalue(math.ceil(s * values.numel())).values.item()
        return tau, (values.abs() <= tau).double().mean().item()

    assert check_threshold_for_share.evaluate(signed).status == FAILED


def test_threshold_cases_keep_distinct_magnitudes_apart():
    for case in check_threshold_for_share.cases():
        magnitudes = case.args[0].abs().flatten().unique()
        if magnitudes.numel() > 1:
            gaps = (magnitudes[1:] - magnitudes[:-1]) / magnitudes[1:]
            assert float(gaps.min()) > 1e-5, case.note


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


def test_skip_swiglu_count_that_is_not_a_python_int_fails_naming_the_type(capsys):
    """The trial learner's answer: right values, weights_read returned as a 0-d tensor (the statement says an int)."""
    ref = check_skip_swiglu.reference

    def tensor_count(*args):
        y, count = ref(*args)
        return y, torch.tensor(count)

    result = check_skip_swiglu.evaluate(tensor_count)
    assert result.status == FAILED and "Python int" in result.message


def test_share_counts_entries_as_a_learner_does_when_s_times_n_rounds_up():
    """s = 0.28, n = 25: s·n is 7.000000000000001 in float, yet 7 / 25 == 0.28, so 7 entries make the share."""
    assert _entries_for_share(0.28, 25) == 7
    assert [_entries_for_share(s, 10) for s in (0.01, 0.1, 0.5, 0.99, 1.0)] == [1, 1, 5, 10, 10]
    tau, share = _threshold_for_share(torch.arange(1, 26, dtype=torch.float64), 0.28)
    assert (tau, share) == (7.0, 0.28)


def test_threshold_round_with_at_least_one_gets_the_ceil_hint():
    """Review 10-round4: max(round(s·n), 1), the course helper's rule made safe for s·n < ½, is named."""
    def rounded(m, s):
        v = m.abs().flatten().sort().values
        k = max(int(round(s * v.numel())), 1)
        tau = v[k - 1].item()
        return tau, (m.abs() <= tau).double().mean().item()
    result = check_threshold_for_share.evaluate(rounded)
    assert result.status == FAILED and "⌈s·n⌉" in (result.hint or ""), result.message
