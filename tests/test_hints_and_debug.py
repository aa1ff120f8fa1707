"""The engine's rules for naming a mistake, debug exercises, ``passes`` and points (issue 23).

* a mistake is named only when its model reproduces the learner's function on every hidden case
  and differs from the reference where the learner is wrong (07 Ex 1 blamed a float32 near-miss on
  a model equal to the reference there; 05 Ex 6 blamed an off-by-one on a model that fails where
  the learner passes);
* a debug exercise climbs a ladder: the function as given (``buggy=``) and any first failure show the
  symptom only; once a failure has been shown, a changed function that still fails gets the listed hint,
  "the original bug is still there" (a partial fix) or the class of bug; the fix passes;
* ``passes(fn)`` answers silently; points default by kind.
"""
import contextlib
import io

import pytest
import torch

from helpers.exercises.engine import CLUE_PREFIX, DEFAULT_POINTS, FAILED, HINT_PREFIX, KINDS, NOT_ATTEMPTED, \
    PASSED, VERDICT_LOG_ENV, Case, Exercise


# ---------------------------------------------------------------- a model equal to the reference explains nothing
def _gates(logits, k):
    """Top-k of a sigmoid, renormalised when k >= 2 (07 Ex 1 in miniature), float64."""
    a = torch.sigmoid(logits)
    idx = a.topk(k, -1).indices
    w = a.gather(1, idx)
    if k >= 2:
        w = w / w.sum(-1, keepdim=True)
    return torch.zeros_like(a).scatter(1, idx, w)


def _gates_normalised_always(logits, k):
    a = torch.sigmoid(logits)
    idx = a.topk(k, -1).indices
    w = a.gather(1, idx)
    return torch.zeros_like(a).scatter(1, idx, w / w.sum(-1, keepdim=True))


def _gate_cases():
    g = torch.Generator().manual_seed(7)
    return [Case((torch.randn(5, 6, generator=g, dtype=torch.float64) * 3, k), note=f"k={k}") for k in (2, 3, 1, 6)]


GATES = Exercise("Exercise 1 (gates)", _gates, _gate_cases,
                 [("with k = 1 the weight was normalised to 1", _gates_normalised_always)], atol=1e-9, rtol=1e-7)


def test_a_float32_near_miss_is_not_blamed_on_a_model_equal_to_the_reference_there():
    def in_float32_and_wrong_at_k1(logits, k):  # the trial's learner: float32 steps; here also wrong at k = 1
        out = _gates(logits.float(), k).double()
        return out if k >= 2 else out * 0.5
    result = GATES.evaluate(in_float32_and_wrong_at_k1)
    assert result.status == FAILED and result.reason == "wrong" and result.hint is None, result.message

    def float32_only(logits, k):
        return _gates(logits.float(), k).double()
    only = GATES.evaluate(float32_only)
    assert only.reason == "precision" and only.hint is None and HINT_PREFIX not in only.message, only.message
    # the real mistake, made in float32, is still named: the precision of the steps is not the mistake
    named = GATES.evaluate(lambda logits, k: _gates_normalised_always(logits.float(), k).double())
    assert named.hint == "with k = 1 the weight was normalised to 1", named.message


def test_a_mistake_that_fails_where_the_learner_passes_is_not_named():
    """05 Ex 6 in the trial: an off-by-one failed one case, where 'first choice only' happened to match."""
    def cases():
        return [Case((torch.tensor([3.0, -1.0, 2.0]),), note="first negative at 1"),
                Case((torch.tensor([-2.0, 5.0]),), note="first negative at 0"),
                Case((torch.tensor([4.0, 1.0]),), note="no negative")]

    def first_negative_zeroed(x):
        x = x.clone()
        neg = (x < 0).nonzero()
        if len(neg):
            x[int(neg[0])] = 0
        return x
    ex = Exercise("Exercise 6 (zero the first negative)", first_negative_zeroed, cases,
                  [("you zeroed every negative, not only the first", torch.relu),
                   ("you zeroed element 0 whatever it was", lambda x: torch.cat([x[:1] * 0, x[1:]]))])

    def skips_index_0(x):  # an off-by-one: looks from index 1 on
        x = x.clone()
        for i in range(1, len(x)):
            if x[i] < 0:
                x[i] = 0
                break
        return x
    result = ex.evaluate(skips_index_0)  # fails only "first negative at 0", where "element 0" matches
    assert result.status == FAILED and result.hint is None, result.message
    assert ex.evaluate(lambda x: torch.cat([x[:1] * 0, x[1:]])).hint == "you zeroed element 0 whatever it was"
    assert ex.evaluate(torch.relu).hint is None  # relu equals the reference on every case: never failing
    assert ex.evaluate(torch.relu).status == PASSED


# ---------------------------------------------------------------- debug exercises
def _mean_of_last(x, n):
    """The mean of the last ``n`` values of a 1-D float tensor."""
    return x[len(x) - n:].mean()


def _mean_of_last_buggy(x, n):  # off by one: one value too many
    return x[len(x) - n - 1:].mean()


def _debug_cases():
    g = torch.Generator().manual_seed(3)
    return [Case((torch.randn(6, generator=g), 2)), Case((torch.randn(4, generator=g), 4)),
            Case((torch.randn(5, generator=g), 1)), Case((torch.randn(9, generator=g), 5))]


def _off_by_one_shows(fn, args, value):
    """The class shows when the answer is the mean of the last n - 1 or n + 1 values."""
    x, n = args
    return any(0 < m <= len(x) and torch.allclose(torch.as_tensor(value), x[len(x) - m:].mean())
               for m in (n - 1, n + 1))


DEBUG = Exercise("Exercise 2 (the mean of the last n)", _mean_of_last, _debug_cases,
                 [("you took the first n values, not the last n", lambda x, n: x[:n].mean())],
                 kind="debug", buggy=_mean_of_last_buggy, bug_class="an off-by-one in a slice bound",
                 bug_shows=_off_by_one_shows)


def _after_a_failure(ex):
    """The ladder's second step: a failure has been shown (``check`` printed it) in this kernel."""
    ex.forget()
    with contextlib.redirect_stdout(io.StringIO()):
        ex.check(ex.buggy)
    return ex


def test_debug_is_a_kind_with_its_function_as_given():
    assert KINDS == ("build", "investigate", "debug") and DEBUG.kind == "debug"
    for bad in [dict(buggy=1), dict(buggy=_mean_of_last_buggy, bug_class=""),
                dict(buggy=_mean_of_last_buggy, bug_class=3),
                dict(buggy=_mean_of_last_buggy, bug_shows=_off_by_one_shows),
                dict(buggy=_mean_of_last_buggy, bug_class="x", bug_shows=3), dict(bug_class="x")]:
        with pytest.raises(ValueError, match="buggy|bug_class|bug_shows"):
            Exercise("Exercise 2 (x)", _mean_of_last, _debug_cases, kind="debug", **bad)
    with pytest.raises(ValueError, match="debug"):
        Exercise("Exercise 2 (x)", _mean_of_last, _debug_cases, buggy=_mean_of_last_buggy, bug_class="x")


def test_debug_the_function_as_given_shows_the_symptom_only_however_often_it_runs():
    """Rung one: which case, what differs; never a hint or the class of bug, even after earlier failures."""
    def copied_by_hand(x, n):  # the learner's cell, as given (the raise line deleted)
        return x[len(x) - n - 1:].mean()
    for ex in (DEBUG.forget() or DEBUG, _after_a_failure(DEBUG)):
        for fn in (_mean_of_last_buggy, copied_by_hand):
            result = ex.evaluate(fn)
            assert result.status == FAILED and result.reason == "unchanged" and result.hint is None, result.message
            assert result.message.startswith("expected ") and "(on input tensor of shape (6,), 2; " in result.message
            assert result.message.endswith("Your function still does what the function as given does on every hidden "
                                           "case: the bug is still in it."), result.message
            assert HINT_PREFIX not in result.message and CLUE_PREFIX not in result.message
    assert DEBUG.evaluate(lambda x, n: x[-n:].mean()).status == PASSED  # the fix, in another style
    assert DEBUG.evaluate(lambda x, n: x[-n:].double().mean()).status == PASSED


def test_debug_any_first_failure_shows_the_symptom_only():
    """A changed function that fails, before any failure was shown in this kernel: the symptom only."""
    DEBUG.forget()
    for wrong in (lambda x, n: x[:n].mean(),                                               # a listed mistake
                  lambda x, n: x[len(x) - n + 1:].mean() if n > 1 else x[-2:].mean()):     # the class shows
        result = DEBUG.evaluate(wrong)
        assert result.status == FAILED and result.reason == "wrong" and result.hint is None, result.message
        assert HINT_PREFIX not in result.message and CLUE_PREFIX not in result.message, result.message


def test_debug_only_check_moves_the_ladder_and_forget_starts_it_again(capsys):
    DEBUG.forget()
    wrong = lambda x, n: x[:n].mean()  # noqa: E731
    assert DEBUG.passes(wrong) is False and DEBUG.evaluate(wrong).hint is None   # silent calls do not count
    DEBUG.check(wrong)
    assert HINT_PREFIX not in capsys.readouterr().out                             # the first failure printed
    DEBUG.check(wrong)
    assert "Likely mistake: you took the first n values, not the last n" in capsys.readouterr().out
    DEBUG.forget()
    assert DEBUG.evaluate(wrong).hint is None


def test_debug_a_partial_fix_is_told_the_bug_is_still_there():
    def partial(x, n):  # fixed only for n = 1
        return x[-1:].mean() if n == 1 else x[len(x) - n - 1:].mean()
    result = _after_a_failure(DEBUG).evaluate(partial)
    assert result.status == FAILED and "the original bug (an off-by-one in a slice bound) is still there" in \
        result.hint, result.message


def test_debug_a_changed_function_that_still_fails_gets_its_hint_or_the_class_of_bug():
    ex = _after_a_failure(DEBUG)
    listed = ex.evaluate(lambda x, n: x[:n].mean())
    assert listed.hint == "you took the first n values, not the last n" and CLUE_PREFIX not in listed.message
    other_way = ex.evaluate(lambda x, n: x[len(x) - n + 1:].mean() if n > 1 else x[-2:].mean())
    assert other_way.status == FAILED and other_way.hint is None
    assert other_way.message.endswith(f"{CLUE_PREFIX}an off-by-one in a slice bound."), other_way.message


def test_debug_the_class_of_bug_is_named_only_where_its_test_finds_it():
    """A wrong answer of another kind gets no lead: the clue needs ``bug_shows`` on every wrong case."""
    ex = _after_a_failure(DEBUG)
    for wrong in (lambda x, n: x[len(x) - n:].sum(), lambda x, n: 1 / 0,
                  lambda x, n: x[len(x) - n + 1:].mean() if n == 2 else x[len(x) - n:].sum()):
        result = ex.evaluate(wrong)
        assert result.status == FAILED and CLUE_PREFIX not in result.message, result.message

    def broken_test(fn, args, value):
        raise RuntimeError("a broken test gives no clue and never raises into the notebook")
    ex = _after_a_failure(Exercise("Exercise 2 (the mean of the last n)", _mean_of_last, _debug_cases, kind="debug",
                                   buggy=_mean_of_last_buggy, bug_class="an off-by-one in a slice bound",
                                   bug_shows=broken_test))
    result = ex.evaluate(lambda x, n: x[len(x) - n + 1:].mean() if n > 1 else x[-2:].mean())
    assert result.status == FAILED and CLUE_PREFIX not in result.message, result.message
    no_test = _after_a_failure(Exercise("Exercise 2 (the mean of the last n)", _mean_of_last, _debug_cases,
                                        kind="debug", buggy=_mean_of_last_buggy,
                                        bug_class="an off-by-one in a slice bound"))
    assert CLUE_PREFIX not in no_test.evaluate(lambda x, n: x[len(x) - n + 1:].mean() if n > 1 else
                                               x[-2:].mean()).message


# ---------------------------------------------------------------- passes, points
def test_passes_is_silent_and_not_logged(capsys, tmp_path, monkeypatch):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv(VERDICT_LOG_ENV, str(log))

    def chatty(x, n):
        print("debug print from the learner")
        return x[-n:].mean()
    assert DEBUG.passes(chatty) is True
    assert DEBUG.passes(_mean_of_last_buggy) is False
    assert DEBUG.passes(lambda x, n: 1 / 0) is False and DEBUG.passes("not a function") is False
    out = capsys.readouterr()
    assert out.out == "" and out.err == "" and not log.exists()


def test_points_default_by_kind_and_can_be_set():
    assert DEFAULT_POINTS == {"build": 2, "investigate": 3, "debug": 2}
    assert GATES.points == 2 and DEBUG.points == 2
    assert Exercise("Exercise 3 (x)", _gates, _gate_cases, kind="investigate").points == 3
    assert Exercise("Exercise 3 (x)", _gates, _gate_cases, points=5).points == 5
    with pytest.raises(ValueError, match="points"):
        Exercise("Exercise 3 (x)", _gates, _gate_cases, points=-1)
