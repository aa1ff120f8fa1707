"""Comparing a learner's answer with the reference's, and saying in one line how they differ.

``compare(got, expected)`` returns ``None`` when the two agree and otherwise a sentence a
learner can act on: the type or shape that is wrong, or the first value that differs, its
index, and just enough digits to see the gap (integers exactly, never ``4.72346e+06``).

Agreement depends on what is compared:

* floating-point values agree within a tolerance that follows the task's dtype (the
  reference result's): tight for float64, looser for float32 (``DTYPE_TOLERANCES``),
  unless an exercise sets ``atol``/``rtol``;
* integers and booleans (counts, indices, masks) agree only exactly; a float that is a
  whole number is accepted for an int (an exercise whose statement fixes the type
  declares it: ``Exercise(returns=...)``);
* sequences and dicts agree item by item.

**Precision.** A gap that a lower precision explains is told apart from a wrong answer:
when the values agree to float32's *relative* precision (every gap within float32's
``rtol`` times the largest expected magnitude, on values float32 can carry) but the task
wants float64 (whatever the dtype of the learner's result: it may have been computed in
float32 and converted back), the sentence says so ("your result matches only to float32
precision; this exercise wants float64") instead of reporting a plain wrong value. The test
is relative on purpose: on values scaled by 1e-30 every answer is within float32's absolute
tolerance, and a gap there says nothing about precision. float16 and bfloat16 are named only
when the result has that dtype. The task's precision is the reference result's dtype, or the
exercise's ``precision=`` where its statement allows a lower one (float32 steps on float64
inputs): an answer is then never told to use more. ``difference`` returns this verdict as a
``Difference`` for the engine, which needs to know whether a gap is one of precision.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

#: ``(atol, rtol)`` by the dtype of the reference's result, for exercises that set no tolerance.
#: Python floats get the float32 pair (their task dtype is unknown); integers and booleans are exact.
DTYPE_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-9, 1e-8),
    torch.float32: (1e-5, 1e-4),
    torch.float16: (1e-3, 1e-2),
    torch.bfloat16: (1e-2, 2e-2),
}
_PRECISION = {torch.float64: 3, torch.float32: 2, torch.float16: 1, torch.bfloat16: 0}


def one_line(text: Any) -> str:
    """Newlines and runs of whitespace collapsed, so a verdict is always exactly one line."""
    return " ".join(str(text).split())


def describe_value(value: Any) -> str:
    """A short description of an input, e.g. ``tensor of shape (3, 5)``."""
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)}" if value.dim() else f"tensor({value.item():.4g})"
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape}"
    if isinstance(value, torch.nn.Module):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def fmt(value: Any) -> str:
    """A number as a learner reads it: integers exactly, floats to 6 significant digits."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return f"{float(value):.6g}"


def fmt_pair(expected: Any, got: Any) -> tuple[str, str]:
    """``expected`` and ``got`` printed with just enough digits to tell them apart (integers exactly)."""
    integral = [isinstance(v, numbers.Integral) for v in (expected, got)]
    if any(integral):  # an integer exactly; a float beside it in full (4723456.4, never 4.72346e+06)
        return tuple(fmt(v) if is_int else repr(float(v)) for v, is_int in zip((expected, got), integral))
    e, g = float(expected), float(got)
    for digits in range(6, 18):
        a, b = f"{e:.{digits}g}", f"{g:.{digits}g}"
        if a != b:
            return a, b
    return repr(e), repr(g)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass
class Difference:
    """How an answer differs from the expected one.

    ``text`` says what differs (``"expected 3, got 4"``). ``precision`` is set when the whole
    gap is what a lower floating precision explains: the values agree at that dtype's
    tolerance (``wanted`` is the dtype the task works in, ``got_dtype`` the result's).
    """

    text: str
    precision: torch.dtype | None = None
    wanted: torch.dtype | None = None
    got_dtype: torch.dtype | None = None

    def wanted_name(self) -> str:
        return dtype_name(self.wanted) if self.wanted is not None else "float64"

    def note(self) -> str:
        """``your result matches only to float32 precision; this exercise wants float64``."""
        if self.precision is None:
            return ""
        what = "result" if self.got_dtype is None or self.got_dtype != self.precision else \
            f"result is {dtype_name(self.got_dtype)} and"
        return (f"your {what} matches only to {dtype_name(self.precision)} precision; "
                f"this exercise wants {self.wanted_name()}")

    def advice(self) -> str:
        """What to do about a precision gap (empty for any other difference)."""
        if self.precision is None:
            return ""
        if self.precision == torch.float32:
            return (f"Keep every step in {self.wanted_name()}: a tensor made without dtype= (torch.tensor([...]), "
                    f"torch.zeros(n)) is float32, and .float() converts to float32.")
        return f"Keep every step in {self.wanted_name()}, without converting to {dtype_name(self.precision)}."

    def describe(self) -> str:
        """The full sentence ``compare`` returns."""
        if self.precision is None:
            return self.text
        return f"{self.note()}: {self.text}. {self.advice()}"


def compare(got: Any, expected: Any, atol: float | None = None, rtol: float | None = None, where: str = "",
            *, accept_lower_precision: bool = False, precision: torch.dtype | None = None) -> str | None:
    """Describe how ``got`` differs from ``expected``, or return ``None`` when they agree.

    Tensors/arrays are compared by type, shape, NaNs and ``isclose`` (integer and bool
    tensors exactly); numbers by tolerance (integers exactly); sequences element by
    element; dicts by keys then values; anything else by ``==``. ``atol``/``rtol``
    ``None`` means "by the expected dtype" (``DTYPE_TOLERANCES``), or by ``precision`` when
    the task allows a lower one than the expected result's dtype. A gap that only a lower
    precision explains is reported as such, or accepted when ``accept_lower_precision``
    (used to match mistake models).
    """
    found = difference(got, expected, atol, rtol, where, precision=precision)
    if found is None or (accept_lower_precision and found.precision is not None):
        return None
    return found.describe()


def difference(got: Any, expected: Any, atol: float | None = None, rtol: float | None = None,
               where: str = "", *, precision: torch.dtype | None = None) -> Difference | None:
    """``compare``'s verdict as a ``Difference`` (``None`` when ``got`` agrees with ``expected``).

    In a sequence or dict, the first item that is wrong beyond precision is reported, else
    the first that differs only in precision.
    """
    label = _label(where)
    if isinstance(expected, (torch.Tensor, np.ndarray)):
        return _compare_arrays(got, expected, atol, rtol, label, precision)
    if isinstance(expected, (bool, np.bool_)) or isinstance(expected, str) or expected is None:
        return None if got == expected else Difference(f"{label}expected {expected!r}, got {got!r}")
    if isinstance(expected, numbers.Number):
        return _compare_numbers(got, expected, atol, rtol, label, precision)
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return Difference(f"{label}expected a dict, got {type(got).__name__}")
        if set(got) != set(expected):
            return Difference(f"{label}expected keys {sorted(map(str, expected))}, got {sorted(map(str, got))}")
        return _first_of(difference(got[key], expected[key], atol, rtol, where=f"{where}[{key!r}]",
                                    precision=precision) for key in expected)
    if isinstance(expected, Sequence):
        if not isinstance(got, Sequence) or isinstance(got, str):
            return Difference(f"{label}expected a {type(expected).__name__} of {len(expected)} items, "
                              f"got {type(got).__name__}")
        if len(got) != len(expected):
            return Difference(f"{label}expected {len(expected)} items, got {len(got)}")
        return _first_of(difference(g, e, atol, rtol, where=f"{where}[{i}]", precision=precision)
                         for i, (g, e) in enumerate(zip(got, expected)))
    return None if got == expected else Difference(f"{label}expected {expected!r}, got {got!r}")


def _label(where: str) -> str:
    """``"2nd returned value: "`` for ``where="[1]"`` (``"2nd returned value[0]: "`` deeper in), so a learner
    reads which output is wrong; dict keys and deeper paths keep their brackets."""
    if not where:
        return ""
    head, _, rest = where[1:].partition("]")
    if not head.isdigit():
        return f"{where}: "
    n = int(head) + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix} returned value{rest}: "


def _first_of(found: Any) -> Difference | None:
    """The first real difference of an iterable of ``Difference | None``, else the first precision one."""
    first_precision = None
    for item in found:
        if item is not None and item.precision is None:
            return item
        first_precision = first_precision or item
    return first_precision


def _tolerance(dtype: torch.dtype | None, atol: float | None, rtol: float | None) -> tuple[float, float]:
    default_atol, default_rtol = DTYPE_TOLERANCES.get(dtype, DTYPE_TOLERANCES[torch.float32])
    return (default_atol if atol is None else atol), (default_rtol if rtol is None else rtol)


def _float_dtype_of(value: Any) -> torch.dtype | None:
    """The floating dtype a scalar or tensor result carries (``None`` for Python numbers and ints)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.dtype
    if isinstance(value, (np.ndarray, np.generic)) and np.issubdtype(value.dtype, np.floating):
        return {np.dtype(np.float64): torch.float64, np.dtype(np.float32): torch.float32,
                np.dtype(np.float16): torch.float16}.get(value.dtype)
    return None


def _lower(dtype: torch.dtype | None, than: torch.dtype | None) -> bool:
    return dtype in _PRECISION and than in _PRECISION and _PRECISION[dtype] < _PRECISION[than]


def _explaining_dtypes(got_dtype: torch.dtype | None, task: torch.dtype) -> list[torch.dtype]:
    """Lower precisions that may explain a gap: float32 always (a step in float32 leaves its mark
    whatever dtype the result ends in), float16/bfloat16 only when the result has that dtype."""
    candidates = [torch.float32] + ([got_dtype] if got_dtype in (torch.float16, torch.bfloat16) else [])
    return [d for d in candidates if _lower(d, task)]


def _relative_precision(lower: torch.dtype) -> float:
    """The relative gap a computation in ``lower`` may leave: its ``rtol`` in ``DTYPE_TOLERANCES``."""
    return DTYPE_TOLERANCES[lower][1]


def _carried_by(lower: torch.dtype, scale: float) -> bool:
    """Can ``lower`` hold values of this magnitude as normal numbers (so its relative precision applies)?"""
    info = torch.finfo(lower)
    return math.isfinite(scale) and info.tiny <= scale <= info.max


def _within_lower_precision(g64: torch.Tensor, e64: torch.Tensor, lower: torch.dtype) -> torch.Tensor | None:
    """Where the gap is one ``lower`` precision leaves: within its relative precision of the largest
    expected magnitude (a norm-wise relative gap, so entries near 0 by cancellation are judged by the
    tensor's scale). ``None`` when the values are not of a size ``lower`` carries (0, 1e-40, inf)."""
    finite = torch.isfinite(e64)
    scale = float(e64[finite].abs().max()) if bool(finite.any()) else 0.0
    if not _carried_by(lower, scale):
        return None
    same = (g64 == e64) | (torch.isnan(g64) & torch.isnan(e64))
    return same | ((g64 - e64).abs() <= _relative_precision(lower) * scale)


def _as_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, np.ndarray):
        try:
            return torch.from_numpy(value)
        except TypeError:  # object or string arrays
            return None
    return None


def _compare_arrays(got: Any, expected: Any, atol: float | None, rtol: float | None, label: str,
                    precision: torch.dtype | None = None) -> Difference | None:
    kind = "a torch tensor" if isinstance(expected, torch.Tensor) else "a NumPy array"
    g = _as_tensor(got)
    if g is None or isinstance(got, torch.Tensor) != isinstance(expected, torch.Tensor):
        return Difference(f"{label}expected {kind}, got {type(got).__name__}")
    e = _as_tensor(expected)
    if tuple(g.shape) != tuple(e.shape):
        msg = f"{label}expected shape {tuple(e.shape)}, got {tuple(g.shape)}"
        if g.dim() == 2 and tuple(g.shape) == tuple(e.shape)[::-1]:
            msg += " (transposed?)"
        return Difference(msg)
    if g.is_complex() or e.is_complex():
        return None if torch.equal(g, e) else Difference(f"{label}expected {e}, got {g}")
    if e.is_floating_point() and not g.is_floating_point() and not e.eq(e.round()).all():
        return Difference(f"{label}expected floating-point values, got dtype {g.dtype}")
    if not e.is_floating_point():  # integer and bool results: counts, indices, masks
        if g.is_floating_point() and not torch.isfinite(g).all():
            bad = ~torch.isfinite(g)
        else:
            common = torch.float64 if g.is_floating_point() else torch.int64
            bad = g.to(common) != e.to(common)
        return Difference(_first_difference(label, bad, e, g)) if bad.any() else None
    task = precision if precision is not None and precision in _PRECISION else e.dtype
    t_atol, t_rtol = _tolerance(task, atol, rtol)
    g64, e64 = g.to(torch.float64), e.to(torch.float64)
    nan_g, nan_e = torch.isnan(g64), torch.isnan(e64)
    if (nan_g & ~nan_e).any():
        idx = tuple(int(i) for i in (nan_g & ~nan_e).nonzero()[0])
        return Difference(f"{label}got NaN at index {idx} where {fmt(e[idx].item())} was expected")
    close = torch.isclose(g64, e64, rtol=t_rtol, atol=t_atol, equal_nan=True)
    if close.all():
        return None
    got_dtype = g.dtype if g.is_floating_point() else None
    beyond = None  # the values wrong beyond what a lower precision explains: the first shown is one of them
    for lower in _explaining_dtypes(got_dtype, task):
        within = _within_lower_precision(g64, e64, lower)
        if within is None:
            continue
        loose = close | within
        if loose.all():
            return Difference(_first_difference(label, ~close, e, g), lower, task, got_dtype)
        beyond = ~loose if beyond is None else beyond
    text = _first_difference(label, ~close, e, g, show=beyond)
    if _lower(got_dtype, task):  # wrong anyway; the dtype is worth a remark
        text += f" (your result is {dtype_name(got_dtype)}; this exercise works in {dtype_name(task)})"
    return Difference(text)


def _first_difference(label: str, bad: torch.Tensor, e: torch.Tensor, g: torch.Tensor,
                      show: torch.Tensor | None = None) -> str:
    """``N of M values differ; first at index ...`` (the first of ``show`` when given, else of ``bad``)."""
    show = None if show is None or torch.equal(show, bad) else show
    idx = tuple(int(i) for i in (bad if show is None else show).nonzero()[0])
    at = f" at index {idx}" if idx else ""
    expected_text, got_text = fmt_pair(e[idx].item(), g[idx].item())
    if bad.numel() == 1:
        return f"{label}expected {expected_text}, got {got_text}"
    first = "first" if show is None else "first beyond rounding"
    return (f"{label}{int(bad.sum())} of {bad.numel()} values differ; {first}{at}: expected {expected_text}, "
            f"got {got_text}")


def _compare_numbers(got: Any, expected: numbers.Number, atol: float | None, rtol: float | None, label: str,
                     precision: torch.dtype | None = None) -> Difference | None:
    got_dtype = _float_dtype_of(got)
    if (isinstance(got, torch.Tensor) and got.numel() == 1) or (
            isinstance(got, (np.ndarray, np.generic)) and got.size == 1):
        got = got.item()
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, numbers.Number):
        return Difference(f"{label}expected a number, got {type(got).__name__}")
    if isinstance(expected, numbers.Integral):
        if isinstance(got, numbers.Integral):
            return None if int(got) == int(expected) else Difference(f"{label}expected {int(expected)}, "
                                                                     f"got {int(got)}")
        if isinstance(got, float) and got.is_integer():
            return None if int(got) == int(expected) else Difference(f"{label}expected {int(expected)}, "
                                                                     f"got {got!r}")
        return Difference(f"{label}expected the whole number {int(expected)}, got {got!r}")
    if isinstance(got, complex) or isinstance(expected, complex):
        return None if got == expected else Difference(f"{label}expected {expected}, got {got}")
    got, expected = float(got), float(expected)
    if math.isnan(got) and not math.isnan(expected):
        return Difference(f"{label}got NaN, expected {fmt(expected)}")
    task = precision if precision in _PRECISION else torch.float64  # a Python float is a float64
    t_atol, t_rtol = _tolerance(precision if precision in _PRECISION else None, atol, rtol)
    if math.isclose(got, expected, rel_tol=t_rtol, abs_tol=t_atol) or (math.isnan(got) and math.isnan(expected)):
        return None
    expected_text, got_text = fmt_pair(expected, got)
    text = f"{label}expected {expected_text}, got {got_text}"
    for lower in _explaining_dtypes(got_dtype, task):
        if _carried_by(lower, abs(expected)) and abs(got - expected) <= _relative_precision(lower) * abs(expected):
            return Difference(text, lower, task, got_dtype)
    return Difference(text)
