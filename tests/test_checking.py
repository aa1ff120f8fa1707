"""The checker engine: the exercise contract every notebook relies on.

One test (or a few) per promise of ``helpers.exercises.engine``: blank / pass / fail with a hint;
never raises; autograd on whatever the kernel's state; tolerances by dtype and a dtype message;
integers exact; a hint only when the mistake explains every failing case; partly-``None`` is
incomplete; a time limit that leaves the kernel (signal handler, timers, KeyboardInterrupt) as it was.
"""
import json
import math
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.exercises import timelimit
from helpers.exercises.engine import (CHANGED_INPUT, CHECKERS_CODE, DEFAULT_TIME_LIMIT, FAILED, HINT_PREFIX,
                                      NOT_ATTEMPTED, PASSED,
                                      TIME_LIMIT_ENV, VERDICT_LOG_ENV, Case, Exercise, Result, compare, parse_line)


ROOT = Path(__file__).resolve().parent.parent


def square(x):
    return x * x


def _square(x):
    """The reference (a learner's answer is another function: the reference itself never passes)."""
    return x * x


EX = Exercise("demo", _square, lambda: [Case((torch.arange(6.0).reshape(2, 3),)), Case((torch.randn(4, 5),))],
              [("you added instead of multiplying", lambda x: x + x)])


def stub(x):
    raise NotImplementedError


def hang(*args, **kwargs):
    while True:
        pass


def test_contract():
    assert EX.evaluate(stub).status == NOT_ATTEMPTED
    assert EX.evaluate(lambda x: None).status == NOT_ATTEMPTED
    assert EX.evaluate(square).status == PASSED
    wrong = EX.evaluate(lambda x: x + x)
    assert wrong.status == FAILED and "you added instead of multiplying" in wrong.message
    assert wrong.hint == "you added instead of multiplying" and wrong.reason == "wrong"
    assert "first at index (0, 1): expected 1, got 2" in wrong.message  # the first value that differs
    assert "2 of 2 hidden cases fail" in wrong.message


def test_never_raises_for_learner_errors():
    for fn in [lambda x: 1 / 0, lambda x: x.T, lambda x: x.numpy() ** 2, lambda x: "text", lambda x: x * np.nan, 42]:
        result = EX.evaluate(fn)
        assert result.status == FAILED, fn
    assert "transposed" in EX.evaluate(lambda x: (x * x).T).message
    assert "NaN" in EX.evaluate(lambda x: x * float("nan")).message
    assert "ZeroDivisionError" in EX.evaluate(lambda x: 1 / 0).message
    assert EX.evaluate(lambda x: __import__("sys").exit(1)).status == FAILED  # SystemExit is the learner's too


def test_a_multi_line_error_still_prints_one_line(capsys):
    def raises(x):
        raise ValueError("first line\nsecond line\n" + "x" * 1000)
    EX.check(raises)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "first line second line" in out and len(out) < 600


def test_an_answer_that_changes_its_input_in_place_fails_naming_it():
    """Right values, but the caller's tensor is squared in place: later cells would reuse a changed input."""
    def in_place(x):
        x.mul_(x)
        return x
    result = EX.evaluate(in_place)
    assert result.status == FAILED and result.reason == "changed input", result.message
    assert result.message.startswith("your function changed its input `x` in place (4 of 6 values changed, first at "
                                     "index (0, 2): was 2, now 4; on input tensor of shape (2, 3); 2 of 2 hidden "
                                     "cases)"), result.message
    assert "x.clone()" in result.message and "scatter rather than scatter_" in result.message
    assert EX.evaluate(lambda x: x.clone().mul_(x)).status == PASSED  # in place on its own copy: fine


def test_check_prints_one_line(capsys):
    EX.check(square)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✅ demo: passed")


def test_the_verdict_line_parses_back():
    ex = Exercise("Exercise 3 (a title (nested): no)", _square, EX.cases)
    for fn, status in [(stub, NOT_ATTEMPTED), (square, PASSED), (lambda x: x + 1, FAILED)]:
        line = ex.evaluate(fn).line()
        assert parse_line(line) is not None and parse_line(line)[0] == status
    line = Exercise("Exercise 3 (peak bytes)", _square, EX.cases).evaluate(lambda x: x + 1).line()
    status, title, message = parse_line(line + "\n")
    assert (status, title) == (FAILED, "Exercise 3 (peak bytes)") and message.endswith("hidden cases fail).")
    assert parse_line("100%|██████████| 24/24") is None
    assert parse_line("Course environment: ...") is None


def test_compare_values():
    assert compare(3, 3) is None and compare(3.0, 3) is None
    assert "expected 3, got 4" in compare(4, 3)
    assert compare(torch.tensor(0.5), 0.5) is None
    assert "expected a number" in compare("0.5", 0.5)
    assert compare([1, 2], [1, 3]).startswith("2nd returned value: ")      # a tuple item named for a learner
    assert compare([[1], [2, 3]], [[1], [2, 4]]).startswith("2nd returned value[1]: ")
    assert "keys" in compare({"a": 1}, {"b": 1})


# ---------------------------------------------------------------- autograd, whatever the kernel's state
def _grad_of_square_sum(x):
    x = x.clone().requires_grad_()
    (x * x).sum().backward()
    return x.grad


def _grad_of_cube_sum(x):
    x = x.clone().requires_grad_()
    return torch.autograd.grad((x ** 3).sum(), x)[0]


AUTOGRAD = Exercise("Exercise 1 (gradient)", _grad_of_square_sum,
                    lambda: [Case((torch.randn(3, generator=torch.Generator().manual_seed(i), dtype=torch.float64),))
                             for i in range(4)],
                    [("you returned x, not 2x", lambda x: x.clone()),
                     ("that is the gradient of x³", _grad_of_cube_sum)])


def test_reference_mistakes_and_learner_run_with_autograd_whatever_the_kernel_state():
    def by_autograd(x):
        x = x.clone().requires_grad_()
        return torch.autograd.grad((x * x).sum(), x)[0]

    for state in [torch.no_grad(), torch.inference_mode(), torch.enable_grad()]:
        with state:
            assert AUTOGRAD.evaluate(lambda x: 2 * x).status == PASSED     # closed form
            assert AUTOGRAD.evaluate(by_autograd).status == PASSED        # the learner's own autograd
            assert AUTOGRAD.evaluate(lambda x: _grad_of_square_sum(x)).status == PASSED
            assert AUTOGRAD.evaluate(lambda x: 3 * x * x).hint == "that is the gradient of x³"  # a model with autograd
    torch.set_grad_enabled(False)
    try:
        assert AUTOGRAD.evaluate(lambda x: 2 * x).status == PASSED
        assert not torch.is_grad_enabled()  # the kernel's state is left as it was
    finally:
        torch.set_grad_enabled(True)


def test_global_random_state_and_default_dtype_are_left_alone():
    def noisy(x):
        torch.rand(5), np.random.rand(3), random.random()
        return x * x
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    expected = (torch.rand(2), np.random.rand(2), random.random())
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    assert EX.evaluate(noisy).status == PASSED
    assert torch.equal(torch.rand(2), expected[0]) and np.array_equal(np.random.rand(2), expected[1])
    assert random.random() == expected[2]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        cases = EX.cases()  # hidden cases are built with the course's float32 default
        assert cases[1].args[0].dtype == torch.float32 and torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(previous)


# ---------------------------------------------------------------- tolerances by dtype
def _cases64():
    g = torch.Generator().manual_seed(0)
    return [Case((torch.rand(n, generator=g, dtype=torch.float64) + 0.1,)) for n in (1, 3, 50, 7)]


def _cases32():
    return [Case((c.args[0].float(),)) for c in _cases64()]


TASK64 = Exercise("Exercise 2 (float64 task)", _square, _cases64)
TASK32 = Exercise("Exercise 2 (float32 task)", _square, _cases32)


def test_tolerance_follows_the_task_dtype():
    assert TASK64.evaluate(lambda x: x * x * (1 + 1e-10)).status == PASSED
    tight = TASK64.evaluate(lambda x: x * x * (1 + 1e-3))
    assert tight.status == FAILED and "float32" not in tight.message and tight.reason == "wrong"
    near = TASK64.evaluate(lambda x: x * x * (1 + 1e-6))  # a gap float32 rounding would leave
    assert near.status == FAILED and near.reason == "precision" and "matches only to float32" in near.message
    assert TASK32.evaluate(lambda x: x * x * (1 + 1e-6)).status == PASSED
    assert TASK32.evaluate(lambda x: (x.double() ** 2)).status == PASSED  # more precision than asked is fine
    explicit = Exercise("Exercise 2 (explicit)", _square, _cases64, atol=1e-3, rtol=0)
    assert explicit.evaluate(lambda x: x * x + 1e-4).status == PASSED


def test_a_float32_answer_to_a_float64_task_is_told_so():
    result = TASK64.evaluate(lambda x: (x * x).float())
    assert result.status == FAILED and result.reason == "precision" and result.hint is None
    assert result.message.startswith("your result is float32 and matches only to float32 precision; this exercise "
                                     "wants float64: "), result.message
    assert "Keep every step in float64" in result.message
    assert "; 3 other cases match only to float32 precision too)." in result.message, result.message
    expected, got = result.message.split("expected ")[1].split(", got ")
    assert expected.split()[0] != got.split()[0].rstrip(","), result.message  # enough digits to see the gap
    far = TASK64.evaluate(lambda x: (2 * x * x).float())  # wrong anyway: the dtype is only a remark
    assert far.reason == "wrong" and "(your result is float32; this exercise works in float64)" in far.message


def test_float32_steps_returned_as_float64_get_the_same_note():
    """The learner computed in float32 and converted back: the result's dtype is right, its digits are not."""
    result = TASK64.evaluate(lambda x: (x.float() * x.float()).double())
    assert result.reason == "precision", result.message
    assert result.message.startswith("your result matches only to float32 precision; this exercise wants float64")


def test_a_float32_scalar_answer_to_a_tight_float_task_is_told_so():
    scalar = Exercise("Exercise 5 (a share)", lambda x: float((x * x).sum()), _cases64, atol=1e-12, rtol=1e-12)
    result = scalar.evaluate(lambda x: (x * x).sum().float())
    assert result.status == FAILED and "float32 and matches only to float32 precision" in result.message
    as_python_float = scalar.evaluate(lambda x: float((x.float() * x.float()).sum()))
    assert as_python_float.reason == "precision" and "wants float64" in as_python_float.message
    # a float task with the default tolerance is float32's: nothing for a lower precision to explain
    loose = Exercise("Exercise 5 (a share)", lambda x: float((x * x).sum()), _cases64)
    assert loose.evaluate(lambda x: float((x.float() * x.float()).sum())).status == PASSED


def test_float16_is_named_only_when_the_result_is_float16():
    assert "float16 precision; this exercise wants float32" in TASK32.evaluate(lambda x: (x * x).half()).message
    near = TASK32.evaluate(lambda x: x * x * (1 + 1e-3))  # a float32 result 1e-3 off: wrong, not "float16"
    assert near.reason == "wrong" and "float16" not in near.message


def test_the_precision_note_never_hides_a_wrong_answer():
    """07 Ex 2 in the trial: float32 steps everywhere *and* a logic error on one case. The message is
    about the logic error, with its hint; a wrong answer gets no precision note (it would send the learner
    after a dtype bug first)."""
    def cases():
        return [Case((torch.tensor([0.1, 0.7, 0.3], dtype=torch.float64),), note="mixed"),
                Case((torch.tensor([1.3, -0.2], dtype=torch.float64),), note="with a negative"),
                Case((torch.tensor([0.4], dtype=torch.float64),), note="one value")]
    relu = Exercise("Exercise 3 (float64 ReLU)", lambda x: torch.relu(x) * 1.1, cases,
                    [("you returned |x|: negative inputs must give 0", lambda x: x.abs() * 1.1)])
    result = relu.evaluate(lambda x: (x.float().abs() * 1.1).double())
    assert result.reason == "wrong" and result.message.startswith(
        "2 of 2 values differ; first beyond rounding at index (1,): expected 0, got 0.22"), result.message
    assert "(on with a negative)" in result.message
    assert "float32" not in result.message and "precision" not in result.message, result.message
    assert result.hint == "you returned |x|: negative inputs must give 0"


def _scaled_cases():
    g = torch.Generator().manual_seed(11)
    return [Case((torch.randn(4, 3, generator=g, dtype=torch.float64),), note="ordinary values"),
            Case((torch.randn(5, generator=g, dtype=torch.float64) * 1e-30,), note="values near 1e-30"),
            Case((torch.randn(3, generator=g, dtype=torch.float64) * 1e30,), note="values near 1e30")]


EXACT = Exercise("Exercise 3 (times three)", lambda x: 3 * x, _scaled_cases, atol=0, rtol=0)


def test_the_precision_note_is_relative():
    """The trial's M1: on values scaled by 1e-30 every answer was within float32's *absolute* tolerance, so a wrong
    layout was told it matched only to float32 precision. The note now needs the gap to be within float32's
    relative precision of the values' size: float32 steps get it, a wrong answer never does."""
    f32 = EXACT.evaluate(lambda x: (3 * x.float()).double())
    assert f32.reason == "precision" and f32.message.startswith("your result matches only to float32 precision"), \
        f32.message
    for wrong in (lambda x: 2 * x, lambda x: 3 * x + 1e-31, lambda x: torch.where(x.abs() < 1e-20, 2 * x, 3 * x)):
        result = EXACT.evaluate(wrong)
        assert result.reason == "wrong" and "precision" not in result.message, result.message
    # a float32 step that loses a relative 1e-3 is not float32's doing
    assert EXACT.evaluate(lambda x: (3 * x * (1 + 1e-3)).float().double()).reason == "wrong"


def test_the_precision_note_counts_the_other_cases_in_good_grammar():
    one = EXACT.evaluate(lambda x: (3 * x.float()).double() if x.numel() != 3 else 3 * x)
    assert "(on ordinary values; 1 other case matches only to float32 precision too)." in one.message, one.message
    two = EXACT.evaluate(lambda x: (3 * x.float()).double())
    assert "; 2 other cases match only to float32 precision too)." in two.message, two.message
    alone = EXACT.evaluate(lambda x: (3 * x.float()).double() if x.numel() == 12 else 3 * x)
    assert "(on ordinary values). Keep every step in float64" in alone.message, alone.message


def test_the_trials_wrong_answers_get_no_precision_note():
    """08 Ex 1 (gate and up concatenated) and 09 Ex 3 (ȳ one number): float64 answers wrong in their formula."""
    from helpers.exercises.nb08 import check_gpt_oss_layout
    from helpers.exercises.nb09 import check_fvu

    for check, wrong in ((check_gpt_oss_layout, lambda w1, w3: torch.cat([w1, w3]).T),
                         (check_fvu, lambda y, yh: float(((y - yh) ** 2).sum() / ((y - y.mean()) ** 2).sum()))):
        result = check.evaluate(wrong)
        assert result.status == FAILED and result.reason == "wrong", result.message
        assert "precision" not in result.message.split(HINT_PREFIX)[0], result.message


def test_a_statement_that_allows_float32_is_never_contradicted():
    """``precision=torch.float32``: float32 steps on float64 inputs pass at float32's tolerance, and a float32
    answer that is wrong is not told the exercise wants float64."""
    allows = Exercise("Exercise 3 (times three)", lambda x: 3 * x, _cases64, precision=torch.float32)
    assert allows.evaluate(lambda x: 3 * x.float()).status == PASSED
    assert allows.evaluate(lambda x: (3 * x.float()).double()).status == PASSED
    wrong = allows.evaluate(lambda x: 2 * x.float())
    assert wrong.reason == "wrong" and "float64" not in wrong.message, wrong.message
    tight = Exercise("Exercise 3 (times three)", lambda x: 3 * x, _cases64, atol=1e-12, rtol=1e-12,
                     precision=torch.float32)
    near = tight.evaluate(lambda x: 3 * x.float())
    assert near.reason == "wrong" and "float64" not in near.message, near.message
    with pytest.raises(ValueError, match="precision"):
        Exercise("Exercise 3 (x)", lambda x: x, _cases64, precision=torch.int64)


def test_the_checkers_own_code_never_passes(tmp_path, monkeypatch, capsys):
    """G6 of the trial: ``balance_loss = check_balance_loss.reference`` passed with full marks."""
    import functools

    from helpers.exercises.nb06 import check_split_sizes

    for fn in (_square, functools.partial(_square), EX.reference):
        result = EX.evaluate(fn)
        assert result.status == FAILED and result.reason == CHECKERS_CODE, result.message
        assert result.message.startswith("this is the checker's own code (its reference solution, or a model of a "
                                         "mistake), not a function of yours"), result.message
    assert EX.passes(_square) is False and EX.evaluate(square).status == PASSED  # a function of the learner's
    # a checker whose own evaluate wraps the learner's function (nb06) is covered too
    assert check_split_sizes.evaluate(check_split_sizes.reference).reason == CHECKERS_CODE
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv(VERDICT_LOG_ENV, str(log))
    EX.check(_square)
    assert json.loads(log.read_text(encoding="utf-8"))["reason"] == CHECKERS_CODE  # the grader flags it
    capsys.readouterr()


class _Holder:
    def method(self, x):
        return x * x


def test_inputs_of_every_kind_are_compared():
    """Modules (weights, mode), lists of tensors and dicts: a change in place is named; a copy is fine."""
    def cases():
        torch.manual_seed(0)
        return [Case((torch.nn.Linear(3, 2), [torch.ones(2), torch.zeros(2)], {"scale": torch.ones(1)}))
                for _ in range(4)]

    def reference(layer, parts, options):
        return layer.weight.sum() + parts[0].sum() + options["scale"].sum()
    ex = Exercise("Exercise 5 (kinds)", reference, cases)
    assert ex.evaluate(lambda layer, parts, options: reference(layer, parts, options)).status == PASSED
    for fn, words in [
            (lambda layer, parts, options: (layer.eval(), reference(layer, parts, options))[1],
             "changed its input `layer` in place (it was switched to eval mode"),
            (lambda layer, parts, options: (parts.append(1), reference(layer, parts[:2], options))[1],
             "changed its input `parts` in place (its length changed from 2 to 3"),
            (lambda layer, parts, options: (parts[1].add_(1), reference(layer, parts, options))[1],
             "changed its input `parts` in place (item [1]: 2 of 2 values changed"),
            (lambda layer, parts, options: (options.pop("scale").sum() + layer.weight.sum() + parts[0].sum()),
             "changed its input `options` in place (its keys changed: 'scale' removed"),
            (lambda layer, parts, options: (layer.weight.data.mul_(1), layer.requires_grad_(False),
                                            reference(layer, parts, options))[2],
             "changed its input `layer` in place (its parameter 'weight' was frozen")]:
        result = ex.evaluate(fn)
        assert result.reason == CHANGED_INPUT and words in result.message, result.message


def test_an_answer_both_wrong_and_changing_an_input_is_told_both():
    def wrong_in_place(x):
        x.mul_(2)
        return x
    result = EX.evaluate(wrong_in_place)
    assert result.reason == "wrong" and "values differ" in result.message, result.message
    assert "It also changes its input `x` in place (" in result.message, result.message

    def writes_into_its_input(x):
        x.mul_(x)
    nothing = EX.evaluate(writes_into_its_input)
    assert nothing.status == FAILED and nothing.message.startswith(
        "your function returns None and changed its input `x` in place"), nothing.message


def test_numbers_that_differ_print_enough_digits_to_see_it():
    problem = compare(0.11985001, 0.11985, atol=0, rtol=1e-9)
    assert "expected 0.11985, got 0.11985001" in problem, problem
    assert "expected 1, got 1.0000001" in compare(1.0000001, 1.0, atol=0, rtol=1e-9)


# ---------------------------------------------------------------- integers exact
COUNT = Exercise("Exercise 2 (parameter count)", lambda d: 8 * d * d + 5 * d,
                 [Case((768,)), Case((16,)), Case((4,)), Case((1,))])
HIST = Exercise("Exercise 5 (histogram)", lambda idx: torch.bincount(idx, minlength=4),
                [Case((torch.tensor([0, 1, 1, 2] * 1_000_000),)), Case((torch.tensor([3]),)),
                 Case((torch.tensor([0, 0]),)), Case((torch.tensor([2, 1]),))])


def test_integers_are_compared_and_printed_exactly():
    assert COUNT.evaluate(lambda d: 8 * d * d + 5 * d + 1).message.startswith("expected 4722432, got 4722433")
    assert COUNT.evaluate(lambda d: float(8 * d * d + 5 * d)).status == PASSED        # a whole float: accepted
    half = COUNT.evaluate(lambda d: 8 * d * d + 5 * d + 0.5)
    assert "expected the whole number 4722432, got 4722432.5" in half.message
    assert COUNT.evaluate(lambda d: np.int64(8 * d * d + 5 * d)).status == PASSED
    assert COUNT.evaluate(lambda d: torch.tensor(8 * d * d + 5 * d)).status == PASSED
    assert "4.72" not in COUNT.evaluate(lambda d: 8.0 * d * d + 5 * d + 2).message


def test_integer_tensors_are_compared_exactly():
    assert HIST.evaluate(lambda idx: torch.bincount(idx, minlength=4).double()).status == PASSED
    near = HIST.evaluate(lambda idx: torch.bincount(idx, minlength=4).double() + torch.tensor([0.4, 0, 0, 0]))
    assert near.status == FAILED and "expected 1000000, got 1000000.4" in near.message, near.message
    off = HIST.evaluate(lambda idx: torch.bincount(idx, minlength=4) + torch.tensor([0, 0, 1, 0]))
    assert "first at index (2,): expected 1000000, got 1000001" in off.message, off.message


# ---------------------------------------------------------------- hints only when the mistake explains every failure
def _mixed_cases():
    return [Case((torch.tensor([1.0, 2.0]),), note="positive"), Case((torch.tensor([-1.0, 3.0]),), note="mixed"),
            Case((torch.tensor([-2.0, -3.0]),), note="negative"), Case((torch.tensor([0.0, 0.0]),), note="zeros")]


RELU = Exercise("Exercise 4 (ReLU)", torch.relu, _mixed_cases,
                [("you returned |x|", torch.abs), ("you returned x itself", lambda x: x.clone())])


def test_a_hint_needs_the_mistake_to_explain_every_failing_case():
    assert "you returned |x|" in RELU.evaluate(torch.abs).message
    assert "you returned x itself" in RELU.evaluate(lambda x: x.clone()).message

    def abs_on_mixed_only(x):  # wrong on "mixed" (like |x|) and on "negative" (like x): no single mistake
        return x.abs() if x[1] > 0 else x.clone()
    result = RELU.evaluate(abs_on_mixed_only)
    assert result.status == FAILED and HINT_PREFIX not in result.message and result.hint is None
    assert "2 of 4 hidden cases fail" in result.message

    def abs_where_wrong(x):  # passes some cases, but |x| explains every case it fails
        return x.abs() if (x < 0).any() else torch.relu(x)
    assert "you returned |x|" in RELU.evaluate(abs_where_wrong).message

    def coincides_once(x):  # matches |x| on one failing case only, something else on another
        return x.abs() if x[0] == -1 else x * 10
    assert RELU.evaluate(coincides_once).hint is None


def test_a_mistake_that_raises_where_the_learner_raises_still_explains_it():
    def cases():
        g = torch.Generator().manual_seed(0)
        return [Case((torch.randn(2, 2, generator=g), torch.randn(2, 2, generator=g))),
                Case((torch.randn(2, 3, generator=g), torch.randn(3, 4, generator=g)))]
    ex = Exercise("Exercise 6 (product)", lambda a, b: a @ b, cases,
                  [("wrong order", lambda a, b: b @ a)])
    result = ex.evaluate(lambda a, b: b @ a)  # right shape on the square case, RuntimeError on the other
    assert result.status == FAILED and "wrong order" in result.message, result.message
    assert ex.evaluate(lambda a, b: a @ b + 1).hint is None


# ---------------------------------------------------------------- blank, incomplete
def test_partly_none_is_incomplete_not_blank():
    def none_for_zeros(x):
        if (x == 0).all():
            return None
        return torch.relu(x)
    result = RELU.evaluate(none_for_zeros)
    assert result.status == FAILED and result.reason == "incomplete"
    assert result.message.startswith("incomplete: your function returned None on zeros (1 of 4 hidden cases)")

    def none_first(x):
        return None if x[0] == 1 else torch.relu(x)
    assert RELU.evaluate(none_first).reason == "incomplete"

    def not_implemented_later(x):
        if (x < 0).all():
            raise NotImplementedError
        return torch.relu(x)
    later = RELU.evaluate(not_implemented_later)
    assert later.status == FAILED and "raised NotImplementedError on negative" in later.message

    assert RELU.evaluate(lambda x: None).status == NOT_ATTEMPTED  # None everywhere: a blank stub

    def not_implemented_first(x):
        if x[0] == 1:
            raise NotImplementedError
        return torch.relu(x)
    assert RELU.evaluate(not_implemented_first).status == NOT_ATTEMPTED


# ---------------------------------------------------------------- the time limit
def _timed(ex, fn):
    start = time.monotonic()
    result = ex.evaluate(fn)
    return result, time.monotonic() - start


def test_a_hanging_function_is_stopped_with_a_clear_message():
    ex = Exercise("Exercise 1 (slow)", _square, EX.cases, time_limit=0.3)
    result, seconds = _timed(ex, hang)
    assert result.status == FAILED and result.reason == "timeout" and seconds < 2.5, (seconds, result)
    assert result.message.startswith("time limit: your function ") and "0.3 s of computing time" in result.message
    assert ex.evaluate(square).status == PASSED  # the kernel is usable afterwards


def _busy(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def test_the_limit_counts_computing_time_over_the_whole_check(monkeypatch):
    monkeypatch.setattr(timelimit, "WALL_FACTOR", 1000.0)  # a busy test machine must not hit the wall-time limit
    ex = Exercise("Exercise 1 (slow)", _square, EX.cases, time_limit=0.2)
    budget = 0.2 * torch.get_num_threads()  # CPU seconds: the limit for each thread torch may use

    def slow(x):  # fast enough per case, too slow in total
        _busy(0.6 * budget)
        return x * x
    result = ex.evaluate(slow)
    assert result.reason == "timeout" and "took more than 0.2 s of computing time" in result.message
    assert "(1 of 2 finished)" in result.message


def test_a_function_that_sleeps_or_waits_is_stopped_by_wall_time():
    ex = Exercise("Exercise 1 (slow)", _square, EX.cases, time_limit=0.1)

    def sleepy(x):  # no computing at all: the wall-time limit (3 × 0.1 s) stops it
        time.sleep(0.25)
        return x * x
    result, seconds = _timed(ex, sleepy)
    assert result.reason == "timeout" and "ran for more than 0.3 s of wall time" in result.message, result.message

    def catches_exception(x):
        while True:
            try:
                time.sleep(5)
            except Exception:  # the time limit is not an Exception: this cannot swallow it
                pass
    result, seconds = _timed(ex, catches_exception)
    assert result.reason == "timeout" and seconds < 3


def test_time_limit_from_the_environment(monkeypatch):
    ex = Exercise("Exercise 1 (slow)", _square, EX.cases)
    monkeypatch.setenv(TIME_LIMIT_ENV, "0.3")
    result, seconds = _timed(ex, hang)
    assert result.reason == "timeout" and "0.3 s" in result.message and seconds < 2.5
    own = Exercise("Exercise 1 (slow)", _square, EX.cases, time_limit=0.2)
    assert "0.2 s" in own.evaluate(hang).message  # an exercise's own limit wins

    def slow(x):
        _busy(0.4 * torch.get_num_threads())
        return x * x
    monkeypatch.setenv(TIME_LIMIT_ENV, "0")  # no limit at all
    assert ex.evaluate(slow).status == PASSED
    monkeypatch.setenv(TIME_LIMIT_ENV, "not a number")
    assert ex._effective_time_limit() == DEFAULT_TIME_LIMIT
    assert Exercise("x", _square, EX.cases, time_limit=0).evaluate(square).status == PASSED
    with pytest.raises(ValueError, match="time_limit"):
        Exercise("x", _square, EX.cases, time_limit=-1)


def test_previous_alarm_handler_and_timer_are_restored():
    fired = []

    def handler(signum, frame):
        fired.append(time.monotonic())
    previous = signal.signal(signal.SIGALRM, handler)
    try:
        start = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 1.5)
        ex = Exercise("Exercise 1 (slow)", _square, EX.cases, time_limit=0.3)
        assert ex.evaluate(hang).reason == "timeout"
        assert signal.getsignal(signal.SIGALRM) is handler
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] < 1.5  # what was left of the earlier timer
        while not fired and time.monotonic() - start < 5:
            time.sleep(0.05)
        assert fired and fired[0] - start == pytest.approx(1.5, abs=0.5)
        assert ex.evaluate(square).status == PASSED and signal.getsignal(signal.SIGALRM) is handler
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_keyboard_interrupt_still_interrupts():
    def interrupted(x):
        raise KeyboardInterrupt
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(KeyboardInterrupt):
        EX.evaluate(interrupted)
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    assert torch.is_grad_enabled()


def test_no_limit_and_no_crash_outside_the_main_thread():
    ex = Exercise("Exercise 1 (slow)", _square, EX.cases, time_limit=0.1)
    results = []

    def slow(x):
        time.sleep(0.4)  # beyond the wall-time limit of 3 × 0.1 s
        _busy(0.15 * torch.get_num_threads())  # beyond the computing-time limit
        return x * x
    thread = threading.Thread(target=lambda: results.append(ex.evaluate(slow)))
    thread.start()
    thread.join()
    assert results[0].status == PASSED  # signals only work in the main thread: no limit there


class _Rerunning(Exercise):
    """Like a notebook's subclass that re-runs the learner's function for a diagnosis of its own."""

    def evaluate(self, fn):
        result = super().evaluate(fn)
        if result.status == FAILED:
            for case in self.cases():
                fn(*case.args)  # no protection of its own
        return result


def test_a_subclass_that_reruns_the_function_is_covered_too():
    ex = _Rerunning("Exercise 1 (rerun)", _square, EX.cases, time_limit=0.3)
    result, seconds = _timed(ex, hang)
    assert result.reason == "timeout" and seconds < 2.5
    calls = []

    def hangs_on_rerun(x):
        calls.append(1)
        if len(calls) > 2:
            hang()
        return x
    result, seconds = _timed(ex, hangs_on_rerun)
    assert result.reason == "timeout" and seconds < 4
    assert ex.evaluate(lambda x: 1 / 0).status == FAILED  # its own code raising is caught as well
    with torch.no_grad():
        assert _Rerunning("Exercise 1 (grad)", AUTOGRAD.reference, AUTOGRAD.cases).evaluate(
            lambda x: 2 * x).status == PASSED


# ---------------------------------------------------------------- kind, log
def test_kind_and_number():
    assert EX.kind == "build" and Exercise("Exercise 7 (x)", _square, EX.cases, kind="investigate").kind == "investigate"
    assert Exercise("Exercise 7 (x)", _square, EX.cases).number == "7" and EX.number is None
    with pytest.raises(ValueError, match="kind"):
        Exercise("x", _square, EX.cases, kind="explore")


def test_check_logs_its_verdict_for_the_grader(tmp_path, monkeypatch, capsys):
    log = tmp_path / "verdicts.jsonl"
    monkeypatch.setenv(VERDICT_LOG_ENV, str(log))
    EX.check(square)
    EX.check(stub)
    lines = log.read_text(encoding="utf-8").splitlines()
    printed = capsys.readouterr().out.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["line"] for r in records] == printed and [r["status"] for r in records] == [PASSED, NOT_ATTEMPTED]
    monkeypatch.setenv(VERDICT_LOG_ENV, str(tmp_path / "missing-dir" / "log"))
    EX.check(square)  # an unwritable log never breaks the check
    assert capsys.readouterr().out.startswith("✅")


def test_result_keeps_its_positional_signature():
    result = Result(FAILED, "message", "title")
    assert result.line() == "❌ title: message" and result.hint is None and not result.passed
    assert math.isclose(DEFAULT_TIME_LIMIT, 10.0)


def test_in_a_jupyter_kernel_the_limit_works_and_an_interrupt_leaves_the_kernel_usable():
    """The real thing: ipykernel runs cells in its main thread, so the limit applies; the learner's
    interrupt (the stop button) ends the check with KeyboardInterrupt and leaves no timer or handler behind."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(ROOT), stderr=subprocess.DEVNULL)
    try:
        def run(code, timeout=60):
            outputs = []
            reply = kc.execute_interactive(code, timeout=timeout, output_hook=lambda msg: outputs.append(msg))
            text = "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")
            errors = [m["content"]["ename"] for m in outputs if m["msg_type"] == "error"]
            return reply["content"]["status"], text, errors

        setup = ("import signal, time, torch\n"
                 "from helpers.exercises.engine import Case, Exercise\n"
                 "ex = Exercise('Exercise 1 (square)', lambda x: x * x, [Case((torch.ones(3),))] * 4, time_limit=0.5)\n"
                 "def hang(x):\n    while True:\n        pass\n")
        assert run(setup)[0] == "ok"
        status, text, _ = run("ex.check(hang)")
        assert text.startswith("❌ Exercise 1 (square): time limit: your function"), text
        msg_id = kc.execute("Exercise('Exercise 1 (square)', lambda x: x * x, [Case((torch.ones(3),))] * 4,"
                            " time_limit=60).check(hang)")
        time.sleep(1.5)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        after = ("print(signal.getitimer(signal.ITIMER_REAL), signal.getitimer(signal.ITIMER_PROF),"
                 " signal.getsignal(signal.SIGALRM) == signal.getsignal(signal.SIGPROF) == signal.SIG_DFL)"
                 "\nex.check(lambda x: x * x)\nimport sys; sys.stdout.flush()")
        want = ["(0.0, 0.0) (0.0, 0.0) True", "✅ Exercise 1 (square): passed (4 hidden test cases)"]
        first = run(after)
        # Once (CI's colab leg, both legs testing side by side) this cell's output came back empty; asking again
        # still tests what matters (no timer or handler left, the next check runs), and both answers are shown
        second = first if first[1].splitlines() == want else run(after)
        assert second[1].splitlines() == want, (first, second)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
