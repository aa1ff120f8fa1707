"""The exercise-checking engine behind every ``helpers.exercises.nbNN`` checker.

An ``Exercise`` knows a reference solution, hidden test cases and *plausible mistakes*
(wrong implementations a learner is likely to write, each with a hint). ``exercise.check(fn)``
runs the learner's function on every hidden case and prints exactly one line,
``<icon> <title>: <message>`` (``parse_line`` reads it back; the grader does):

* ``⏳ ... not attempted yet``: ``fn`` raises ``NotImplementedError`` on the first case or
  returns ``None`` on every case (a blank stub); for a *debug* exercise given its buggy
  original (``buggy=``), ``fn`` still does what the original does on every case;
* ``✅ ... passed (N hidden test cases)``: every case matches the reference;
* ``❌ ...``: what is wrong (type, shape, the first wrong value and its index, how many
  cases fail), an incomplete function (``None`` on some inputs only), or the time limit.

Three rules decide what a failure message says:

* **A gap that a lower precision explains is not called wrong.** When every failing case
  agrees to float32 precision but the task wants float64, the message says so and how to
  keep float64 (``helpers.exercises.compare``). When some cases are wrong beyond that, the
  message is about those, and the precision gap is only mentioned.
* **A mistake is named only when it explains the answer.** A listed mistake's hint
  ("Likely mistake: ...") is given when the mistake model reproduces the learner's function
  on *every* hidden case (values to float32 precision, or the same type of exception) and
  differs from the reference on each case the learner gets wrong (a model equal to the
  reference there explains nothing; one that fails where the learner passes is a mistake the
  learner did not make). In a debug exercise, a fix that still does what the buggy original
  does on every failing case is told the bug is still there; when nothing explains the
  answer, the message names the kind of bug to look for (``bug_class=``), but only where a test
  of that class (``bug_shows=``) finds it in every wrong answer: a wrong answer of another kind
  gets no lead.
* **A message is one line**, never a traceback.

Guarantees, whatever state the learner's kernel is in: a check never raises because of the
learner's code (a ``KeyboardInterrupt`` still interrupts); it runs with autograd on and float32
as torch's default dtype for the course's code, and leaves the kernel's grad mode, default dtype
and global random generators (torch, NumPy, ``random``) as they were; the learner's calls on the
hidden cases share a time limit (``helpers.exercises.timelimit``), and a debug exercise's extra calls
for its clue get a limit of the same size (running out of it only means no clue). ``evaluate(fn)``
returns the ``Result`` instead of printing it; ``passes(fn)`` answers only whether it passed,
silently, for a cell that uses the function.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import numbers
import os
import random
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from helpers.exercises import timelimit
from helpers.exercises.compare import DTYPE_TOLERANCES, Difference, compare, describe_value, difference, \
    dtype_name, one_line
from helpers.exercises.timelimit import DEFAULT_TIME_LIMIT, TIME_LIMIT_ENV, CheckTimeout, TimeLimit, \
    alarm_available, cpu_budget, time_limit_from_env

__all__ = ["Case", "Corner", "Domain", "Result", "Exercise", "compare", "parse_line", "NOT_ATTEMPTED", "PASSED", "FAILED", "ICONS",
           "KINDS", "DEFAULT_POINTS", "HINT_PREFIX", "CLUE_PREFIX", "DEFAULT_TIME_LIMIT", "TIME_LIMIT_ENV",
           "VERDICT_LOG_ENV", "DTYPE_TOLERANCES", "CheckTimeout"]

NOT_ATTEMPTED = "not attempted"
PASSED = "passed"
FAILED = "failed"

ICONS = {NOT_ATTEMPTED: "⏳", PASSED: "✅", FAILED: "❌"}
STATUS_OF_ICON = {icon: status for status, icon in ICONS.items()}

#: The kinds of exercise: implement what the notebook showed; think (predict, measure, extend);
#: find and fix the bug in a short function (notebook 08, where real code is the subject).
KINDS = ("build", "investigate", "debug")
#: Points an exercise is worth unless it says otherwise (the grader's teacher can override them).
DEFAULT_POINTS = {"build": 2, "investigate": 3, "debug": 2}

#: When set (the grader sets it), ``check`` appends each verdict as a JSON line to this file.
VERDICT_LOG_ENV = "FFN_VERDICT_LOG"

#: One verdict line: icon, title (``Exercise N (...)`` in the course; it never contains ": "), message.
LINE_RE = re.compile(r"^(?P<icon>[⏳✅❌]) (?P<title>.+?): (?P<message>.*)$")
HINT_PREFIX = "Likely mistake: "
CLUE_PREFIX = "The bug to look for: "
_MAX_ERROR_TEXT = 300


def parse_line(line: str) -> tuple[str, str, str] | None:
    """``(status, title, message)`` of a verdict line printed by ``check``, or ``None`` for any other text."""
    match = LINE_RE.match(line.strip("\r\n"))
    if match is None:
        return None
    return STATUS_OF_ICON[match["icon"]], match["title"], match["message"]


@dataclass
class Case:
    """One hidden test input: positional and keyword arguments for the learner's function."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    note: str = ""

    def describe(self) -> str:
        """Short human description of the input, e.g. ``input of shape (3, 5)``."""
        if self.note:
            return self.note
        parts = [describe_value(a) for a in self.args]
        parts += [f"{k}={describe_value(v)}" for k, v in self.kwargs.items()]
        return "input " + ", ".join(parts) if parts else "no input"


@dataclass(frozen=True)
class Corner:
    """One corner of an exercise's declared domain, and a test that a hidden case reaches it.

    ``name`` says it in the statement's words (``"k = F (every feature kept)"``, ``"ties wider than k"``,
    ``"logits near 100 (an unshifted exp overflows)"``); ``reached(case)`` looks at the case's real arguments
    (not its note) and says whether it sits in that corner.
    """

    name: str
    reached: Callable[[Case], bool]


@dataclass(frozen=True)
class Domain:
    """What an exercise's statement allows, and the corners its hidden cases must cover.

    ``allows`` is the statement's promise in words: shapes, dtypes, every value range, ties, sizes, the stated
    arithmetic. ``corners`` are the extremes of that promise (each end of each range, the widest ties, the
    smallest sizes, ...): ``Exercise.uncovered()`` lists those no hidden case reaches, and a test keeps it
    empty for every exercise of the course. A statement that allows more than the checker can judge is narrowed,
    not left wider than its cases.
    """

    allows: str
    corners: tuple[Corner, ...]


@dataclass
class Result:
    """Outcome of checking one exercise.

    ``reason`` says why a check failed, for programs (``""`` when it passed or was not
    attempted): ``"wrong"``, ``"precision"`` (right to a lower precision only), ``"error"``
    (the function raised), ``"incomplete"``, ``"timeout"``, ``"not callable"`` or
    ``"checker"`` (the checker itself broke). ``hint`` is the likely mistake, when one
    explains the answer (see the module's rules).
    """

    status: str
    message: str
    title: str = ""
    reason: str = ""
    hint: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def line(self) -> str:
        return one_line(f"{ICONS[self.status]} {self.title}: {self.message}")

    def __str__(self) -> str:
        return self.line()


# ---------------------------------------------------------------- the state a check runs in
@contextlib.contextmanager
def _course_defaults() -> Iterator[None]:
    """float32 as torch's default dtype while the course's own code (cases, reference, mistakes) runs."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@contextlib.contextmanager
def _checking_state() -> Iterator[None]:
    """Autograd on (outside inference mode), warnings silenced, global RNGs restored afterwards."""
    torch_state = torch.get_rng_state()
    numpy_state = np.random.get_state()
    python_state = random.getstate()
    try:
        with torch.inference_mode(False), torch.enable_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.set_rng_state(torch_state)
        np.random.set_state(numpy_state)
        random.setstate(python_state)


_depth = threading.local()


@contextlib.contextmanager
def _outermost() -> Iterator[bool]:
    """True for the outermost ``evaluate`` on this thread (a subclass's override calling ``super``)."""
    depth = getattr(_depth, "value", 0)
    _depth.value = depth + 1
    if depth == 0:
        _depth.timeout = None  # the first time-limit verdict of this check, for a subclass's wrapper
    try:
        yield depth == 0
    finally:
        _depth.value = depth


def _guard_evaluate(method: Callable[..., Result]) -> Callable[..., Result]:
    """Wrap a subclass's own ``evaluate``: the checking state, a time limit and "never raises" cover all of it.

    A subclass may re-run the learner's function for a diagnosis of its own; that is covered by a
    backstop limit of three times the exercise's.
    """

    @functools.wraps(method)
    def evaluate(self: Exercise, fn: Any, *args: Any, **kwargs: Any) -> Result:
        with _outermost() as outermost:
            if not outermost:
                return method(self, fn, *args, **kwargs)
            limit = self._effective_time_limit()
            try:
                cpu, wall = (cpu_budget(3 * limit), timelimit.WALL_FACTOR * 3 * limit) if limit else (None, None)
                guard = TimeLimit(cpu, wall)
                with _checking_state(), guard:
                    return method(self, fn, *args, **kwargs)
            except CheckTimeout:
                return getattr(_depth, "timeout", None) or self._timeout_result(limit, which=guard.fired)
            except Exception as err:  # the checker itself must not crash the notebook
                return self._checker_broke(err)

    evaluate._guarded = True  # type: ignore[attr-defined]
    return evaluate


# ---------------------------------------------------------------- the exercise
def _fresh(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Deep copies, so a function that edits its inputs in place cannot spoil the next call."""
    return copy.deepcopy(args), copy.deepcopy(kwargs)


def _error_text(err: BaseException) -> str:
    text = one_line(f"{type(err).__name__}: {err}" if str(err) else type(err).__name__)
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT - 3] + "..."


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


@dataclass(eq=False)
class _Outcome:
    """What the learner's function did on one case, and how that differs from the reference."""

    case: Case
    kind: str  # "value", "none", "not implemented", "error"
    value: Any = None
    error: BaseException | None = None
    expected: Any = None
    difference: Difference | None = None


class Exercise:
    """A checkable exercise.

    Args:
        title: shown at the start of the result line; in the course always ``"Exercise N (short name)"``
            (no ": " inside, so the line parses back).
        reference: the correct function.
        cases: the hidden inputs, or a function returning them (built lazily, seeded).
        mistakes: ``(hint, wrong_function)`` pairs (see the module's rule for when a hint is shown).
        atol, rtol: tolerances for floating-point results; ``None`` (default) follows the
            reference's dtype (``DTYPE_TOLERANCES``: float64 tight, float32 looser).
        kind: ``"build"``, ``"investigate"`` or ``"debug"``.
        time_limit: seconds the learner's function may run in total over the hidden cases;
            ``None`` takes ``FFN_CHECK_TIMEOUT`` or ``DEFAULT_TIME_LIMIT``; ``0`` means no limit.
        buggy: for a debug exercise whose cell shows the buggy function ready to run (no ``raise
            NotImplementedError`` line), that function: run unchanged it is "not attempted", and a fix
            that still does what it does on every failing case is told the bug is still there. (A debug
            cell that starts with ``raise NotImplementedError`` can instead list the buggy function as a
            mistake, with the class of bug as its hint.)
        bug_class: for a debug exercise, the kind of bug in words (``"an off-by-one in a loop bound"``),
            given as a clue when a fix is wrong, no listed mistake explains it and ``bug_shows`` finds
            the class in it.
        bug_shows: ``bug_shows(fn, args, value) -> bool``: does the learner's ``fn``, which returned
            ``value`` on a case's ``args``, show the bug class there (``fn`` may be called again, e.g.
            on changed inputs)? The clue is given only when it holds on every wrong case that returned
            a value; without it, no clue. It may raise or misbehave: that counts as ``False``.
        points: what the exercise is worth in the grader's gradebook (default ``DEFAULT_POINTS[kind]``).
        domain: the inputs the statement allows and their corners (``Domain``); every corner must be reached
            by at least one hidden case (``uncovered``).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("evaluate")
        if own is not None and not getattr(own, "_guarded", False):
            cls.evaluate = _guard_evaluate(own)

    def __init__(self, title: str, reference: Callable[..., Any], cases: Sequence[Case] | Callable[[], Sequence[Case]],
                 mistakes: Sequence[tuple[str, Callable[..., Any]]] = (), *, atol: float | None = None,
                 rtol: float | None = None, kind: str = "build", time_limit: float | None = None,
                 buggy: Callable[..., Any] | None = None, bug_class: str | None = None,
                 bug_shows: Callable[[Callable[..., Any], tuple, Any], bool] | None = None,
                 points: float | None = None, domain: Domain | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if time_limit is not None and not (isinstance(time_limit, numbers.Real) and time_limit >= 0):
            raise ValueError(f"time_limit must be a number of seconds >= 0 or None, got {time_limit!r}")
        if buggy is not None and not callable(buggy):
            raise ValueError(f"buggy= must be the function with its bug, got {type(buggy).__name__}")
        if bug_class is not None and not (isinstance(bug_class, str) and bug_class.strip()):
            raise ValueError(f"bug_class= must name the kind of bug in words, got {bug_class!r}")
        if kind != "debug" and (buggy is not None or bug_class is not None or bug_shows is not None):
            raise ValueError("buggy=, bug_class= and bug_shows= belong to debug exercises (kind='debug')")
        if bug_shows is not None and (bug_class is None or not callable(bug_shows)):
            raise ValueError("bug_shows= must be a function and needs the bug_class= it tests for")
        if points is not None and not (isinstance(points, numbers.Real) and points >= 0):
            raise ValueError(f"points must be a number >= 0 or None, got {points!r}")
        if domain is not None and not (isinstance(domain, Domain) and domain.corners and
                                       all(isinstance(c, Corner) for c in domain.corners)):
            raise ValueError("domain= must be a Domain with at least one Corner")
        self.title = title
        self.reference = reference
        self._cases = cases
        self.mistakes = list(mistakes)
        self.atol = atol
        self.rtol = rtol
        self.kind = kind
        self.time_limit = time_limit
        self.buggy = buggy
        self.bug_class = bug_class
        self.bug_shows = bug_shows
        self.points = DEFAULT_POINTS[kind] if points is None else points
        self.domain = domain

    def __repr__(self) -> str:
        return f"<Exercise {self.title!r} ({self.kind})>"

    @property
    def number(self) -> str | None:
        """The exercise's number as written in its title (``"3"`` for ``"Exercise 3 (...)"``), if any."""
        match = re.match(r"Exercise\s+(\w+)", self.title)
        return match.group(1) if match else None

    def cases(self) -> list[Case]:
        with _course_defaults():
            cases = self._cases() if callable(self._cases) else self._cases
        return [c if isinstance(c, Case) else Case(tuple(c)) for c in cases]

    def uncovered(self) -> list[str]:
        """The names of the domain's corners that no hidden case reaches (empty when every corner is covered)."""
        if self.domain is None:
            return ["(no domain declared)"]
        cases = self.cases()
        missing = []
        for corner in self.domain.corners:
            with _course_defaults():
                if not any(bool(corner.reached(case)) for case in cases):
                    missing.append(corner.name)
        return missing

    # ------------------------------------------------------------ the public calls
    def evaluate(self, fn: Any) -> Result:
        """Check ``fn`` against every hidden case and return the ``Result`` (never raises)."""
        with _outermost() as outermost:
            try:
                if not outermost:
                    return self._evaluate(fn)
                with _checking_state():
                    return self._evaluate(fn)
            except Exception as err:  # defensive: the checker itself must not crash the notebook
                return self._checker_broke(err)

    evaluate._guarded = True  # type: ignore[attr-defined]

    def check(self, fn: Any) -> None:
        """Print the one-line verdict for the learner's ``fn``."""
        result = self.evaluate(fn)
        print(result.line())
        _log_verdict(result)

    __call__ = check

    def passes(self, fn: Any) -> bool:
        """Does ``fn`` pass? Evaluated silently (nothing printed, not logged for the grader), for a cell
        that should use the learner's function only once its check has passed."""
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return self.evaluate(fn).passed

    # ------------------------------------------------------------ running the learner's function
    def _effective_time_limit(self) -> float | None:
        if self.time_limit is not None:
            return self.time_limit if self.time_limit > 0 else None
        return time_limit_from_env()

    def _result(self, status: str, message: str, reason: str = "", hint: str | None = None) -> Result:
        return Result(status, message, self.title, reason, hint)

    def _checker_broke(self, err: Exception) -> Result:
        return self._result(FAILED, f"the checker could not compare your answer ({type(err).__name__}: {err})",
                            "checker")

    def _expected(self, case: Case) -> Any:
        args, kwargs = _fresh(case.args, case.kwargs)
        with _course_defaults():
            return self.reference(*args, **kwargs)

    def _timeout_result(self, limit: float | None, case: Case | None = None, done: int = 0, total: int = 0,
                        which: str | None = "cpu") -> Result:
        seconds = f"{limit:g} s" if limit else "the time limit"
        if which == "wall" and limit:
            took = (f"ran for more than {timelimit.WALL_FACTOR * limit:g} s of wall time (waiting, or on a busy "
                    f"machine; the limit is {seconds} of computing time)")
        else:
            took = f"took more than {seconds} of computing time"
        where = f" and was stopped on {case.describe()} ({done} of {total} finished)" if case is not None else \
            " and was stopped"
        result = self._result(FAILED, f"time limit: your function {took} in total on the hidden cases{where}. "
                                      f"Look for a loop that never ends, or a Python loop over single elements "
                                      f"where one tensor operation would do.", "timeout")
        if getattr(_depth, "timeout", None) is None:
            _depth.timeout = result
        return result

    def _run(self, fn: Callable[..., Any], cases: list[Case]) -> list[_Outcome] | Result:
        """The learner's function on every case, within the time limit (a ``Result`` when it ends early)."""
        limit = self._effective_time_limit()
        if limit is None or not alarm_available():  # no signals here (Windows, another thread): no limit
            cpu_left = wall_left = None
        else:
            cpu_left, wall_left = cpu_budget(limit), timelimit.WALL_FACTOR * limit
        outcomes: list[_Outcome] = []
        for i, case in enumerate(cases):
            args, kwargs = _fresh(case.args, case.kwargs)
            if cpu_left is not None and (cpu_left <= 0 or wall_left <= 0):
                return self._timeout_result(limit, case, i, len(cases), "cpu" if cpu_left <= 0 else "wall")
            started, started_cpu = time.monotonic(), time.process_time()
            guard = TimeLimit(cpu_left, wall_left)
            try:
                with guard:
                    value = fn(*args, **kwargs)
            except CheckTimeout:
                return self._timeout_result(limit, case, i, len(cases), guard.fired)
            except NotImplementedError as err:
                if i == 0:
                    return self._result(NOT_ATTEMPTED, "not attempted yet (replace `raise NotImplementedError` "
                                                       "with your code, then run this cell again)")
                outcomes.append(_Outcome(case, "not implemented", error=err))
            except (Exception, SystemExit) as err:
                outcomes.append(_Outcome(case, "error", error=err))
            else:
                outcomes.append(_Outcome(case, "none" if value is None else "value", value))
            finally:
                if cpu_left is not None:
                    cpu_left -= time.process_time() - started_cpu
                    wall_left -= time.monotonic() - started
        return outcomes

    # ------------------------------------------------------------ the verdict
    def _evaluate(self, fn: Any) -> Result:
        if not callable(fn):
            return self._result(FAILED, f"pass your function itself (e.g. check(my_fn)), got a {type(fn).__name__}",
                                "not callable")
        cases = self.cases()
        outcomes = self._run(fn, cases)
        if isinstance(outcomes, Result):
            return outcomes
        total = len(cases)
        if all(o.kind == "none" for o in outcomes):
            return self._result(NOT_ATTEMPTED, "not attempted yet (your function returns None: "
                                               "fill in the body and `return` the result)")
        missing = [o for o in outcomes if o.kind in ("none", "not implemented")]
        if missing:
            first = missing[0]
            what = "returned None" if first.kind == "none" else "raised NotImplementedError"
            return self._result(FAILED, f"incomplete: your function {what} on {first.case.describe()} "
                                        f"({len(missing)} of {total} hidden cases), but a result on the others. "
                                        f"Every input needs a result: is a branch missing its `return`?",
                                "incomplete")
        for outcome in outcomes:
            outcome.expected = self._expected(outcome.case)
            if outcome.kind == "error":
                outcome.difference = Difference(f"your function raised {_error_text(outcome.error)}")
            else:
                outcome.difference = difference(outcome.value, outcome.expected, self.atol, self.rtol)
        failing = [o for o in outcomes if o.difference is not None]
        if not failing:
            return self._result(PASSED, f"passed ({_plural(total, 'hidden test case')})")
        if self.buggy is not None and all(self._explains(self.buggy, o) for o in outcomes):
            return self._result(NOT_ATTEMPTED, "not attempted yet (your function still does what the buggy "
                                               "original does on every hidden case: find the bug, fix it, then "
                                               "run this cell again)")
        wrong = [o for o in failing if o.difference.precision is None]
        near = [o for o in failing if o.difference.precision is not None]
        if not wrong:
            return self._precision_result(near, total)
        first = wrong[0]
        count = f"; {len(wrong)} of {total} hidden cases fail" if len(wrong) > 1 else ""
        message = f"{first.difference.text} (on {first.case.describe()}{count})."
        if near:
            gap = near[0].difference
            message += (f" {_plural(len(near), 'other case')} match only to {dtype_name(gap.precision)} precision "
                        f"(this exercise wants {gap.wanted_name()}).")
        hint = self._diagnose(outcomes)
        if hint:
            message += f" {HINT_PREFIX}{hint}"
        elif self.bug_class and self._class_shows(fn, wrong):
            message += f" {CLUE_PREFIX}{self.bug_class}."
        return self._result(FAILED, message, "error" if first.kind == "error" else "wrong", hint)

    def _class_shows(self, fn: Callable[..., Any], wrong: list[_Outcome]) -> bool:
        """Does ``bug_shows`` find the bug class in every wrong case that returned a value (at least one)?"""
        values = [o for o in wrong if o.kind == "value"]
        if self.bug_shows is None or not values:
            return False
        limit = self._effective_time_limit()
        guard = TimeLimit(cpu_budget(limit), timelimit.WALL_FACTOR * limit) if limit else TimeLimit(None)
        try:
            with guard:  # the clue calls the learner's function again: under the exercise's time limit
                for outcome in values:
                    args, kwargs = _fresh(outcome.case.args, outcome.case.kwargs)
                    with _course_defaults():
                        shows = self.bug_shows(fn, args, outcome.value)
                    if not bool(shows):
                        return False
        except (Exception, SystemExit, CheckTimeout):  # a broken test, or the learner's code raising or
            return False                                  # running out of time inside it: no clue
        return True

    def _precision_result(self, near: list[_Outcome], total: int) -> Result:
        first = near[0].difference
        count = f"; {len(near)} of {total} hidden cases differ this way" if len(near) > 1 else ""
        return self._result(FAILED, f"{first.note()}: {first.text} (on {near[0].case.describe()}{count}). "
                                    f"{first.advice()}", "precision")

    def _explains(self, model: Callable[..., Any], outcome: _Outcome, *, must_differ: bool = False) -> bool:
        """Does ``model`` reproduce what the learner's function did on this case (the value, to a lower
        precision, or the same type of exception)? With ``must_differ``, the model must also be wrong
        there: beyond precision, it does not give the reference's answer."""
        args, kwargs = _fresh(outcome.case.args, outcome.case.kwargs)
        try:
            with _course_defaults():
                produced = model(*args, **kwargs)
        except Exception as err:  # the model raising explains only the learner raising the same kind of error
            return outcome.kind == "error" and type(err) is type(outcome.error)
        if outcome.kind != "value":
            return False
        try:
            if compare(outcome.value, produced, self.atol, self.rtol, accept_lower_precision=True) is not None:
                return False
            return not must_differ or compare(produced, outcome.expected, self.atol, self.rtol,
                                              accept_lower_precision=True) is not None
        except Exception:  # a broken mistake model must never hide the learner's result
            return False

    def _diagnose(self, outcomes: list[_Outcome]) -> str | None:
        """The hint of the first mistake model that reproduces the learner's function on every hidden case
        (so it names no mistake the function demonstrably does not make) and is itself wrong, beyond
        precision, on each case the learner gets wrong. For a debug exercise, then the buggy original:
        when it reproduces the learner on every failing case, the bug is still there (a partial fix).

        An exception counts as reproduced when the model raises the same type on that case (a transposed
        weight fails on the non-square cases); at least one wrong case must be a value.
        """
        wrong = [o for o in outcomes if o.difference is not None and o.difference.precision is None]
        if not any(o.kind == "value" for o in wrong):
            return None
        others = [o for o in outcomes if not any(o is w for w in wrong)]
        for hint, model in self.mistakes:
            if all(self._explains(model, o, must_differ=True) for o in wrong) and \
                    all(self._explains(model, o) for o in others):
                return hint
        if self.buggy is not None and all(self._explains(self.buggy, o, must_differ=True) for o in wrong):
            bug = f"the original bug ({self.bug_class})" if self.bug_class else "the original bug"
            return f"{bug} is still there on the inputs that fail: your fix covers only some of them."
        return None


def _log_verdict(result: Result) -> None:
    """Append the verdict to ``$FFN_VERDICT_LOG`` (set by the grader), so it can tell checks from printed text."""
    path = os.environ.get(VERDICT_LOG_ENV)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"title": result.title, "status": result.status, "line": result.line()},
                                 ensure_ascii=False) + "\n")
    except OSError:
        pass
