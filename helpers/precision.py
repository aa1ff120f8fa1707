"""Differences between two computations of the same thing, printed so that they read the same on every CPU.

Two ways of computing one result (a loop and a matrix product, float64 and float32, a module and its formula)
differ by rounding, and the digits of that rounding change with the CPU kernel, the BLAS and the thread count.
``max_abs_diff`` measures the largest gap in float64; ``bound`` prints it as a bound (``"< 1e-06"``) when it is
below a tolerance set by the precision in play, and as its value (two digits) when it is a real disagreement;
``scale`` (or ``gap``) makes the tolerance grow with the results' size, as float rounding does.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from helpers import validate


def max_abs_diff(a, b) -> float:
    """``max |a - b|`` over every entry, in float64; ``a`` and ``b`` are tensors, arrays or nested lists of one shape."""
    a, b = (x.detach().cpu().double() if isinstance(x, torch.Tensor) else x for x in (a, b))   # bfloat16 too
    a = torch.as_tensor(np.asarray(a), dtype=torch.float64)
    b = torch.as_tensor(np.asarray(b), dtype=torch.float64)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    return float((a - b).abs().max()) if a.numel() else 0.0


def bound(diff: float, tol: float = 1e-6, *, scale: float | None = None, digits: int | None = None) -> str:
    """``"< 1e-06"`` when ``0 <= diff < tol``, else ``"= <diff to 2 digits>"``: text that reads the same on every CPU.

    Pick ``tol`` from the precision in play: about ``1e-6`` for float32 results of size 1, ``1e-12`` for float64.
    ``scale`` (optional, the results' size, e.g. ``max |y|``) makes the bound relative: float rounding grows
    with the values, so ``diff`` is divided by ``max(1, scale)`` before it is compared and printed. The rule is
    then ``|Δ| < tol · max(1, max |y|)``: absolute for results below 1, relative above. ``digits`` (optional)
    prints ``tol`` with that many significant digits (``"< 0.0156"``) instead of one (``"< 2e-02"``), for a
    tolerance that is not a power of ten.
    """
    if not isinstance(diff, numbers.Real) or isinstance(diff, bool):
        raise TypeError(f"diff must be a number, got {diff!r} ({type(diff).__name__})")
    validate.positive_float("tol", tol)
    if scale is not None:
        if not isinstance(scale, numbers.Real) or isinstance(scale, bool) or not scale >= 0:
            raise ValueError(f"scale must be a number >= 0 (the results' size), got {scale!r}")
        diff = diff / max(1.0, float(scale))
    if digits is not None:
        validate.positive_int("digits", digits)
    shown = f"{tol:.0e}" if digits is None else f"{tol:.{digits}g}"
    return f"< {shown}" if 0 <= diff < tol else f"= {diff:.2g}"


def gap(result, reference, tol: float = 1e-6, *, digits: int | None = None) -> str:
    """``bound(max |result - reference|, tol, scale=max |reference|, digits=digits)``: the relative check in one call.

    ``result`` and ``reference``: tensors or arrays of one shape. ``tol``: about ``1e-6`` for float32,
    ``1e-2`` for bfloat16 (its step is 2⁻⁸ ≈ 0.004 below 1).
    """
    ref = reference.detach().cpu().double() if isinstance(reference, torch.Tensor) else \
        torch.as_tensor(np.asarray(reference), dtype=torch.float64)
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    return bound(max_abs_diff(result, reference), tol, scale=scale, digits=digits)


def dtype_tol(dtype: torch.dtype, steps: float) -> float:
    """``steps`` rounding steps of ``dtype`` relative to a value: a ``tol`` for ``gap`` derived from the format.

    A float format with p significant bits spaces the numbers in [2^e, 2^(e+1)) by 2^(e-p+1), so one step is at
    most 2^-(p-1) of the value (``torch.finfo(dtype).eps``): 2⁻⁷ ≈ 0.0078 for bfloat16 (p = 8), 2⁻²³ for float32.
    ``steps`` is how many such steps the comparison allows; with ``gap`` the bound is then
    ``steps · eps · max(1, max |y|)``.
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    validate.positive_float("steps", steps)
    return float(steps) * torch.finfo(dtype).eps


def describe_dtype_tol(dtype: torch.dtype, steps: float) -> str:
    """One printable line saying where ``dtype_tol(dtype, steps)`` comes from: bits, relative step, bound."""
    eps = torch.finfo(dtype).eps
    bits = 1 - round(np.log2(eps))
    name = str(dtype).removeprefix("torch.")
    power = "2" + f"-{bits - 1}".translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return (f"{name}: {bits} significant bits, one step ≤ {power} = {eps:.2g} of the value; "
            f"bound {steps:g} steps = {dtype_tol(dtype, steps):.3g} × max(1, max |y|)")
