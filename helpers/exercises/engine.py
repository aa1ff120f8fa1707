"""The exercise-checking engine behind every ``helpers.exercises.nbNN`` checker.

An ``Exercise`` knows a reference solution, hidden test cases and *plausible mistakes* (wrong implementations a
learner is likely to write, each with a hint). ``exercise.check(fn)`` runs the learner's function on every hidden
case and prints exactly one line, ``<icon> <title>: <message>`` (``helpers.exercises.verdict``; the grader reads
it back):

* ``⏳ ... not attempted yet``: ``fn`` raises ``NotImplementedError`` on the first case or returns ``None`` on
  every case without changing its inputs (a blank stub);
* ``✅ ... passed (N hidden test cases)``: every case matches the reference, and no input was changed;
* ``❌ ...``: what is wrong (type, shape, the first wrong value and its index, how many cases fail), an input the
  function changed in place, an incomplete function (``None`` on some inputs only), the time limit, or the
  checker's own code handed in as an answer.

The rules that decide a failure's message:

* **Inputs stay as they were.** Each call gets deep copies of a case's arguments; afterwards they are compared
  with the case's untouched originals (``helpers.exercises.mutation``). A function that changed one fails, with
  the argument's name and what changed: later cells reuse their inputs.
* **A gap that a lower precision explains is not called wrong**, and only such a gap gets the precision note:
  when every failing case agrees with the reference to float32's *relative* precision and the task wants
  float64, the message says so and how to keep float64 (``helpers.exercises.compare``). An answer wrong beyond
  that on any case is told what is wrong, with no precision note.
* **A type the statement fixes is held** (``returns=``, ``helpers.exercises.returns``): values are compared
  leniently (a whole float matches an int), so once every value is right, each case's result (the one already
  returned, no second call) must have the type the statement names (a Python int, a float32 tensor, ...).
* **A mistake is named only when it explains the answer.** A listed mistake's hint ("Likely mistake: ...") is
  given when the mistake model reproduces the learner's function on *every* hidden case (values to float32
  precision, or the same type of exception) and differs from the reference on each case the learner gets wrong.
* **A debug exercise is debugged by the learner** (the debug ladder). Its first failure in a kernel, and any
  failure of a function that still does what the function as given does (``buggy=``) on every case, shows the
  symptom only: the case and what differs. Once a *changed* function fails again, the message adds the listed
  mistake that explains it, or the bug is still there on some inputs (a partial fix), or the class of bug
  (``bug_class=``, only where its test ``bug_shows`` finds it in every wrong answer). No message names the fix.
* **The checker's own code is not an answer.** A function that is the exercise's reference, or any function
  defined in the checker modules (reached as ``check_x.reference``, ``check_x.mistakes[0][1]``, ``nbNN._ref``,
  through ``functools.partial`` or a bound method), never passes; nor does a learner's function that calls one
  (read from its globals, defaults or closure, directly or through its own helpers).
* **A message is one line**, never a traceback.

Guarantees, whatever state the learner's kernel is in: a check never raises because of the learner's code (a
``KeyboardInterrupt`` still interrupts) and leaves the kernel's state as it was (``helpers.exercises.sandbox``);
the learner's calls on the hidden cases share a time limit (``helpers.exercises.timelimit``), and a debug
exercise's extra calls for its clue get a limit of the same size (running out of it only means no clue).
``evaluate(fn)`` returns the ``Result`` instead of printing it; ``passes(fn)`` answers only whether it passed,
silently, for a cell that uses the function. Only ``check`` moves a debug exercise up its ladder (``forget``
starts it again).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import numbers
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from helpers.exercises import timelimit
from helpers.exercises.cases import Case, Corner, Domain
from helpers.exercises.compare import DTYPE_TOLERANCES, Difference, compare, difference, dtype_name, one_line
from helpers.exercises.mutation import changed_input
from helpers.exercises.returns import Returns
from helpers.exercises.sandbox import checking_state, course_defaults, guard_evaluate, outermost, record_timeout, \
    submitted
from helpers.exercises.timelimit import DEFAULT_TIME_LIMIT, TIME_LIMIT_ENV, CheckTimeout, TimeLimit, \
    alarm_available, cpu_budget, time_limit_from_env
from helpers.exercises.verdict import CHANGED_INPUT, CHECKERS_CODE, CLUE_PREFIX, FAILED, HINT_PREFIX, ICONS, \
    LINE_RE, NOT_ATTEMPTED, PASSED, STATUS_OF_ICON, VERDICT_LOG_ENV, Result, log_verdict, parse_line

__all__ = ["Case", "Corner", "Domain", "Result", "Exercise", "compare", "parse_line", "NOT_ATTEMPTED", "PASSED",
           "FAILED", "ICONS", "STATUS_OF_ICON", "LINE_RE", "KINDS", "DEFAULT_POINTS", "HINT_PREFIX", "CLUE_PREFIX",
           "CHANGED_INPUT", "CHECKERS_CODE", "DEFAULT_TIME_LIMIT", "TIME_LIMIT_ENV", "VERDICT_LOG_ENV",
           "DTYPE_TOLERANCES", "CheckTimeout"]

#: The kinds of exercise: implement what the notebook showed; think (predict, measure, extend);
#: find and fix the bug in a short function (notebook 08, where real code is the subject).
KINDS = ("build", "investigate", "debug")
#: Points an exercise is worth unless it says otherwise (the grader's teacher can override them).
DEFAULT_POINTS = {"build": 2, "investigate": 3, "debug": 2}

_MAX_ERROR_TEXT = 300
#: The checker modules' folder: a function defined in it is the checker's own code, never an answer.
_CHECKERS = Path(__file__).resolve().parent
_REPOSITORY = _CHECKERS.parent.parent
_UNCHANGED = ("Your function still does what the function as given does on every hidden case: the bug is still "
              "in it.")
_OWN_CODE = ("this is the checker's own code (its reference solution, or a model of a mistake), not a function of "
             "yours (or yours only calls it): write the function in the exercise cell, then run the cell again.")


# ---------------------------------------------------------------- the exercise
def _fresh(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Deep copies: the learner's function never gets a case's own objects (they stay the originals)."""
    return copy.deepcopy(args), copy.deepcopy(kwargs)


def _error_text(err: BaseException) -> str:
    text = one_line(f"{type(err).__name__}: {err}" if str(err) else type(err).__name__)
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT - 3] + "..."


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _unwrap(fn: Any) -> Any:
    """The function under ``functools.partial``, a bound method or ``functools.wraps``'s ``__wrapped__``."""
    for _ in range(20):
        inner = fn.func if isinstance(fn, functools.partial) else getattr(fn, "__func__", None) or \
            getattr(fn, "__wrapped__", None)
        if inner is None or inner is fn:
            return fn
        fn = inner
    return fn


def _course_file(filename: str) -> bool:
    """A real file of the course's repository (its tests), not a notebook cell's or a console's pseudo-file."""
    path = Path(filename)
    return not filename.startswith("<") and path.is_file() and _REPOSITORY in path.resolve().parents


def _code_tree(code: Any) -> list:
    """A code object and every code object nested in it (inner functions, lambdas, comprehensions)."""
    found, stack = [], [code]
    while stack:
        c = stack.pop()
        found.append(c)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return found


def _is_checker_object(obj: Any) -> bool:
    """A function defined in the checker modules, a checker module itself, or an exercise."""
    if isinstance(obj, Exercise):
        return True
    where = getattr(obj, "__file__", None) or getattr(getattr(_unwrap(obj), "__code__", None), "co_filename", None)
    try:
        return where is not None and Path(where).resolve().parent == _CHECKERS
    except Exception:
        return False


def _reaches_own_code(fn: Any, depth: int = 3) -> bool:
    """Does ``fn`` call the checker's own code, read from its globals, defaults or closure (a one-line wrapper
    around ``check_x.reference``, ``nbNN._ref``), directly or through up to ``depth`` functions of its module?"""
    target = _unwrap(fn)
    code = getattr(target, "__code__", None)
    if code is None or depth < 0:
        return False
    reached = [*(getattr(target, "__defaults__", None) or ()), *(getattr(target, "__kwdefaults__", None) or {}).values(),
               *(c.cell_contents for c in (getattr(target, "__closure__", None) or ()) if _has_contents(c))]
    scope = getattr(target, "__globals__", {})
    reached += [scope[name] for c in _code_tree(code) for name in c.co_names if name in scope]
    for obj in reached:
        if _is_checker_object(obj):
            return True
        inner = _unwrap(obj)
        if callable(obj) and inner is not target and getattr(inner, "__globals__", None) is scope and \
                _reaches_own_code(inner, depth - 1):  # the learner's own helpers, not the libraries
            return True
    return False


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


@dataclass(eq=False)
class _Outcome:
    """What the learner's function did on one case, and how that differs from the reference."""

    case: Case
    kind: str  # "value", "none", "not implemented", "error"
    value: Any = None
    error: BaseException | None = None
    expected: Any = None
    difference: Difference | None = None
    changed: tuple[str, str] | None = None  # (the argument's name, what changed) when it edited an input


class Exercise:
    """A checkable exercise.

    Args:
        title: shown at the start of the result line; in the course always ``"Exercise N (short name)"``
            (no ": " inside, so the line parses back).
        reference: the correct function.
        cases: the hidden inputs, or a function returning them (built lazily, seeded).
        mistakes: ``(hint, wrong_function)`` pairs (see the module's rule for when a hint is shown).
        atol, rtol: tolerances for floating-point results; ``None`` (default) follows the task's precision
            (``DTYPE_TOLERANCES``: float64 tight, float32 looser).
        precision: the float dtype the task's arithmetic must keep; ``None`` (default) is the reference result's
            dtype. Set ``torch.float32`` where the statement allows float32 steps on float64 inputs: the answer is
            then compared at float32's tolerance (unless ``atol``/``rtol`` say otherwise) and never told to keep
            float64.
        kind: ``"build"``, ``"investigate"`` or ``"debug"``.
        time_limit: seconds the learner's function may run in total over the hidden cases;
            ``None`` takes ``FFN_CHECK_TIMEOUT`` or ``DEFAULT_TIME_LIMIT``; ``0`` means no limit.
        buggy: for a debug exercise, the function as given (with its bug): a function that still does what it
            does on every case gets the symptom only, however often it is run, and a fix that still does what
            it does on every failing case is told the bug is still there (on the ladder's second step).
        bug_class: for a debug exercise, the kind of bug in words (``"an off-by-one in a loop bound"``), never
            the fix; given as a clue on the ladder's second step when no listed mistake explains the answer and
            ``bug_shows`` finds the class in it.
        bug_shows: ``bug_shows(fn, args, value) -> bool``: does the learner's ``fn``, which returned
            ``value`` on a case's ``args``, show the bug class there (``fn`` may be called again, e.g.
            on changed inputs)? The clue is given only when it holds on every wrong case that returned
            a value; without it, no clue. It may raise or misbehave: that counts as ``False``.
        points: what the exercise is worth in the grader's gradebook (default ``DEFAULT_POINTS[kind]``).
        domain: the inputs the statement allows and their corners (``Domain``); every corner must be reached
            by at least one hidden case (``uncovered``).
        returns: the type the statement fixes for the answer (``helpers.exercises.returns``: a Python int, a
            float32 tensor, ...), one ``Returns`` or several; checked on every case's result once every value
            is right (values alone are compared leniently: a whole float matches an int).
        slow_hint: a sentence added to the time-limit verdict, naming this exercise's way of running slow.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("evaluate")
        if own is not None and not getattr(own, "_guarded", False):
            cls.evaluate = guard_evaluate(own)

    def __init__(self, title: str, reference: Callable[..., Any], cases: Sequence[Case] | Callable[[], Sequence[Case]],
                 mistakes: Sequence[tuple[str, Callable[..., Any]]] = (), *, atol: float | None = None,
                 rtol: float | None = None, kind: str = "build", time_limit: float | None = None,
                 buggy: Callable[..., Any] | None = None, bug_class: str | None = None,
                 bug_shows: Callable[[Callable[..., Any], tuple, Any], bool] | None = None,
                 points: float | None = None, domain: Domain | None = None,
                 precision: torch.dtype | None = None, returns: Returns | Sequence[Returns] | None = None,
                 slow_hint: str | None = None) -> None:
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
        if kind == "debug" and buggy is None:
            raise ValueError("a debug exercise needs buggy=, the function as given with its bug (the ladder's "
                             "first step tells it apart from a changed function)")
        if bug_shows is not None and (bug_class is None or not callable(bug_shows)):
            raise ValueError("bug_shows= must be a function and needs the bug_class= it tests for")
        if points is not None and not (isinstance(points, numbers.Real) and points >= 0):
            raise ValueError(f"points must be a number >= 0 or None, got {points!r}")
        if domain is not None and not (isinstance(domain, Domain) and domain.corners and
                                       all(isinstance(c, Corner) for c in domain.corners)):
            raise ValueError("domain= must be a Domain with at least one Corner")
        if precision is not None and precision not in DTYPE_TOLERANCES:
            raise ValueError(f"precision= must be one of {[dtype_name(d) for d in DTYPE_TOLERANCES]}, got "
                             f"{precision!r}")
        returns = () if returns is None else (returns,) if isinstance(returns, Returns) else \
            tuple(returns) if isinstance(returns, (tuple, list)) else (returns,)
        if not all(isinstance(r, Returns) for r in returns):
            raise ValueError("returns= must be a Returns (helpers.exercises.returns) or a sequence of them")
        self.title = title
        self.returns = returns
        self.slow_hint = slow_hint
        self.reference = reference
        self._cases = cases
        self.mistakes = list(mistakes)
        self.atol = atol
        self.rtol = rtol
        self.precision = precision
        self.kind = kind
        self.time_limit = time_limit
        self.buggy = buggy
        self.bug_class = bug_class
        self.bug_shows = bug_shows
        self.points = DEFAULT_POINTS[kind] if points is None else points
        self.domain = domain
        self._failures_shown = 0  # failures ``check`` printed in this kernel: the debug ladder's step

    def __repr__(self) -> str:
        return f"<Exercise {self.title!r} ({self.kind})>"

    @property
    def number(self) -> str | None:
        """The exercise's number as written in its title (``"3"`` for ``"Exercise 3 (...)"``), if any."""
        match = re.match(r"Exercise\s+(\w+)", self.title)
        return match.group(1) if match else None

    def cases(self) -> list[Case]:
        with course_defaults():
            cases = self._cases() if callable(self._cases) else self._cases
        return [c if isinstance(c, Case) else Case(tuple(c)) for c in cases]

    def uncovered(self) -> list[str]:
        """The names of the domain's corners that no hidden case reaches (empty when every corner is covered)."""
        if self.domain is None:
            return ["(no domain declared)"]
        cases = self.cases()
        missing = []
        for corner in self.domain.corners:
            with course_defaults():
                if not any(bool(corner.reached(case)) for case in cases):
                    missing.append(corner.name)
        return missing

    # ------------------------------------------------------------ the public calls
    def evaluate(self, fn: Any) -> Result:
        """Check ``fn`` against every hidden case and return the ``Result`` (never raises)."""
        with outermost(fn) as is_outermost:
            try:
                if not is_outermost:
                    return self._evaluate(fn)
                with checking_state():
                    return self._not_own_code(fn, self._evaluate(fn))
            except Exception as err:  # defensive: the checker itself must not crash the notebook
                return self._checker_broke(err)

    evaluate._guarded = True  # type: ignore[attr-defined]

    def check(self, fn: Any) -> None:
        """Print the one-line verdict for the learner's ``fn`` (a failure moves a debug exercise up its ladder)."""
        result = self.evaluate(fn)
        print(result.line())
        log_verdict(result)
        if result.status == FAILED:
            self._failures_shown += 1

    __call__ = check

    def passes(self, fn: Any) -> bool:
        """Does ``fn`` pass? Evaluated silently (nothing printed, not logged for the grader), for a cell
        that should use the learner's function only once its check has passed."""
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return self.evaluate(fn).passed

    def forget(self) -> None:
        """Forget the failures shown so far: the debug ladder starts again from the symptom."""
        self._failures_shown = 0

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

    def _is_own_code(self, fn: Any) -> bool:
        """Is ``fn`` the reference, or any function defined in the checker modules (however it was reached)?"""
        try:
            target, reference = _unwrap(fn), _unwrap(self.reference)
            code = getattr(target, "__code__", None)
            if target is reference or (code is not None and code is getattr(reference, "__code__", None)):
                return True
            if code is not None and Path(code.co_filename).resolve().parent == _CHECKERS:
                return True
            # a learner's wrapper around the checker's code copies it; the course's own files (its tests build
            # right answers from the reference on purpose) are not judged for that
            return code is not None and not _course_file(code.co_filename) and _reaches_own_code(target)
        except Exception:  # an object we cannot inspect is the learner's own
            return False

    def _not_own_code(self, fn: Any, result: Result) -> Result:
        """A pass by the checker's own code is no pass (a mistake model fails anyway, with its hint)."""
        return self._result(FAILED, _OWN_CODE, CHECKERS_CODE) if result.passed and self._is_own_code(fn) else result

    def _expected(self, case: Case) -> Any:
        args, kwargs = _fresh(case.args, case.kwargs)
        with course_defaults():
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
                                      f"where one tensor operation would do."
                                      + (f" {self.slow_hint}" if self.slow_hint else ""), "timeout")
        record_timeout(result)
        return result

    def _run(self, fn: Callable[..., Any], cases: list[Case]) -> list[_Outcome] | Result:
        """The learner's function on every case, within the time limit (a ``Result`` when it ends early);
        each outcome records any argument the function changed (named as the submitted function names it)."""
        limit = self._effective_time_limit()
        if limit is None or not alarm_available():  # no signals here (Windows, another thread): no limit
            cpu_left = wall_left = None
        else:
            cpu_left, wall_left = cpu_budget(limit), timelimit.WALL_FACTOR * limit
        named_by = submitted() or fn
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
            outcomes[-1].changed = changed_input(named_by, (case.args, case.kwargs), (args, kwargs))
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
        changed = [o for o in outcomes if o.changed]
        if all(o.kind == "none" for o in outcomes):
            if changed:
                return self._changed_result(changed, total, returns_none=True)
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
                outcome.difference = difference(outcome.value, outcome.expected, self.atol, self.rtol,
                                                precision=self.precision)
        wrong = [o for o in outcomes if o.difference is not None and o.difference.precision is None]
        near = [o for o in outcomes if o.difference is not None and o.difference.precision is not None]
        if changed and not wrong:
            return self._changed_result(changed, total)
        if not wrong and not near:
            return self._type_result(outcomes) or self._result(PASSED, f"passed ({_plural(total, 'hidden test case')})")
        if not wrong:
            return self._precision_result(near, total)
        symptom = self._symptom(wrong, total, changed)
        reason = "error" if wrong[0].kind == "error" else "wrong"
        if self.kind == "debug":
            return self._debug_verdict(fn, outcomes, wrong, symptom, reason)
        hint = self._diagnose(outcomes)
        return self._result(FAILED, f"{symptom} {HINT_PREFIX}{hint}" if hint else symptom, reason, hint)

    def _type_result(self, outcomes: list[_Outcome]) -> Result | None:
        """Every value is right: does each result have the type the statement fixes (``returns=``)?"""
        for outcome in outcomes:
            for spec in self.returns:
                problem = spec.problem(outcome.value, outcome.case.describe(), outcome.case.args)
                if problem is not None:
                    return self._result(FAILED, f"the values are right, but {problem}", "type")
        return None

    def _symptom(self, wrong: list[_Outcome], total: int, changed: list[_Outcome]) -> str:
        """What differs, on which case, how many cases fail (and an input changed in place, if one was)."""
        first = wrong[0]
        count = f"; {len(wrong)} of {total} hidden cases fail" if len(wrong) > 1 else ""
        message = f"{first.difference.text} (on {first.case.describe()}{count})."
        if changed:
            name, what = changed[0].changed
            message += f" It also changes its input {name} in place ({what}, on {changed[0].case.describe()})."
        return message

    def _changed_result(self, changed: list[_Outcome], total: int, returns_none: bool = False) -> Result:
        name, what = changed[0].changed
        count = f"; {len(changed)} of {total} hidden cases" if len(changed) > 1 else ""
        where = f"({what}; on {changed[0].case.describe()}{count})"
        if returns_none:
            return self._result(FAILED, f"your function returns None and changed its input {name} in place {where}. "
                                        f"Return the result as a new tensor instead of writing it into an input: "
                                        f"later cells use their inputs again.", CHANGED_INPUT)
        return self._result(FAILED, f"your function changed its input {name} in place {where}. Later cells use "
                                    f"their inputs again: leave them as they are and return a new result (work on "
                                    f"a copy, e.g. x.clone(), or use an operation without the trailing _, e.g. "
                                    f"scatter rather than scatter_).", CHANGED_INPUT)

    def _debug_verdict(self, fn: Callable[..., Any], outcomes: list[_Outcome], wrong: list[_Outcome], symptom: str,
                       reason: str) -> Result:
        """The debug ladder: the symptom first (always, for the function as given, and for the first failure
        shown); the listed mistake, the partial fix or the class of bug for a changed function failing after
        that; never the fix."""
        if self.buggy is not None and all(self._explains(self.buggy, o) for o in outcomes):
            return self._result(FAILED, f"{symptom} {_UNCHANGED}", "unchanged")
        if not self._failures_shown:
            return self._result(FAILED, symptom, reason)
        hint = self._diagnose(outcomes)
        if hint:
            return self._result(FAILED, f"{symptom} {HINT_PREFIX}{hint}", reason, hint)
        if self.bug_class and self._class_shows(fn, wrong):
            return self._result(FAILED, f"{symptom} {CLUE_PREFIX}{self.bug_class}.", reason)
        return self._result(FAILED, symptom, reason)

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
                    with course_defaults():
                        shows = self.bug_shows(fn, args, outcome.value)
                    if not bool(shows):
                        return False
        except (Exception, SystemExit, CheckTimeout):  # a broken test, or the learner's code raising or
            return False                                  # running out of time inside it: no clue
        return True

    def _precision_result(self, near: list[_Outcome], total: int) -> Result:
        first = near[0].difference
        others = len(near) - 1
        count = (f"; {_plural(others, 'other case')} {'matches' if others == 1 else 'match'} only to "
                 f"{dtype_name(first.precision)} precision too") if others else ""
        return self._result(FAILED, f"{first.note()}: {first.text} (on {near[0].case.describe()}{count}). "
                                    f"{first.advice()}", "precision")

    def _explains(self, model: Callable[..., Any], outcome: _Outcome, *, must_differ: bool = False) -> bool:
        """Does ``model`` reproduce what the learner's function did on this case (the value, to a lower
        precision, or the same type of exception)? With ``must_differ``, the model must also be wrong
        there: beyond precision, it does not give the reference's answer."""
        args, kwargs = _fresh(outcome.case.args, outcome.case.kwargs)
        try:
            with course_defaults():
                produced = model(*args, **kwargs)
        except Exception as err:  # the model raising explains only the learner raising the same kind of error
            return outcome.kind == "error" and type(err) is type(outcome.error)
        if outcome.kind != "value":
            return False
        try:
            if compare(outcome.value, produced, self.atol, self.rtol, accept_lower_precision=True,
                       precision=self.precision) is not None:
                return False
            return not must_differ or compare(produced, outcome.expected, self.atol, self.rtol,
                                              accept_lower_precision=True, precision=self.precision) is not None
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
