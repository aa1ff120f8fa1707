"""Did the learner's function change its inputs? An answer that edits an argument in place fails.

A notebook's later cells call the learner's function on the notebook's own tensors and use them again
(notebook 09 measures ``top_sub_updates(m, ...)`` for k = 1 ... 128 on one ``m``), so a function that zeroes
``m`` in place spoils every later number while each hidden case, run on its own copy, still looks right.

The engine hands the function deep copies of a hidden case's arguments and never passes the case's own
objects to anyone; after the call, ``changed_input`` compares each argument the function received with the
case's untouched original and names the first that differs: by its parameter name in the function's signature
(or its keyword), else by its position, with what changed. Compared: tensors and NumPy arrays (shape, dtype,
values; NaN equals NaN), ``nn.Module`` s (parameters and buffers, their ``requires_grad``, every submodule's
training mode; gradients are not inputs and are not compared), lists, tuples, dicts, dataclasses and
namespaces, item by item. Other objects (numbers, strings, generators, functions) are not compared.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from helpers.exercises.compare import dtype_name, fmt_pair

_MAX_DEPTH = 8


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def argument_names(fn: Callable[..., Any], n_args: int) -> list[str]:
    """How to name each of ``n_args`` positional arguments to the learner: ```m``` from ``fn``'s signature
    (```args[1]``` for a ``*args``), else ``the 2nd argument``."""
    names = [f"the {_ordinal(i + 1)} argument" for i in range(n_args)]
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return names
    position = 0
    for parameter in parameters:
        if position >= n_args:
            break
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            names[position] = f"`{parameter.name}`"
            position += 1
        elif parameter.kind == parameter.VAR_POSITIONAL:
            for i in range(position, n_args):
                names[i] = f"`{parameter.name}[{i - position}]`"
            break
        else:
            break
    return names


def _tensor_change(before: torch.Tensor, after: torch.Tensor) -> str | None:
    if tuple(after.shape) != tuple(before.shape):
        return f"its shape changed from {tuple(before.shape)} to {tuple(after.shape)}"
    if after.dtype != before.dtype:
        return f"its dtype changed from {dtype_name(before.dtype)} to {dtype_name(after.dtype)}"
    if before.numel() == 0:
        return None
    b, a = before.detach().cpu(), after.detach().cpu()
    if b.is_complex() or b.dtype == torch.bool or not b.is_floating_point():
        differs = a != b
    else:
        differs = (a != b) & ~(torch.isnan(a) & torch.isnan(b))
    if not bool(differs.any()):
        return None
    index = tuple(int(i) for i in differs.nonzero()[0])
    was, now = fmt_pair(b[index].item(), a[index].item()) if not b.is_complex() else (str(b[index].item()),
                                                                                      str(a[index].item()))
    at = f" at index {index}" if index and differs.numel() > 1 else ""
    count = f"{int(differs.sum())} of {differs.numel()} values changed, first" if differs.numel() > 1 else "its value"
    return f"{count}{at}: was {was}, now {now}"


def _array_change(before: np.ndarray, after: np.ndarray) -> str | None:
    try:
        return _tensor_change(torch.from_numpy(np.ascontiguousarray(before)),
                              torch.from_numpy(np.ascontiguousarray(after)))
    except TypeError:  # object or string arrays
        return None if np.array_equal(before, after) else "its values changed"


def _module_change(before: torch.nn.Module, after: torch.nn.Module) -> str | None:
    for kind, old, new in (("parameter", dict(before.named_parameters()), dict(after.named_parameters())),
                           ("buffer", dict(before.named_buffers()), dict(after.named_buffers()))):
        if set(old) != set(new):
            gone, added = sorted(set(old) - set(new)), sorted(set(new) - set(old))
            return f"its {kind}s changed: " + ", ".join([f"{name!r} removed" for name in gone] +
                                                        [f"{name!r} added" for name in added])
        for name, tensor in old.items():
            if new[name] is None or tensor is None:
                if (new[name] is None) != (tensor is None):
                    return f"its {kind} {name!r} was replaced"
                continue
            change = _tensor_change(tensor, new[name])
            if change:
                return f"its {kind} {name!r}: {change}"
            if kind == "parameter" and tensor.requires_grad != new[name].requires_grad:
                frozen = "frozen (requires_grad=False)" if tensor.requires_grad else "unfrozen (requires_grad=True)"
                return f"its parameter {name!r} was {frozen}"
    old_modes = {name: m.training for name, m in before.named_modules()}
    for name, module in after.named_modules():
        if name in old_modes and old_modes[name] != module.training:
            where = f"its submodule {name!r}" if name else "it"
            return f"{where} was switched to {'training' if module.training else 'eval'} mode"
    return None


def _at(index: str, change: str) -> str:
    """``item [1][1]: ...`` for a change inside a nested item (not ``item [1]: item [1]: ...``)."""
    return f"item {index}{change[len('item '):]}" if change.startswith("item [") else f"item {index}: {change}"


def describe_change(before: Any, after: Any, depth: int = 0) -> str | None:
    """How ``after`` (the copy the learner's function got) differs from ``before`` (the case's original),
    in words, or ``None`` when nothing that is compared changed."""
    if depth > _MAX_DEPTH or before is after:
        return None
    if isinstance(before, torch.Tensor):
        return _tensor_change(before, after) if isinstance(after, torch.Tensor) else \
            f"it became a {type(after).__name__}"
    if isinstance(before, np.ndarray):
        return _array_change(before, after) if isinstance(after, np.ndarray) else \
            f"it became a {type(after).__name__}"
    if isinstance(before, torch.nn.Module):
        return _module_change(before, after) if isinstance(after, torch.nn.Module) else None
    if isinstance(before, (list, tuple)):
        if not isinstance(after, (list, tuple)):
            return None
        if len(after) != len(before):
            return f"its length changed from {len(before)} to {len(after)}"
        for i, (old, new) in enumerate(zip(before, after)):
            change = describe_change(old, new, depth + 1)
            if change:
                return _at(f"[{i}]", change)
        return None
    if isinstance(before, dict):
        if not isinstance(after, dict):
            return None
        if set(before) != set(after):
            gone, added = [k for k in before if k not in after], [k for k in after if k not in before]
            return "its keys changed: " + ", ".join([f"{k!r} removed" for k in gone] + [f"{k!r} added" for k in added])
        for key, old in before.items():
            change = describe_change(old, after[key], depth + 1)
            if change:
                return _at(f"[{key!r}]", change)
        return None
    if (dataclasses.is_dataclass(before) and not isinstance(before, type)) or \
            isinstance(before, types.SimpleNamespace):
        old, new = vars(before), vars(after) if hasattr(after, "__dict__") else {}
        for key, value in old.items():
            if key not in new:
                return f"its attribute {key!r} was deleted"
            change = describe_change(value, new[key], depth + 1)
            if change is None and _plain(value) and _plain(new[key]) and value != new[key]:
                change = f"was {value!r}, now {new[key]!r}"
            if change:
                return f"its attribute {key!r}: {change}"
    return None


def _plain(value: Any) -> bool:
    return isinstance(value, (int, float, complex, str, bool, type(None)))


def changed_input(fn: Callable[..., Any], original: tuple[tuple, dict], given: tuple[tuple, dict]
                  ) -> tuple[str, str] | None:
    """``(how the argument is named, what changed)`` for the first argument the learner's ``fn`` changed,
    comparing the arguments it was ``given`` with the case's ``original`` ones; ``None`` when none changed
    (or when the comparison itself cannot be made: an input that cannot be compared is not blamed)."""
    (args, kwargs), (given_args, given_kwargs) = original, given
    names = argument_names(fn, len(args))
    pairs = [(names[i], old, new) for i, (old, new) in enumerate(zip(args, given_args))]
    pairs += [(f"`{key}`", kwargs[key], given_kwargs.get(key)) for key in kwargs]
    for name, old, new in pairs:
        try:
            change = describe_change(old, new)
        except Exception:  # an input type we cannot compare: not the learner's fault
            change = None
        if change:
            return name, change
    return None
