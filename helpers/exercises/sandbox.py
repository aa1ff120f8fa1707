"""The state a check runs in, whatever state the learner's kernel is in, and what it leaves behind.

While a check runs: autograd is on (also inside ``torch.no_grad()`` or inference mode), warnings are silenced,
and the course's own code (hidden cases, reference, mistake models) runs with float32 as torch's default dtype.
Afterwards the kernel's grad mode, default dtype and global random generators (torch, NumPy, ``random``) are as
they were. ``outermost`` tells the outermost ``evaluate`` of a thread from a subclass's override calling
``super()``, and remembers the function the learner handed in (a subclass may wrap it before the engine runs it);
``guard_evaluate`` gives a subclass's own ``evaluate`` the same state, a backstop time limit and "never raises".
"""

from __future__ import annotations

import contextlib
import functools
import random
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from helpers.exercises import timelimit
from helpers.exercises.timelimit import CheckTimeout, TimeLimit, cpu_budget

_depth = threading.local()


@contextlib.contextmanager
def course_defaults() -> Iterator[None]:
    """float32 as torch's default dtype while the course's own code (cases, reference, mistakes) runs."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@contextlib.contextmanager
def checking_state() -> Iterator[None]:
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


@contextlib.contextmanager
def outermost(fn: Any) -> Iterator[bool]:
    """True for the outermost ``evaluate`` on this thread, which also records ``fn`` as the submitted function."""
    depth = getattr(_depth, "value", 0)
    _depth.value = depth + 1
    if depth == 0:
        _depth.timeout = None  # the first time-limit verdict of this check, for a subclass's wrapper
        _depth.submitted = fn
    try:
        yield depth == 0
    finally:
        _depth.value = depth
        if depth == 0:
            _depth.submitted = None


def submitted() -> Any:
    """The function the learner handed to the outermost ``evaluate`` running on this thread (or ``None``)."""
    return getattr(_depth, "submitted", None)


def first_timeout() -> Any:
    """The first time-limit verdict of the check running on this thread (or ``None``)."""
    return getattr(_depth, "timeout", None)


def record_timeout(result: Any) -> None:
    if first_timeout() is None:
        _depth.timeout = result


def guard_evaluate(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a subclass's own ``evaluate``: the checking state, a time limit and "never raises" cover all of it,
    and the checker's own code handed in as an answer does not pass (``Exercise._not_own_code``).

    A subclass may re-run the learner's function for a diagnosis of its own; that is covered by a
    backstop limit of three times the exercise's.
    """

    @functools.wraps(method)
    def evaluate(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with outermost(fn) as is_outermost:
            if not is_outermost:
                return method(self, fn, *args, **kwargs)
            limit = self._effective_time_limit()
            try:
                cpu, wall = (cpu_budget(3 * limit), timelimit.WALL_FACTOR * 3 * limit) if limit else (None, None)
                guard = TimeLimit(cpu, wall)
                with checking_state(), guard:
                    return self._not_own_code(fn, method(self, fn, *args, **kwargs))
            except CheckTimeout:
                return first_timeout() or self._timeout_result(limit, which=guard.fired)
            except Exception as err:  # the checker itself must not crash the notebook
                return self._checker_broke(err)

    evaluate._guarded = True  # type: ignore[attr-defined]
    return evaluate
