"""The type a statement fixes for an answer: a Python int, a float32 tensor, integer tensors, a bool mask.

Values are compared by ``helpers.exercises.compare``, which is lenient about type on purpose (a whole-number float
matches an int, any float dtype is compared at the task's precision). Where the statement fixes the type, the
exercise declares it, ``Exercise(..., returns=python_int())``, and once every value is right the engine checks the
type of each hidden case's result, the very object the learner's function returned on that case (no second call):

    ❌ Exercise 1 (...): the values are right, but your function returns a Python float (7168.0) on d_model=...;
       the statement asks for a Python int. Keep the arithmetic in integers (// rather than /, ...).

``Returns`` describes one part of the answer (the whole result, or item ``i`` of a returned tuple) and the types
that part may have; a sequence of them describes several parts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Returns", "python_int", "python_float", "tensor_dtype", "same_dtype_as", "integer_tensor", "type_name"]


def type_name(value: Any) -> str:
    """``a float64 tensor``, ``a Python float (7168.0)``, ``a numpy int64 (3)``: what a learner returned."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace('torch.', '')
        article = "a 0-d" if value.dim() == 0 else "an" if dtype[0] in "ai" else "a"
        text = f"{article} {dtype} tensor"
        return f"{text} ({value.item()!r})" if value.dim() == 0 else text
    module = type(value).__module__.split(".")[0].replace("builtins", "Python")
    shown = repr(value)
    shown = shown if len(shown) <= 30 else shown[:27] + "..."
    return f"a {module} {type(value).__name__} ({shown})"


@dataclass(frozen=True)
class Returns:
    """One part of an answer whose type the statement fixes.

    Args:
        wanted: the type in the statement's words, e.g. ``"a Python int"``.
        accepts: ``accepts(part) -> bool``, true for a part of the wanted type.
        item: the index of the part in a returned tuple (``None``: the whole result).
        name: the part as the statement names it (``"weights_read"``); ``None`` for the whole result.
        advice: one sentence on how to get the type (``advice(part)`` when it depends on what was returned).
    """

    wanted: str
    accepts: Callable[[Any], bool]
    item: int | None = None
    name: str | None = None
    advice: str | Callable[[Any], str] = ""
    like_arg: int | None = None

    def part(self, result: Any) -> Any:
        if self.item is None:
            return result
        return result[self.item]

    def problem(self, result: Any, where: str = "", args: tuple = ()) -> str | None:
        """What is wrong with the type of ``result`` (``None`` when it is the wanted type), on the case
        described by ``where`` whose arguments are ``args`` (``like_arg``: the dtype of ``args[like_arg]``)."""
        try:
            part = self.part(result)
            if self.like_arg is not None:
                wanted = args[self.like_arg].dtype
                if isinstance(part, torch.Tensor) and part.dtype == wanted:
                    return None
                subject = "your function returns" if self.name is None else f"{self.name} is"
                on = f" on {where}" if where else ""
                return (f"{subject} {type_name(part)}{on}; the statement asks for the dtype of its input, "
                        f"{str(wanted).replace('torch.', '')}.") + (f" {self.advice}" if self.advice else "")
            if bool(self.accepts(part)):
                return None
        except Exception:  # a result of another structure: compare() has already judged its values right
            return None
        subject = "your function returns" if self.name is None else f"{self.name} is"
        advice = self.advice(part) if callable(self.advice) else self.advice
        on = f" on {where}" if where else ""
        return f"{subject} {type_name(part)}{on}; the statement asks for {self.wanted}." + (f" {advice}" if advice else "")


def _is_python_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_advice(value: Any) -> str:
    if isinstance(value, float):
        return "Keep the arithmetic in integers (// rather than /, math.ceil of a fraction is an int): a float is " \
               "exact only up to 2**53."
    return "Return int(...) of it, or count with Python ints throughout."


def python_int(item: int | None = None, name: str | None = None) -> Returns:
    """A Python ``int`` (not a float, a bool, a NumPy integer or a 0-d tensor)."""
    return Returns("a Python int", _is_python_int, item, name, _int_advice)


def _is_python_float(value: Any) -> bool:
    return isinstance(value, float)


def python_float(item: int | None = None, name: str | None = None) -> Returns:
    """A Python ``float`` (NumPy's float64 is one; not an int, a tensor or a float32 scalar)."""
    return Returns("a Python float", _is_python_float, item, name,
                   "Return float(...) of it (.item() of a one-element tensor).")


def tensor_dtype(dtype: torch.dtype, item: int | None = None, name: str | None = None, advice: str = "") -> Returns:
    """A tensor of exactly ``dtype``."""
    name_of = str(dtype).replace('torch.', '')
    wanted = f"{'an' if name_of[0] in 'ai' else 'a'} {name_of} tensor"
    return Returns(wanted, lambda v: isinstance(v, torch.Tensor) and v.dtype == dtype, item, name, advice)


def same_dtype_as(arg: int, item: int | None = None, name: str | None = None, advice: str = "") -> Returns:
    """A tensor of the dtype of the case's argument number ``arg`` (float32 in, float32 out; float64 in, float64)."""
    return Returns(f"the dtype of argument {arg}", lambda v: isinstance(v, torch.Tensor), item, name, advice,
                   like_arg=arg)


def integer_tensor(item: int | None = None, name: str | None = None, advice: str = "") -> Returns:
    """A tensor of any integer dtype (int64 from ``topk``/``argmax``; a float tensor cannot index)."""
    def accepts(v: Any) -> bool:
        return isinstance(v, torch.Tensor) and not (v.is_floating_point() or v.is_complex() or v.dtype == torch.bool)
    return Returns("an integer tensor", accepts, item, name, advice)

