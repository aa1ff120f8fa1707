"""The exercise-checking engine behind every ``helpers.exercises.nbNN`` checker.

An ``Exercise`` knows a reference solution, a set of hidden test cases and a
list of *plausible mistakes* (wrong implementations a learner is likely to
write, each paired with a hint). ``exercise.check(fn)`` runs the learner's
function on every hidden case and prints exactly one line:

* ``⏳ ... not attempted yet`` when ``fn`` raises ``NotImplementedError`` or returns ``None``;
* ``✅ ... passed`` when every case matches the reference within tolerance;
* ``❌ ...`` with what is wrong (type, expected vs got shape, the first wrong value
  and its index) and, when the output matches one of the known mistakes, the hint.

It never raises because of the learner's code: exceptions, wrong types, NaNs
and wrong shapes all become a message. ``exercise.evaluate(fn)`` returns the
``Result`` instead of printing it (tests use it).
"""

from __future__ import annotations

import copy
import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

NOT_ATTEMPTED = "not attempted"
PASSED = "passed"
FAILED = "failed"

ICONS = {NOT_ATTEMPTED: "⏳", PASSED: "✅", FAILED: "❌"}


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
    """Outcome of checking one exercise."""

    status: str
    message: str
    title: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def line(self) -> str:
        return f"{ICONS[self.status]} {self.title}: {self.message}"

    def __str__(self) -> str:
        return self.line()


def _describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)}" if value.dim() else f"tensor({value.item():.4g})"
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape}"
    if isinstance(value, torch.nn.Module):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _as_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    return None


def compare(got: Any, expected: Any, atol: float = 1e-5, rtol: float = 1e-4, where: str = "") -> str | None:
    """Describe how ``got`` differs from ``expected``, or return ``None`` when they agree.

    Tensors/arrays are compared by type, shape, NaNs and ``allclose``; numbers
    by tolerance (exactly for ints); sequences element by element; dicts by keys
    then values; anything else by ``==``.
    """
    label = f"{where}: " if where else ""
    if isinstance(expected, (torch.Tensor, np.ndarray)):
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
        if e.is_floating_point() and not g.is_floating_point() and not e.eq(e.round()).all():
            return f"{label}expected floating-point values, got dtype {g.dtype}"
        g = g.to(torch.float64) if g.is_floating_point() or e.is_floating_point() else g
        e = e.to(g.dtype)
        if e.is_floating_point():
            nan_g, nan_e = torch.isnan(g), torch.isnan(e)
            if (nan_g & ~nan_e).any():
                idx = tuple(int(i) for i in (nan_g & ~nan_e).nonzero()[0])
                return f"{label}got NaN at index {idx} where {_fmt(e[idx].item())} was expected"
            close = torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            close = g == e
        if not close.all():
            idx = tuple(int(i) for i in (~close).nonzero()[0])
            n_bad = int((~close).sum())
            at = f" at index {idx}" if idx else ""
            return (f"{label}{n_bad} of {close.numel()} values differ; first{at}: expected "
                    f"{_fmt(e[idx].item())}, got {_fmt(g[idx].item())}")
        return None
    if isinstance(expected, bool) or isinstance(expected, str) or expected is None:
        return None if got == expected else f"{label}expected {expected!r}, got {got!r}"
    if isinstance(expected, numbers.Number):
        if (isinstance(got, torch.Tensor) and got.numel() == 1) or (
                isinstance(got, (np.ndarray, np.generic)) and got.size == 1):
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, numbers.Number):
            return f"{label}expected a number, got {type(got).__name__}"
        if isinstance(expected, numbers.Integral):
            if isinstance(got, numbers.Integral) or (isinstance(got, float) and got.is_integer()):
                return None if int(got) == int(expected) else f"{label}expected {expected}, got {_fmt(got)}"
            return f"{label}expected the whole number {expected}, got {_fmt(got)}"
        if isinstance(got, float) and math.isnan(got):
            return f"{label}got NaN, expected {_fmt(expected)}"
        ok = math.isclose(float(got), float(expected), rel_tol=rtol, abs_tol=atol)
        return None if ok else f"{label}expected {_fmt(expected)}, got {_fmt(got)}"
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"{label}expected a dict, got {type(got).__name__}"
        if set(got) != set(expected):
            return f"{label}expected keys {sorted(map(str, expected))}, got {sorted(map(str, got))}"
        for key in expected:
            problem = compare(got[key], expected[key], atol, rtol, where=f"{where}[{key!r}]")
            if problem:
                return problem
        return None
    if isinstance(expected, Sequence):
        if not isinstance(got, Sequence) or isinstance(got, str):
            return f"{label}expected a {type(expected).__name__} of {len(expected)} items, got {type(got).__name__}"
        if len(got) != len(expected):
            return f"{label}expected {len(expected)} items, got {len(got)}"
        for i, (g_item, e_item) in enumerate(zip(got, expected)):
            problem = compare(g_item, e_item, atol, rtol, where=f"{where}[{i}]")
            if problem:
                return problem
        return None
    return None if got == expected else f"{label}expected {expected!r}, got {got!r}"


def _fresh(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Deep copies, so a function that edits its inputs in place cannot spoil the next call."""
    return copy.deepcopy(args), copy.deepcopy(kwargs)


class Exercise:
    """A checkable exercise.

    Args:
        title: shown at the start of the result line, e.g. ``"Exercise 1 (exact GELU)"``.
        reference: the correct function.
        cases: the hidden inputs, or a function returning them (built lazily, seeded).
        mistakes: ``(hint, wrong_function)`` pairs; when the learner's output matches
            ``wrong_function``'s on a failing case, ``hint`` is shown.
        atol, rtol: tolerances for floating-point comparison.
    """

    def __init__(self, title: str, reference: Callable[..., Any], cases: Sequence[Case] | Callable[[], Sequence[Case]],
                 mistakes: Sequence[tuple[str, Callable[..., Any]]] = (), *, atol: float = 1e-5,
                 rtol: float = 1e-4) -> None:
        self.title = title
        self.reference = reference
        self._cases = cases
        self.mistakes = list(mistakes)
        self.atol = atol
        self.rtol = rtol

    def cases(self) -> list[Case]:
        cases = self._cases() if callable(self._cases) else self._cases
        return [c if isinstance(c, Case) else Case(tuple(c)) for c in cases]

    def _result(self, status: str, message: str) -> Result:
        return Result(status, message, self.title)

    def _diagnose(self, got: Any, case: Case) -> str | None:
        for hint, wrong in self.mistakes:
            try:
                args, kwargs = _fresh(case.args, case.kwargs)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    wrong_out = wrong(*args, **kwargs)
                if compare(got, wrong_out, self.atol, self.rtol) is None:
                    return hint
            except Exception:  # a broken mistake model must never hide the learner's result
                continue
        return None

    def evaluate(self, fn: Any) -> Result:
        """Check ``fn`` against every hidden case and return the ``Result`` (never raises)."""
        try:
            return self._evaluate(fn)
        except Exception as err:  # defensive: the checker itself must not crash the notebook
            return self._result(FAILED, f"the checker could not compare your answer ({type(err).__name__}: {err})")

    def _evaluate(self, fn: Any) -> Result:
        if not callable(fn):
            return self._result(FAILED, f"pass your function itself (e.g. check(my_fn)), got a {type(fn).__name__}")
        cases = self.cases()
        for case in cases:
            args, kwargs = _fresh(case.args, case.kwargs)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = fn(*args, **kwargs)
            except NotImplementedError:
                return self._result(NOT_ATTEMPTED, "not attempted yet (replace `raise NotImplementedError` "
                                                   "with your code, then run this cell again)")
            except Exception as err:
                return self._result(FAILED, f"your function raised {type(err).__name__}: {err} "
                                            f"(on {case.describe()})")
            if got is None:
                return self._result(NOT_ATTEMPTED, "not attempted yet (your function returns None: "
                                                   "fill in the body and `return` the result)")
            args, kwargs = _fresh(case.args, case.kwargs)
            expected = self.reference(*args, **kwargs)
            problem = compare(got, expected, self.atol, self.rtol)
            if problem:
                hint = self._diagnose(got, case)
                message = f"{problem} (on {case.describe()})."
                if hint:
                    message += f" Likely mistake: {hint}"
                return self._result(FAILED, message)
        return self._result(PASSED, f"passed ({len(cases)} hidden test case{'s' if len(cases) != 1 else ''})")

    def check(self, fn: Any) -> None:
        """Print the one-line verdict for the learner's ``fn``."""
        print(self.evaluate(fn).line())

    __call__ = check
