"""The time limit on a learner's function: a loop that never ends must not hang the notebook.

The limit counts **computing time** (the process's CPU time, per torch thread), so a busy
machine does not make a correct answer "too slow"; a function that sleeps or waits is
stopped after ``WALL_FACTOR`` times the limit in wall time. When the limit is up,
``CheckTimeout`` is raised inside the learner's code. It is a ``BaseException`` (like
``KeyboardInterrupt``), so a learner's ``except Exception`` cannot swallow it, and it is
raised again every few hundredths of a second until the learner's code has been left.

It works with ``SIGPROF``/``SIGALRM`` timers, hence only in the main thread on Linux and
macOS (Jupyter and Colab run cells there); elsewhere (Windows, another thread) there is no
limit. A torch operation is not interrupted midway: the stop comes when it returns. The
previous signal handlers, and what was left of previous timers, are restored afterwards.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import torch

#: Seconds the learner's function may run in total per check, unless the exercise or ``FFN_CHECK_TIMEOUT`` says.
DEFAULT_TIME_LIMIT = 10.0
TIME_LIMIT_ENV = "FFN_CHECK_TIMEOUT"
#: How much longer than the computing-time limit a function may take in wall time (sleeping, waiting).
WALL_FACTOR = 3.0


class CheckTimeout(BaseException):
    """Raised inside the learner's code when the time limit is up."""


def alarm_available() -> bool:
    """Can a timer interrupt the code here (signals exist and this is the main thread)?"""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def cpu_budget(limit: float) -> float:
    """Process CPU seconds allowed: the limit for each thread torch computes with (a parallel op adds up)."""
    return limit * max(1, torch.get_num_threads())


def time_limit_from_env() -> float | None:
    """``FFN_CHECK_TIMEOUT`` in seconds; unset or unreadable: ``DEFAULT_TIME_LIMIT``; ``0``/``none``: no limit."""
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


class TimeLimit:
    """Context manager: raise ``CheckTimeout`` in this (main) thread once the code inside has used
    ``cpu_seconds`` of process CPU time (``ITIMER_PROF``) or ``wall_seconds`` of wall time
    (``ITIMER_REAL``). ``fired`` then says which (``"cpu"`` or ``"wall"``). Does nothing when a
    limit is ``None``/``<= 0`` or when signals cannot be used here.
    """

    _REPEAT = 0.05
    _TIMERS = (("cpu", "ITIMER_PROF", "SIGPROF"), ("wall", "ITIMER_REAL", "SIGALRM"))

    def __init__(self, cpu_seconds: float | None, wall_seconds: float | None = None) -> None:
        wanted = {"cpu": cpu_seconds, "wall": wall_seconds}
        self.timers = [(name, getattr(signal, timer), getattr(signal, signum), wanted[name])
                       for name, timer, signum in self._TIMERS
                       if wanted[name] and wanted[name] > 0 and hasattr(signal, timer) and hasattr(signal, signum)]
        self.active = bool(self.timers) and alarm_available()
        self._armed = False
        self.fired: str | None = None
        self._previous: list[tuple[Any, tuple[float, float]]] = []
        self._started = self._started_cpu = 0.0

    def _on_alarm(self, signum: int, frame: Any) -> None:
        # never inside our own clean-up (it would leave the alarm armed); the alarm repeats until disarmed
        if self._armed and (frame is None or frame.f_code not in _CLEANUP_CODE):
            self.fired = "cpu" if signum == getattr(signal, "SIGPROF", None) else "wall"
            raise CheckTimeout

    def __enter__(self) -> TimeLimit:
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
                        if self.fired and isinstance(getattr(previous, "__self__", None), TimeLimit):
                            left = 0  # an enclosing check's limit: a timeout here ends that whole check
                        signal.setitimer(timer, max(left, 1e-3), interval)
                self._previous = []
                return
            except CheckTimeout:
                continue


_CLEANUP_CODE = (TimeLimit.__exit__.__code__, TimeLimit._restore.__code__)
