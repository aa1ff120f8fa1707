"""A check's verdict: its three statuses, its one printed line, how the grader reads it back, and the log.

A check prints exactly one line, ``<icon> <title>: <message>`` (``Result.line``), and, when the grader runs
the notebook (``$FFN_VERDICT_LOG`` set), appends it with its status and reason to a log only the grader reads:
a verdict line the notebook printed by its own code, without a checker behind it, is then not trusted.
``parse_line`` reads a printed line back.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from helpers.exercises.compare import one_line

NOT_ATTEMPTED = "not attempted"
PASSED = "passed"
FAILED = "failed"

ICONS = {NOT_ATTEMPTED: "⏳", PASSED: "✅", FAILED: "❌"}
STATUS_OF_ICON = {icon: status for status, icon in ICONS.items()}

#: When set (the grader sets it), ``check`` appends each verdict as a JSON line to this file.
VERDICT_LOG_ENV = "FFN_VERDICT_LOG"

#: One verdict line: icon, title (``Exercise N (...)`` in the course; it never contains ": "), message.
LINE_RE = re.compile(r"^(?P<icon>[⏳✅❌]) (?P<title>.+?): (?P<message>.*)$")
HINT_PREFIX = "Likely mistake: "
CLUE_PREFIX = "The bug to look for: "

#: ``Result.reason`` of a function that is the checker's own code (its reference, a mistake model).
CHECKERS_CODE = "checker's code"
#: ``Result.reason`` of a function that changed one of its inputs in place.
CHANGED_INPUT = "changed input"


def parse_line(line: str) -> tuple[str, str, str] | None:
    """``(status, title, message)`` of a verdict line printed by ``check``, or ``None`` for any other text."""
    match = LINE_RE.match(line.strip("\r\n"))
    if match is None:
        return None
    return STATUS_OF_ICON[match["icon"]], match["title"], match["message"]


@dataclass
class Result:
    """Outcome of checking one exercise.

    ``reason`` says why a check failed, for programs (``""`` when it passed or was not attempted):
    ``"wrong"``, ``"precision"`` (right to a lower precision only), ``"type"`` (right values, but not the type
    the statement fixes), ``"error"`` (the function raised),
    ``"unchanged"`` (a debug exercise's function still does what the function as given does),
    ``"changed input"`` (it edited an argument in place), ``"checker's code"`` (it is the checker's own
    reference or mistake model), ``"incomplete"``, ``"timeout"``, ``"not callable"`` or ``"checker"`` (the
    checker itself broke). ``hint`` is the likely mistake, when one explains the answer.
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
        return one_line(f"{ICONS[self.status]} {self.title}: {self.message}")

    def __str__(self) -> str:
        return self.line()


def log_verdict(result: Result) -> None:
    """Append the verdict to ``$FFN_VERDICT_LOG`` (set by the grader), so it can tell checks from printed text."""
    path = os.environ.get(VERDICT_LOG_ENV)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"title": result.title, "status": result.status, "reason": result.reason,
                                  "line": result.line()}, ensure_ascii=False) + "\n")
    except OSError:
        pass
