"""Differences between two computations of the same thing, printed so that they read the same on every CPU.

Two ways of computing one result (a loop and a matrix product, float64 and float32, a module and its formula)
differ by rounding, and the digits of that rounding change with the CPU kernel, the BLAS and the thread count.
``max_abs_diff`` measures the largest gap in float64; ``bound`` prints it as a bound (``"< 1e-06"``) when it is
below a tolerance set by the precision in play, and as its value (two digits) when it is a real disagreement.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from helpers import validate


def max_abs_diff(a, b) -> float:
    """``max |a - b|`` over every entry, in float64; ``a`` and ``b`` are tensors, arrays or nested lists of one shape."""
    a = torch.as_tensor(np.asarray(a.detach().cpu() if isinstance(a, torch.Tensor) else a), dtype=torch.float64)
    b = torch.as_tensor(np.asarray(b.detach().cpu() if isinstance(b, torch.Tensor) else b), dtype=torch.float64)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    return float((a - b).abs().max()) if a.numel() else 0.0


def bound(diff: float, tol: float = 1e-6) -> str:
    """``"< 1e-06"`` when ``0 <= diff < tol``, else ``"= <diff to 2 digits>"``: text that reads the same on every CPU.

    Pick ``tol`` from the precision in play: about ``1e-6`` for float32 results of size 1, ``1e-12`` for float64.
    """
    if not isinstance(diff, numbers.Real) or isinstance(diff, bool):
        raise TypeError(f"diff must be a number, got {diff!r} ({type(diff).__name__})")
    validate.positive_float("tol", tol)
    return f"< {tol:.0e}" if 0 <= diff < tol else f"= {diff:.2g}"
