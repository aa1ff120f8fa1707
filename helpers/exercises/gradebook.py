"""The grades, and what a teacher takes away: the table, points, a CSV gradebook, feedback per student.

Points: each exercise is worth its checker's ``points`` (by default by kind: ``DEFAULT_POINTS`` in
the engine), all or nothing: a passed exercise earns them, anything else earns 0. A teacher
overrides them with a JSON file (``--points points.json``) whose keys are a kind (``"build"``), an
exercise of a notebook (``"05/3"``) or an exercise's title; the most specific key wins.

The CSV has one row per student (a submission's first folder below the folder graded, else its file
name: a student folder holding two notebooks is one row with both notebooks' exercises), a column per
exercise with the points earned, the total, the maximum and notes (a deleted check, a verdict printed by
hand, the checker's own code handed in). The feedback file (Markdown, one per student) repeats each
verdict, message and hint in words a student reads without the course at hand, says in a sentence how
each notebook ran (``status_sentence``, one per notebook status), and names cells by their first line
and the heading above them.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from helpers.exercises.engine import CHECKERS_CODE, FAILED, ICONS, KINDS, NOT_ATTEMPTED, PASSED
from helpers.exercises.kernel import CELL_ERROR, KERNEL_DIED, KERNEL_FAILED, NOT_A_NOTEBOOK, RAN, TIMED_OUT
from helpers.exercises.matching import ExpectedExercise


@dataclass
class ExerciseGrade:
    """One exercise of one submission."""

    title: str
    kind: str
    status: str                 # engine status: "passed", "failed" or "not attempted"
    message: str
    hint: str | None = None
    problem: str = ""           # why there is no verdict of the checker's own: "missing", "not run", ...
    expected: bool = True       # False for a verdict the course's notebook does not contain
    points: float = 0.0         # earned
    max_points: float = 0.0
    number: str = ""
    heading: str = ""

    @property
    def icon(self) -> str:
        return ICONS[self.status]

    @property
    def passed(self) -> bool:
        return self.status == PASSED


@dataclass
class NotebookGrade:
    """The grade of one submission."""

    path: str                   # as shown in the report: relative to the folder graded
    status: str
    note: str = ""
    seconds: float = 0.0
    original: str | None = None  # the course notebook it was matched to
    exercises: list[ExerciseGrade] = field(default_factory=list)
    student: str = ""
    matched_by: str = ""
    run_note: str = ""          # how the run ended, for the student (the cell that raised, timed out, ...)

    @property
    def passed(self) -> bool:
        return self.status == RAN and bool(self.exercises) and all(e.passed for e in self.exercises)

    @property
    def points(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_points(self) -> float:
        return sum(e.max_points for e in self.exercises)

    @property
    def notebook(self) -> str:
        """The course notebook's number (``"05"``), or ``"?"`` when the submission matched none."""
        match = re.match(r"(\d\d)_", Path(self.original).name) if self.original else None
        return match.group(1) if match else "?"

    def counts(self) -> dict[str, int]:
        return {status: sum(e.status == status for e in self.exercises) for status in (PASSED, FAILED, NOT_ATTEMPTED)}

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(passed=self.passed, points=self.points, max_points=self.max_points)
        for row, grade in zip(data["exercises"], self.exercises):
            row["icon"] = grade.icon
        return data


# ---------------------------------------------------------------- points
class PointsError(ValueError):
    """A points file the grader cannot use (its message says which key or value)."""


def load_points(path: str | Path, known: dict[str, str]) -> dict[str, float]:
    """A teacher's points file, checked against ``known`` (every valid key -> what it names)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise PointsError(f"cannot read {path}: {err}") from None
    if not isinstance(data, dict):
        raise PointsError(f"{path}: expected a JSON object such as {{\"build\": 1, \"05/3\": 4}}")
    points = {}
    for key, value in data.items():
        if key not in known:
            raise PointsError(f"{path}: unknown key {key!r}; use a kind ({', '.join(KINDS)}), "
                              f"'NN/N' (e.g. '05/3') or an exercise's title")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise PointsError(f"{path}: points for {key!r} must be a number >= 0, got {value!r}")
        points[key] = float(value)
    return points


def points_keys(course: Sequence[tuple[str, Sequence[ExpectedExercise]]]) -> dict[str, str]:
    """Every key a points file may use: kinds, ``NN/N`` and titles of the course's exercises."""
    keys = {kind: f"every {kind} exercise" for kind in KINDS}
    for number, exercises in course:
        for item in exercises:
            keys[f"{number}/{item.number}"] = item.title
            keys[item.title] = item.title
    return keys


def points_for(item: ExpectedExercise, notebook: str, overrides: dict[str, float]) -> float:
    """What ``item`` is worth: ``NN/N``, then its title, then its kind in ``overrides``, else its own points."""
    for key in (f"{notebook}/{item.number}", item.title, item.kind):
        if key in overrides:
            return overrides[key]
    return item.points


# ---------------------------------------------------------------- the report
def _pts(value: float) -> str:
    return f"{value:g}"


def format_report(grades: Sequence[NotebookGrade]) -> str:
    """Per submission its status and one row per exercise, then a summary grid per course notebook."""
    lines = []
    title_width = max([len(e.title) for g in grades for e in g.exercises] + [20])
    for grade in grades:
        counts = grade.counts()
        head = f"{grade.path} — {grade.status}"
        if grade.status != NOT_A_NOTEBOOK:
            head += f" ({grade.seconds:.0f} s)"
        head += f": {counts[PASSED]}/{len(grade.exercises)} passed, {_pts(grade.points)}/{_pts(grade.max_points)} points"
        lines.append(head)
        if grade.original:
            lines.append(f"    course notebook: {Path(grade.original).name} ({grade.matched_by})")
        if grade.note:
            lines.append(f"    note: {grade.note}")
        for ex in grade.exercises:
            extra = "" if ex.expected else " [not in the course notebook]"
            score = f"{_pts(ex.points)}/{_pts(ex.max_points)}"
            lines.append(f"  {ex.icon} {ex.title:<{title_width}}  {ex.kind or '-':<11}  {score:>5}  {ex.message}{extra}")
        lines.append("")
    lines += format_summary(grades)
    total = sum(g.passed for g in grades)
    lines.append(f"{total} of {len(grades)} notebook{'s' if len(grades) != 1 else ''} passed every exercise.")
    return "\n".join(lines)


def format_summary(grades: Sequence[NotebookGrade]) -> list[str]:
    """One grid per course notebook: a column per exercise, so a missing exercise keeps its column."""
    lines = ["Summary"]
    path_width = max([len(g.path) for g in grades] + [8])
    groups: dict[str, list[NotebookGrade]] = {}
    for grade in grades:
        groups.setdefault(grade.original or "", []).append(grade)
    for original, members in groups.items():
        if original:
            columns = [e for e in max(members, key=lambda g: sum(x.expected for x in g.exercises)).exercises
                       if e.expected]
            numbers = "  ".join(f"{e.number or '?':<2}" for e in columns)
            lines.append(f"  {Path(original).name}")
            lines.append(f"  {'exercise':<{path_width}}  {numbers}  points")
        else:
            lines.append("  (no course notebook matched: each row lists the checks it called)")
        for grade in members:
            icons = "  ".join(e.icon for e in grade.exercises if e.expected) or "—"
            extra = [e for e in grade.exercises if not e.expected]
            if extra:
                icons += "  + " + " ".join(f"{e.icon}{e.title}" for e in extra)
            verdict = "all passed" if grade.passed else grade.status if grade.status != RAN else ""
            lines.append(f"  {grade.path:<{path_width}}  {icons}  {_pts(grade.points)}/{_pts(grade.max_points)}"
                         f"{'  ' + verdict if verdict else ''}")
    return lines


def to_json(grades: Sequence[NotebookGrade]) -> dict[str, Any]:
    return {"passed": all(g.passed for g in grades) and bool(grades),
            "notebooks": [g.to_json() for g in grades]}


# ---------------------------------------------------------------- the gradebook and feedback
def by_student(grades: Sequence[NotebookGrade]) -> dict[str, list[NotebookGrade]]:
    found: dict[str, list[NotebookGrade]] = {}
    for grade in grades:
        found.setdefault(grade.student or grade.path, []).append(grade)
    return found


def _column(grade: NotebookGrade, ex: ExerciseGrade) -> str:
    return f"{grade.notebook} Ex{ex.number}" if grade.original and ex.expected and ex.number else \
        f"{grade.notebook} {ex.title}"


def write_csv(grades: Sequence[NotebookGrade], path: str | Path) -> None:
    """One row per student: points per exercise, total, maximum, notes (UTF-8, comma-separated)."""
    columns: dict[str, float] = {}
    for grade in grades:
        for ex in grade.exercises:
            columns.setdefault(_column(grade, ex), ex.max_points)
    rows = []
    for student, members in by_student(grades).items():
        best: dict[str, NotebookGrade] = {}
        notes = []
        for grade in members:  # two submissions of one notebook: the better one counts, the other is noted
            key = grade.original or grade.path
            if key in best:
                kept, other = (grade, best[key]) if grade.points > best[key].points else (best[key], grade)
                notes.append(f"also submitted {other.path} ({_pts(other.points)} points)")
                best[key] = kept
            else:
                best[key] = grade
        row = {"student": student, "files": "; ".join(g.path for g in members)}
        for grade in best.values():
            for ex in grade.exercises:
                row[_column(grade, ex)] = _pts(ex.points)
            if grade.status != RAN:
                notes.append(f"{grade.path}: {grade.status}")
            notes += [f"{grade.path}: Ex{e.number or '?'} {e.problem}" for e in grade.exercises
                      if e.problem in ("missing", "not checked", CHECKERS_CODE)]
        row["total"] = _pts(sum(g.points for g in best.values()))
        row["max"] = _pts(sum(g.max_points for g in best.values()))
        row["notes"] = "; ".join(notes)
        rows.append(row)
    header = ["student", "files", *[f"{name} ({_pts(pts)})" for name, pts in columns.items()], "total", "max", "notes"]
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(header)
    for row in rows:
        writer.writerow([row.get("student"), row.get("files"), *[row.get(name, "") for name in columns],
                         row["total"], row["max"], row["notes"]])
    path = Path(path)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", newline="", dir=path.parent, prefix=f".{path.name}.",
                                     delete=False) as handle:  # whole or not at all
        handle.write(buffer.getvalue())
    os.replace(handle.name, path)


_MEANING = ("✅ passed: your function gave the right answer on every hidden test case and left its inputs as "
            "they were. "
            "❌ not passed (0 points): the message says what was wrong (on which input, expected value vs yours) "
            "and, when one known mistake explains every failing case, the likely mistake; a function that changes "
            "one of its inputs in place, or that is the checker's own code rather than yours, is not passed either. "
            "A debug exercise whose function was run as given (its `raise NotImplementedError` line deleted, the "
            "bug still in it) is ❌ not passed, with the symptom only: the input it fails on and what differs. "
            "⏳ not attempted (0 points): the function still raised NotImplementedError (the cell as given, "
            "including a debug cell whose `raise` line is still there) or returned nothing.")


def status_sentence(grade: NotebookGrade) -> str:
    """How the notebook ran, as one sentence to its student (one wording per status, the grader's note in it)."""
    note = (grade.run_note or ("" if grade.status == RAN else grade.note)).rstrip(".")
    if grade.status == RAN:
        return "Your notebook ran to the end" + (f" ({note})." if note else ".")
    if grade.status == CELL_ERROR:
        return f"Your notebook ran to the end, but not every cell worked: {note}."
    if grade.status == TIMED_OUT:
        return f"Your notebook was stopped before its end: it {note}."
    if grade.status == KERNEL_DIED:
        return f"Your notebook was stopped before its end: its {note}."
    if grade.status == KERNEL_FAILED:
        return "Your notebook could not be run: its kernel failed to start" + (f" ({note})." if note else ".")
    if grade.status == NOT_A_NOTEBOOK:
        return "Your file could not be read as a notebook" + (f" ({note})" if note else "") + \
            ", so none of it could be run."
    return f"Your notebook: {grade.status}" + (f" ({note})." if note else ".")


def course_sentence(grade: NotebookGrade) -> str:
    """Which course notebook the submission was graded as, in a sentence."""
    if grade.original:
        return f"Graded as the course notebook **{Path(grade.original).name}**."
    if grade.status == NOT_A_NOTEBOOK:
        return "It could not be matched to a course notebook."
    return "It matched no course notebook, so it was graded by the checks it calls."


def safe_name(student: str) -> str:
    """A file name for ``student`` (letters, digits, ``-``, ``_``, ``.``; others become ``_``)."""
    name = re.sub(r"[^\w.-]+", "_", student, flags=re.UNICODE).strip("._")
    return name or "student"


def feedback_markdown(student: str, members: Sequence[NotebookGrade]) -> str:
    """The feedback a student reads: per notebook the points, then each exercise's verdict in full."""
    lines = [f"# Feedback for {student}", ""]
    for grade in members:
        lines += [f"## {grade.path}", "",
                  f"{course_sentence(grade)} {status_sentence(grade)} Points: **{_pts(grade.points)} of "
                  f"{_pts(grade.max_points)}**.", "",
                  "| | Exercise | Kind | Points |", "|---|---|---|---|"]
        for ex in grade.exercises:
            lines.append(f"| {ex.icon} | {(ex.heading or ex.title).replace('|', '/')} | {ex.kind or '-'} | "
                         f"{_pts(ex.points)}/{_pts(ex.max_points)} |")
        lines.append("")
        for ex in grade.exercises:
            if ex.passed:
                continue
            lines += [f"### {ex.icon} {ex.heading or ex.title}", ""]
            message = ex.message.split(" Likely mistake: ")[0] if ex.hint else ex.message
            lines += [f"What the checker said: {message}", ""]
            if ex.hint:
                lines += [f"Likely mistake: {ex.hint}", ""]
            if ex.problem == CHECKERS_CODE:
                lines += ["(The function handed to this check was the checker's own code, not yours.)", ""]
            if not ex.expected:
                lines += ["(This check is not part of the course notebook.)", ""]
    lines += ["---", "", _MEANING, ""]
    return "\n".join(lines)


def write_feedback(grades: Sequence[NotebookGrade], folder: str | Path) -> list[Path]:
    """One Markdown file per student in ``folder`` (created if needed); returns the files written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written, used = [], set()
    for student, members in by_student(grades).items():
        name = safe_name(student)
        while name.lower() in used:  # two students whose names differ only in characters we replace
            name += "_"
        used.add(name.lower())
        path = folder / f"{name}.md"
        path.write_text(feedback_markdown(student, members), encoding="utf-8")
        written.append(path)
    return written
