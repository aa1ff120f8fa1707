"""Argument checks shared by every helper.

Each check raises ``TypeError`` (wrong kind of value) or ``ValueError``
(right kind, bad value) with a message that names the argument, shows the
value received and says what was expected, e.g.::

    ValueError: d_model must be a positive int, got 0
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import torch


def _is_int(value: Any) -> bool:
    # bool is a subclass of int, but True as a width is always a mistake.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(name: str, value: Any) -> int:
    """Return ``value`` as an int if it is an integer >= 1, else raise."""
    if not _is_int(value):
        raise TypeError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def non_negative_int(name: str, value: Any) -> int:
    """Return ``value`` as an int if it is an integer >= 0, else raise."""
    if not _is_int(value):
        raise TypeError(f"{name} must be a non-negative int, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return int(value)


def int_in_range(name: str, value: Any, low: int, high: int) -> int:
    """Return ``value`` if it is an int with ``low <= value <= high``, else raise."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an int in [{low}, {high}], got {value!r} ({type(value).__name__})")
    if not low <= value <= high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    return int(value)


def probability(name: str, value: Any, *, allow_one: bool = False) -> float:
    """Return ``value`` as a float in [0, 1) (or [0, 1] with ``allow_one``), else raise."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{name} must be a float in [0, 1), got {value!r} ({type(value).__name__})")
    upper_ok = value <= 1 if allow_one else value < 1
    if not (0 <= value and upper_ok):
        bracket = "[0, 1]" if allow_one else "[0, 1)"
        raise ValueError(f"{name} must be a float in {bracket}, got {value!r}")
    return float(value)


def non_negative_float(name: str, value: Any) -> float:
    """Return ``value`` as a float if it is a real number >= 0, else raise."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{name} must be a non-negative number, got {value!r} ({type(value).__name__})")
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    return float(value)


def positive_float(name: str, value: Any) -> float:
    """Return ``value`` as a float if it is a real number > 0, else raise."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{name} must be a positive number, got {value!r} ({type(value).__name__})")
    if not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def one_of(name: str, value: Any, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices`` (strings), else raise."""
    options = list(choices)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {options}, got {value!r} ({type(value).__name__})")
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def float_tensor(name: str, value: Any, *, last_dim: int | None = None, last_dim_name: str = "d_model",
                 min_dims: int = 1) -> torch.Tensor:
    """Check that ``value`` is a floating-point tensor, optionally with a given last dimension.

    Shapes: ``value`` is ``(..., last_dim)``; it is returned unchanged.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(
            f"{name} must have a floating-point dtype (e.g. torch.float32), got {value.dtype}; "
            f"convert with {name}.float()"
        )
    if value.dim() < min_dims:
        raise ValueError(f"{name} must have at least {min_dims} dimension(s), got shape {tuple(value.shape)}")
    if last_dim is not None and value.shape[-1] != last_dim:
        raise ValueError(
            f"{name} must have last dimension {last_dim_name}={last_dim}, "
            f"got shape {tuple(value.shape)} (last dimension {value.shape[-1]})"
        )
    return value
