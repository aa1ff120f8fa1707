"""The exercise-checking engine behind every ``helpers.exercises.nbNN`` checker.

An ``Exercise`` knows a reference solution, a set of hidden test cases and a
list of *plausible mistakes* (wrong implementations a learner is likely to
write, each paired with a hint). ``exercise.check(fn)`` runs the learner's
function on every hidden case and prints exactly one line,
``<icon> <title>: <message>`` (``parse_line`` reads it back; the grader does):

* ``⏳ ... not attempted yet`` when ``fn`` raises ``NotImplementedError`` on the first
  case, or returns ``None`` on every case (a blank stub);
* ``✅ ... passed (N hidden test cases)`` when every case matches the reference;
* ``❌ ...`` with what is wrong: type, expected vs got shape, the first wrong value
  and its index (with enough digits to see the difference, integers exactly),
  the dtype when it is the cause, how many cases fail; an *incomplete* function
  (``None`` on some inputs only); a function stopped by the time limit. When one
  listed mistake reproduces the learner's output on *every* failing case, its hint
  follows ("Likely mistake: ...").

Guarantees, whatever state the learner's kernel is in:

* it never raises because of the learner's code (exceptions, wrong types, NaNs,
  wrong shapes all become a message); a ``KeyboardInterrupt`` still interrupts;
* the reference, the mistake models and the learner's function run with autograd
  enabled (``torch.enable_grad``, outside inference mode), so a
  ``torch.set_grad_enabled(False)`` earlier in the notebook changes nothing;
* the hidden cases, the reference and the mistakes run with float32 as torch's
  default dtype; the global random generators (torch, NumPy, ``random``) are
  left as they were, so checking never shifts the numbers later cells print;
* the learner's calls share a time limit per check (``time_limit``, default
  ``DEFAULT_TIME_LIMIT`` seconds of computing time, or the environment variable
  ``FFN_CHECK_TIMEOUT``; ``0`` means none). It counts the process's CPU time, per
  torch thread, so a busy machine does not make a correct answer "too slow", and a
  function that sleeps or waits is stopped after ``WALL_FACTOR`` times the limit in
  wall time. It is enforced with ``SIGPROF``/``SIGALRM`` timers in the main thread on
  Linux and macOS (Jupyter, Colab); elsewhere (Windows, other threads) there is no
  limit. A torch operation is not interrupted midway: the stop comes when it returns.

Tolerances follow the dtype the task works in: unless an exercise sets ``atol`` and
``rtol``, a float64 reference is compared tightly and a float32 one loosely
(``DTYPE_TOLERANCES``); integer and boolean results are compared exactly.

``exercise.evaluate(fn)`` returns the ``Result`` instead of printing it (tests use it).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import numbers
import os
import random
import re
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

NOT_ATTEMPTED = "not attempted"
PASSED = "passed"
FAILED = "failed"

ICONS = {NOT_ATTEMPTED: "⏳", PASSED: "✅", FAILED: "❌"}
STATUS_OF_ICON = {icon: status for status, icon in ICONS.items()}

#: The kinds of exercise: implement what the notebook showed, think (predict, measure, extend), or find and
#: fix one bug of a kind reported in real code (notebook 08).
KINDS = ("build", "investigate", "debug")

#: Seconds the learner's function may run in total per check, unless the exercise or ``FFN_CHECK_TIMEOUT`` says.
DEFAULT_TIME_LIMIT = 10.0
TIME_LIMIT_ENV = "FFN_CHECK_TIMEOUT"
#: When set (the grader sets it), ``check`` appends each verdict as a JSON line to this file.
VERDICT_LOG_ENV = "FFN_VERDICT_LOG"

#: ``(atol, rtol)`` by the dtype of the reference's result, for exercises that set no tolerance.
#: Python floats get the float32 pair (their task dtype is unknown); integers and booleans are exact.
DTYPE_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-9, 1e-8),
    torch.float32: (1e-5, 1e-4),
    torch.float16: (1e-3, 1e-2),
    torch.bfloat16: (1e-2, 2e-2),
}
_PRECISION = {torch.float64: 3, torch.float32: 2, torch.float16: 1, torch.bfloat16: 0}

#: One verdict line: icon, title (``Exercise N (...)`` in the course; it never contains ": "), message.
LINE_RE = re.compile(r"^(?P<icon>[⏳✅❌]) (?P<title>.+?): (?P<message>.*)$")
HINT_PREFIX = "Likely mistake: "
_MAX_ERROR_TEXT = 300


def parse_line(line: str) -> tuple[str, str, str] | None:
    """``(status, title, message)`` of a verdict line printed by ``check``, or ``None`` for any other text."""
    match = LINE_RE.match(line.strip("\r\n"))
    if match is None:
        return None
    return STATUS_OF_ICON[match["icon"]], match["title"], match["message"]


def _one_line(text: str) -> str:
    """Newlines and runs of whitespace collapsed, so a verdict is always exactly one line."""
    return " ".join(str(text).split())


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
        parts = [_describe_value(a) for a in self.args]
        parts += [f"{k}={_describe_value(v)}" for k, v in self.kwargs.items()]
        return "input " + ", ".join(parts) if parts else "no input"


@dataclass
class Result:
    """Outcome of checking one exercise.

    ``reason`` says why a check failed, for programs (``""`` when it passed or was not
    attempted): ``"wrong"``, ``"error"`` (the function raised), ``"incomplete"``,
    ``"timeout"``, ``"not callable"`` or ``"checker"`` (the checker itself broke).
    ``hint`` is the likely mistake, when one explains every failing case.
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
        return _one_line(f"{ICONS[self.status]} {self.title}: {self.message}")

    def __str__(self) -> str:
        return self.line()


# ---------------------------------------------------------------- describing and comparing values
def _describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)}" if value.dim() else f"tensor({value.item():.4g})"
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape}"
    if isinstance(value, torch.nn.Module):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _fmt(value: Any) -> str:
    """A number as a learner reads it: integers exactly, floats to 6 significant digits."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return f"{float(value):.6g}"


def _fmt_pair(expected: Any, got: Any) -> tuple[str, str]:
    """``expected`` and ``got`` printed with just enough digits to tell them apart (integers exactly)."""
    integral = [isinstance(v, numbers.Integral) for v in (expected, got)]
    if any(integral):  # an integer exactly; a float beside it in full (4723456.4, never 4.72346e+06)
        return tuple(_fmt(v) if is_int else repr(float(v)) for v, is_int in zip((expected, got), integral))
    e, g = float(expected), float(got)
    for digits in range(6, 18):
        a, b = f"{e:.{digits}g}", f"{g:.{digits}g}"
        if a != b:
            return a, b
    return repr(e), repr(g)


def _as_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, np.ndarray):
        try:
            return torch.from_numpy(value)
        except TypeError:  # object or string arrays
            return None
    return None


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _float_dtype_of(value: Any) -> torch.dtype | None:
    """The floating dtype a scalar or tensor result carries (``None`` for Python numbers and ints)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.dtype
    if isinstance(value, (np.ndarray, np.generic)) and np.issubdtype(value.dtype, np.floating):
        return {np.dtype(np.float64): torch.float64, np.dtype(np.float32): torch.float32,
                np.dtype(np.float16): torch.float16}.get(value.dtype)
    return None


def _tolerance(dtype: torch.dtype | None, atol: float | None, rtol: float | None) -> tuple[float, float]:
    default_atol, default_rtol = DTYPE_TOLERANCES.get(dtype, DTYPE_TOLERANCES[torch.float32])
    return (default_atol if atol is None else atol), (default_rtol if rtol is None else rtol)


def _lower_precision(got_dtype: torch.dtype | None, task_dtype: torch.dtype | None) -> bool:
    return (got_dtype in _PRECISION and task_dtype in _PRECISION
            and _PRECISION[got_dtype] < _PRECISION[task_dtype])


def _dtype_note(got_dtype: torch.dtype, task_dtype: torch.dtype) -> str:
    return (f"your result is {_dtype_name(got_dtype)}; this exercise works in {_dtype_name(task_dtype)}, and "
            f"the values agree only to {_dtype_name(got_dtype)} precision. Keep every step in "
            f"{_dtype_name(task_dtype)} (a tensor made without dtype= is float32)")


def compare(got: Any, expected: Any, atol: float | None = None, rtol: float | None = None, where: str = "",
            *, accept_lower_precision: bool = False) -> str | None:
    """Describe how ``got`` differs from ``expected``, or return ``None`` when they agree.

    Tensors/arrays are compared by type, shape, NaNs and ``isclose`` (integer and bool
    tensors exactly); numbers by tolerance (integers exactly; a float that is a whole
    number is accepted for an int); sequences element by element; dicts by keys then
    values; anything else by ``==``.

    ``atol``/``rtol`` ``None`` means "by the expected dtype" (``DTYPE_TOLERANCES``). A
    floating result of lower precision than the expected one (float32 for float64) that
    agrees only at its own dtype's tolerance is reported as a dtype problem, or accepted
    when ``accept_lower_precision`` (used to match mistake models).
    """
    label = f"{where}: " if where else ""
    if isinstance(expected, (torch.Tensor, np.ndarray)):
        return _compare_arrays(got, expected, atol, rtol, label, accept_lower_precision)
    if isinstance(expected, (bool, np.bool_)) or isinstance(expected, str) or expected is None:
        return None if got == expected else f"{label}expected {expected!r}, got {got!r}"
    if isinstance(expected, numbers.Number):
        return _compare_numbers(got, expected, atol, rtol, label, accept_lower_precision)
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"{label}expected a dict, got {type(got).__name__}"
        if set(got) != set(expected):
            return f"{label}expected keys {sorted(map(str, expected))}, got {sorted(map(str, got))}"
        for key in expected:
            problem = compare(got[key], expected[key], atol, rtol, where=f"{where}[{key!r}]",
                              accept_lower_precision=accept_lower_precision)
            if problem:
                return problem
        return None
    if isinstance(expected, Sequence):
        if not isinstance(got, Sequence) or isinstance(got, str):
            return f"{label}expected a {type(expected).__name__} of {len(expected)} items, got {type(got).__name__}"
        if len(got) != len(expected):
            return f"{label}expected {len(expected)} items, got {len(got)}"
        for i, (g_item, e_item) in enumerate(zip(got, expected)):
            problem = compare(g_item, e_item, atol, rtol, where=f"{where}[{i}]",
                              accept_lower_precision=accept_lower_precision)
            if problem:
                return problem
        return None
    return None if got == expected else f"{label}expected {expected!r}, got {got!r}"


def _compare_arrays(got: Any, expected: Any, atol: float | None, rtol: float | None, label: str,
                    accept_lower_precision: bool) -> str | None:
    kind = "a torch tensor" if isinstance(expected, torch.Tensor) else "a NumPy array"
    g = _as_tensor(got)
    if g is None or isinstance(got, torch.Tensor) != isinstance(expected, torch.Tensor):
        return f"{label}expected {kind}, got {type(got).__name__}"
    e = _as_tensor(expected)
    if tuple(g.shape) != tuple(e.shape):
        msg = f"{label}expected shape {tuple(e.shape)}, got {tuple(g.shape)}"
        if g.dim() == 2 and tuple(g.shape) == tuple(e.shape)[::-1]:
            msg += " (transposed?)"
        return msg
    if g.is_complex() or e.is_complex():
        return None if torch.equal(g, e) else f"{label}expected {e}, got {g}"
    exact = not e.is_floating_point()  # integer and bool results: counts, indices, masks
    if e.is_floating_point() and not g.is_floating_point() and not e.eq(e.round()).all():
        return f"{label}expected floating-point values, got dtype {g.dtype}"
    if exact:
        if g.is_floating_point() and not torch.isfinite(g).all():
            bad = ~torch.isfinite(g)
        else:
            common = torch.float64 if g.is_floating_point() else torch.int64
            bad = g.to(common) != e.to(common)
        if not bad.any():
            return None
        return _first_difference(label, bad, e, g, "")
    task = e.dtype
    t_atol, t_rtol = _tolerance(task, atol, rtol)
    g64, e64 = g.to(torch.float64), e.to(torch.float64)
    nan_g, nan_e = torch.isnan(g64), torch.isnan(e64)
    if (nan_g & ~nan_e).any():
        idx = tuple(int(i) for i in (nan_g & ~nan_e).nonzero()[0])
        return f"{label}got NaN at index {idx} where {_fmt(e[idx].item())} was expected"
    close = torch.isclose(g64, e64, rtol=t_rtol, atol=t_atol, equal_nan=True)
    if close.all():
        return None
    got_dtype = g.dtype if g.is_floating_point() else None
    if _lower_precision(got_dtype, task):
        l_atol, l_rtol = _tolerance(got_dtype, None, None)
        loosely = torch.isclose(g64, e64, rtol=max(t_rtol, l_rtol), atol=max(t_atol, l_atol), equal_nan=True)
        if loosely.all():
            if accept_lower_precision:
                return None
            return _first_difference(label, ~close, e, g, "", prefix=_dtype_note(got_dtype, task) + ": ")
        return _first_difference(label, ~close, e, g,
                                 f" (your result is {_dtype_name(got_dtype)}; this exercise works in "
                                 f"{_dtype_name(task)})")
    return _first_difference(label, ~close, e, g, "")


def _first_difference(label: str, bad: torch.Tensor, e: torch.Tensor, g: torch.Tensor, suffix: str,
                      prefix: str = "") -> str:
    idx = tuple(int(i) for i in bad.nonzero()[0])
    n_bad = int(bad.sum())
    at = f" at index {idx}" if idx else ""
    expected_text, got_text = _fmt_pair(e[idx].item(), g[idx].item())
    if bad.numel() == 1:
        return f"{label}{prefix}expected {expected_text}, got {got_text}{suffix}"
    return (f"{label}{prefix}{n_bad} of {bad.numel()} values differ; first{at}: expected {expected_text}, "
            f"got {got_text}{suffix}")


def _compare_numbers(got: Any, expected: numbers.Number, atol: float | None, rtol: float | None, label: str,
                     accept_lower_precision: bool) -> str | None:
    got_dtype = _float_dtype_of(got)
    if (isinstance(got, torch.Tensor) and got.numel() == 1) or (
            isinstance(got, (np.ndarray, np.generic)) and got.size == 1):
        got = got.item()
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, numbers.Number):
        return f"{label}expected a number, got {type(got).__name__}"
    if isinstance(expected, numbers.Integral):
        if isinstance(got, numbers.Integral):
            return None if int(got) == int(expected) else f"{label}expected {int(expected)}, got {int(got)}"
        if isinstance(got, float) and got.is_integer():
            return None if int(got) == int(expected) else f"{label}expected {int(expected)}, got {got!r}"
        return f"{label}expected the whole number {int(expected)}, got {got!r}"
    if isinstance(got, complex) or isinstance(expected, complex):
        return None if got == expected else f"{label}expected {expected}, got {got}"
    got, expected = float(got), float(expected)
    if math.isnan(got) and not math.isnan(expected):
        return f"{label}got NaN, expected {_fmt(expected)}"
    t_atol, t_rtol = _tolerance(None, atol, rtol)
    if math.isclose(got, expected, rel_tol=t_rtol, abs_tol=t_atol) or (math.isnan(got) and math.isnan(expected)):
        return None
    expected_text, got_text = _fmt_pair(expected, got)
    if got_dtype is not None and _lower_precision(got_dtype, torch.float64):
        l_atol, l_rtol = _tolerance(got_dtype, None, None)
        if math.isclose(got, expected, rel_tol=max(t_rtol, l_rtol), abs_tol=max(t_atol, l_atol)):
            if accept_lower_precision:
                return None
            return (f"{label}your result is a {_dtype_name(got_dtype)} number; this exercise works in float64 "
                    f"(Python floats), and the value agrees only to {_dtype_name(got_dtype)} precision: expected "
                    f"{expected_text}, got {got_text}. Keep every step in float64")
    return f"{label}expected {expected_text}, got {got_text}"


# ---------------------------------------------------------------- the state a check runs in
class CheckTimeout(BaseException):
    """Raised inside the learner's code when the time limit is up.

    A ``BaseException`` (like ``KeyboardInterrupt``), so a learner's ``except Exception``
    cannot swallow it; while the limit is exceeded it is raised again every few
    hundredths of a second until the learner's code has been left.
    """


def _alarm_available() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


#: How much longer than the computing-time limit a function may take in wall time (sleeping, waiting).
WALL_FACTOR = 3.0


def _cpu_budget(limit: float) -> float:
    """Process CPU seconds allowed: the limit for each thread torch computes with (a parallel op adds up)."""
    return limit * max(1, torch.get_num_threads())


class _TimeLimit:
    """Context manager: raise ``CheckTimeout`` in this (main) thread once the code inside has used
    ``cpu_seconds`` of process CPU time (``ITIMER_PROF``/``SIGPROF``: a busy machine does not count
    against the learner) or ``wall_seconds`` of wall time (``ITIMER_REAL``/``SIGALRM``: a function that
    sleeps or waits). Restores the previous handlers and what was left of previous timers. Does
    nothing when a limit is ``None``/``<= 0`` or when signals cannot be used here.
    """

    _REPEAT = 0.05
    _TIMERS = (("cpu", "ITIMER_PROF", "SIGPROF"), ("wall", "ITIMER_REAL", "SIGALRM"))

    def __init__(self, cpu_seconds: float | None, wall_seconds: float | None = None) -> None:
        wanted = {"cpu": cpu_seconds, "wall": wall_seconds}
        self.timers = [(name, getattr(signal, timer), getattr(signal, signum), wanted[name])
                       for name, timer, signum in self._TIMERS
                       if wanted[name] and wanted[name] > 0 and hasattr(signal, timer) and hasattr(signal, signum)]
        self.active = bool(self.timers) and _alarm_available()
        self._armed = False
        self.fired: str | None = None  # "cpu" or "wall": which limit ended the code
        self._previous: list[tuple[Any, tuple[float, float]]] = []
        self._started = self._started_cpu = 0.0

    def _on_alarm(self, signum: int, frame: Any) -> None:
        # never inside our own clean-up (it would leave the alarm armed); the alarm repeats until disarmed
        if self._armed and (frame is None or frame.f_code not in _CLEANUP_CODE):
            self.fired = "cpu" if signum == getattr(signal, "SIGPROF", None) else "wall"
            raise CheckTimeout

    def __enter__(self) -> _TimeLimit:
        if not self.active:
            return self
        self._started, self._started_cpu = time.monotonic(), time.process_time()
        self._armed = True
        try:
            for _, timer, signum, seconds in self.timers:
                handler = signal.signal(signum, self._on_alarm)
                previous_timer = signal.setitimer(timer, max(seconds, 1e-3), self._REPEAT)
                self._previous.append((handler, previous_timer))
                if 0 < previous_timer[0] < seconds:  # an earlier timer is due sooner: not ours to delay
                    signal.setitimer(timer, max(previous_timer[0], 1e-3), self._REPEAT)
        except CheckTimeout:
            self._restore()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.active:
            self._restore()

    def _restore(self) -> None:
        while True:  # an alarm landing in here is swallowed and the restore retried: never leave it armed
            try:
                self._armed = False
                for (_, timer, signum, _), (previous, (left, interval)) in zip(self.timers, self._previous):
                    signal.setitimer(timer, 0)
                    signal.signal(signum, signal.SIG_DFL if previous is None else previous)
                    if left > 0:
                        left -= (time.monotonic() - self._started if timer == signal.ITIMER_REAL
                                 else time.process_time() - self._started_cpu)
                        if self.fired and isinstance(getattr(previous, "__self__", None), _TimeLimit):
                            left = 0  # an enclosing check's limit: a timeout here ends that whole check
                        signal.setitimer(timer, max(left, 1e-3), interval)
                self._previous = []
                return
            except CheckTimeout:
                continue


_CLEANUP_CODE = (_TimeLimit.__exit__.__code__, _TimeLimit._restore.__code__)


def _time_limit_from_env() -> float | None:
    text = os.environ.get(TIME_LIMIT_ENV, "").strip().lower()
    if not text:
        return DEFAULT_TIME_LIMIT
    if text in {"0", "none", "off", "no"}:
        return None
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_TIME_LIMIT
    return value if value > 0 else None


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
    """Wrap a subclass's own ``evaluate``: the checking state, a time limit and "never raises" cover all of it."""

    @functools.wraps(method)
    def evaluate(self: Exercise, fn: Any, *args: Any, **kwargs: Any) -> Result:
        with _outermost() as outermost:
            if not outermost:
                return method(self, fn, *args, **kwargs)
            limit = self._effective_time_limit()
            try:
                cpu, wall = (_cpu_budget(3 * limit), WALL_FACTOR * 3 * limit) if limit else (None, None)
                guard = _TimeLimit(cpu, wall)
                with _checking_state(), guard:
                    return method(self, fn, *args, **kwargs)
            except CheckTimeout:
                return getattr(_depth, "timeout", None) or self._timeout_result(limit, which=guard.fired)
            except Exception as err:  # the checker itself must not crash the notebook
                return self._result(FAILED, f"the checker could not compare your answer "
                                            f"({type(err).__name__}: {err})", "checker")

    evaluate._guarded = True  # type: ignore[attr-defined]
    return evaluate


# ---------------------------------------------------------------- the exercise
def _fresh(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Deep copies, so a function that edits its inputs in place cannot spoil the next call."""
    return copy.deepcopy(args), copy.deepcopy(kwargs)


def _error_text(err: BaseException) -> str:
    text = _one_line(f"{type(err).__name__}: {err}" if str(err) else type(err).__name__)
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT - 3] + "..."


@dataclass
class _Outcome:
    """What the learner's function did on one case."""

    case: Case
    kind: str  # "value", "none", "not implemented", "error"
    value: Any = None
    error: BaseException | None = None


class Exercise:
    """A checkable exercise.

    Args:
        title: shown at the start of the result line; in the course always ``"Exercise N (short name)"``
            (no ": " inside, so the line parses back).
        reference: the correct function.
        cases: the hidden inputs, or a function returning them (built lazily, seeded).
        mistakes: ``(hint, wrong_function)`` pairs; ``hint`` is shown when ``wrong_function``
            reproduces the learner's output on every case the learner gets wrong.
        atol, rtol: tolerances for floating-point results; ``None`` (default) follows the
            reference's dtype (``DTYPE_TOLERANCES``: float64 tight, float32 looser).
        kind: ``"build"`` (implement what the notebook showed), ``"investigate"`` or ``"debug"`` (fix a real-code bug).
        time_limit: seconds the learner's function may run in total over the hidden cases;
            ``None`` takes ``FFN_CHECK_TIMEOUT`` or ``DEFAULT_TIME_LIMIT``; ``0`` means no limit.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("evaluate")
        if own is not None and not getattr(own, "_guarded", False):
            cls.evaluate = _guard_evaluate(own)

    def __init__(self, title: str, reference: Callable[..., Any], cases: Sequence[Case] | Callable[[], Sequence[Case]],
                 mistakes: Sequence[tuple[str, Callable[..., Any]]] = (), *, atol: float | None = None,
                 rtol: float | None = None, kind: str = "build", time_limit: float | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if time_limit is not None and not (isinstance(time_limit, numbers.Real) and time_limit >= 0):
            raise ValueError(f"time_limit must be a number of seconds >= 0 or None, got {time_limit!r}")
        self.title = title
        self.reference = reference
        self._cases = cases
        self.mistakes = list(mistakes)
        self.atol = atol
        self.rtol = rtol
        self.kind = kind
        self.time_limit = time_limit

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

    def _effective_time_limit(self) -> float | None:
        if self.time_limit is not None:
            return self.time_limit if self.time_limit > 0 else None
        return _time_limit_from_env()

    def _result(self, status: str, message: str, reason: str = "", hint: str | None = None) -> Result:
        return Result(status, message, self.title, reason, hint)

    def _expected(self, case: Case) -> Any:
        args, kwargs = _fresh(case.args, case.kwargs)
        with _course_defaults():
            return self.reference(*args, **kwargs)

    def _explains(self, wrong: Callable[..., Any], outcome: _Outcome) -> bool:
        """Does the mistake model reproduce the learner's output (or the learner's kind of exception) here?"""
        args, kwargs = _fresh(outcome.case.args, outcome.case.kwargs)
        try:
            with _course_defaults():
                wrong_out = wrong(*args, **kwargs)
        except Exception as err:  # the model raising explains only the learner raising the same kind of error
            return outcome.kind == "error" and type(err) is type(outcome.error)
        if outcome.kind != "value":
            return False
        try:
            return compare(outcome.value, wrong_out, self.atol, self.rtol, accept_lower_precision=True) is None
        except Exception:  # a broken mistake model must never hide the learner's result
            return False

    def _diagnose(self, failing: list[_Outcome]) -> str | None:
        """The hint of the first listed mistake that reproduces the learner's output on every failing case.

        An exception counts as reproduced when the mistake model raises the same type on that case
        (a transposed weight fails on the non-square cases); at least one failing case must be a value.
        """
        if not any(o.kind == "value" for o in failing):
            return None
        for hint, wrong in self.mistakes:
            if all(self._explains(wrong, outcome) for outcome in failing):
                return hint
        return None

    def _timeout_result(self, limit: float | None, case: Case | None = None, done: int = 0, total: int = 0,
                        which: str | None = "cpu") -> Result:
        seconds = f"{limit:g} s" if limit else "the time limit"
        if which == "wall" and limit:
            took = (f"ran for more than {WALL_FACTOR * limit:g} s of wall time (waiting, or on a busy machine; "
                    f"the limit is {seconds} of computing time)")
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

    def evaluate(self, fn: Any) -> Result:
        """Check ``fn`` against every hidden case and return the ``Result`` (never raises)."""
        with _outermost() as outermost:
            try:
                if not outermost:
                    return self._evaluate(fn)
                with _checking_state():
                    return self._evaluate(fn)
            except Exception as err:  # defensive: the checker itself must not crash the notebook
                return self._result(FAILED, f"the checker could not compare your answer "
                                            f"({type(err).__name__}: {err})", "checker")

    evaluate._guarded = True  # type: ignore[attr-defined]

    def _run(self, fn: Callable[..., Any], cases: list[Case]) -> list[_Outcome] | Result:
        """The learner's function on every case, within the time limit (a ``Result`` when it ends early)."""
        limit = self._effective_time_limit()
        if limit is None or not _alarm_available():  # no signals here (Windows, another thread): no limit
            cpu_left = wall_left = None
        else:
            cpu_left, wall_left = _cpu_budget(limit), WALL_FACTOR * limit
        outcomes: list[_Outcome] = []
        for i, case in enumerate(cases):
            args, kwargs = _fresh(case.args, case.kwargs)
            if cpu_left is not None and (cpu_left <= 0 or wall_left <= 0):
                return self._timeout_result(limit, case, i, len(cases), "cpu" if cpu_left <= 0 else "wall")
            started, started_cpu = time.monotonic(), time.process_time()
            guard = _TimeLimit(cpu_left, wall_left)
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
            what = ("returned None" if first.kind == "none" else "raised NotImplementedError")
            return self._result(FAILED, f"incomplete: your function {what} on {first.case.describe()} "
                                        f"({len(missing)} of {total} hidden cases), but a result on the others. "
                                        f"Every input needs a result: is a branch missing its `return`?",
                                "incomplete")
        failing: list[_Outcome] = []
        first_problem = ""
        for outcome in outcomes:
            if outcome.kind == "error":
                problem = f"your function raised {_error_text(outcome.error)}"
            else:
                problem = compare(outcome.value, self._expected(outcome.case), self.atol, self.rtol)
            if problem:
                failing.append(outcome)
                if not first_problem:
                    first_problem = f"{problem} (on {failing[0].case.describe()}"
        if not failing:
            return self._result(PASSED, f"passed ({total} hidden test case{'s' if total != 1 else ''})")
        count = f"; {len(failing)} of {total} hidden cases fail" if len(failing) > 1 else ""
        message = f"{first_problem}{count})."
        hint = self._diagnose(failing)
        if hint:
            message += f" {HINT_PREFIX}{hint}"
        reason = "error" if failing[0].kind == "error" else "wrong"
        return self._result(FAILED, message, reason, hint)

    def check(self, fn: Any) -> None:
        """Print the one-line verdict for the learner's ``fn``."""
        result = self.evaluate(fn)
        print(result.line())
        _log_verdict(result)

    __call__ = check


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
