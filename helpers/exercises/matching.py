"""Which course notebook a submission is, which exercises it must report, and how to name its cells.

A submission is matched to its course notebook by its **content**, not its file name: a Colab
download arrives as "Copy of 05_mixture_of_experts.ipynb", a student renames it "alice_ffn.ipynb".
The evidence is the notebook's title (its first ``# `` heading), its exercise headings
(``### Exercise 3 (build): ...``), the checker modules it imports and the checkers it calls;
the file name only adds weight. The course notebook with clearly the most evidence wins; too
little evidence (a notebook of the teacher's own that calls one checker) matches nothing, and
the submission is graded by the checks it calls.

Once matched, the exercises it must report are the course notebook's, so a deleted checker call
is reported as missing whatever the file is called.

Cells are named the way a student finds them in JupyterLab: by their first line and the heading
above them (``the cell "def z_loss(logits):" under "Exercise 4 (build): the router z-loss ..."``),
never by a count of code cells.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.exercises.engine import KINDS, Exercise

ROOT = Path(__file__).resolve().parents[2]
COURSE_NOTEBOOKS = ROOT / "notebooks"

#: ``### Exercise 3 (build): what to do``: number, kind
HEADING_RE = re.compile(rf"^#+\s*Exercise\s+(\w+)\s*\(({'|'.join(KINDS)})\)\s*:?\s*(.*)$", re.M)
#: evidence weights: the title, one exercise heading, an imported checker module, one checker call, the file name
WEIGHTS = {"title": 4.0, "heading": 1.0, "module": 2.0, "call": 0.5, "same name": 3.0, "same number": 2.0}
#: a match needs at least this much evidence, and more than any other course notebook
MIN_EVIDENCE = 4.0


@dataclass
class ExpectedExercise:
    """An exercise a notebook should report: its checker's title, kind, the names it is called by, its points."""

    title: str
    kind: str
    names: tuple[str, ...]
    module: str = ""            # e.g. "helpers.exercises.nb01"
    points: float = 0.0
    number: str = ""
    heading: str = ""           # the exercise's heading in the notebook, without the leading #'s


def source(cell: Any) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def _code(nb: Any) -> str:
    return "\n".join(source(cell) for cell in nb.cells if cell.cell_type == "code")


def call_re(names: Iterable[str]) -> re.Pattern[str]:
    """A call of a checker by one of ``names``: ``check_x(...)`` or ``check_x.check(...)`` (not ``.passes``)."""
    alternatives = "|".join(re.escape(n) for n in names)
    return re.compile(rf"\b(?:{alternatives})\s*(?:\.\s*check\s*)?\(")


def checker_modules(code: str) -> list[Any]:
    """The ``helpers.exercises.nbNN`` modules ``code`` imports (those that exist and import)."""
    names = re.findall(r"helpers\.exercises\.(nb\w+)", code)
    for group in re.findall(r"from\s+helpers\.exercises\s+import\s+\(?([\w\s,]+)\)?", code):
        names += [n.strip() for n in group.split(",") if n.strip().startswith("nb")]
    modules = []
    for name in dict.fromkeys(names):
        try:
            modules.append(importlib.import_module(f"helpers.exercises.{name}"))
        except Exception:  # a module the course does not have (or that fails to import) cannot be expected
            continue
    return modules


def exercise_headings(nb: Any) -> dict[str, tuple[str, str]]:
    """``{number: (kind, heading text)}`` for every ``### Exercise N (kind): ...`` heading of ``nb``."""
    found = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for match in HEADING_RE.finditer(source(cell)):
                found[match.group(1)] = (match.group(2), " ".join(match.group(0).lstrip("#").split()))
    return found


def module_exercises(module: Any) -> list[tuple[Exercise, list[str]]]:
    """A checker module's exercises, each with the names it can be called by: its ``EXERCISES`` list (every
    module of the course has one), else every module-level ``Exercise``."""
    names_of: dict[int, list[str]] = {}
    objects: dict[int, Exercise] = {}
    for attr, value in vars(module).items():
        if isinstance(value, Exercise):
            names_of.setdefault(id(value), []).append(attr)
            objects[id(value)] = value
    listed = getattr(module, "EXERCISES", None)
    if isinstance(listed, (list, tuple)) and all(isinstance(ex, Exercise) for ex in listed):
        return [(ex, names_of.get(id(ex), [])) for ex in listed if names_of.get(id(ex))]
    return [(objects[key], names) for key, names in names_of.items()]


def expected_exercises(nb: Any) -> list[ExpectedExercise]:
    """The exercises whose checkers ``nb``'s code calls, in order of their first call.

    The checkers are found in the ``helpers.exercises.nbNN`` modules the notebook imports (their
    ``EXERCISES``); the kind comes from the exercise's heading (``### Exercise 3 (investigate): ...``),
    else from the checker.
    """
    code = _code(nb)
    headings = exercise_headings(nb)
    found: dict[int, tuple[int, ExpectedExercise]] = {}
    for module in checker_modules(code):
        for ex, names in module_exercises(module):
            key = id(ex)
            match = call_re(names).search(code)
            if match is None or key in found:
                continue
            kind, heading = headings.get(ex.number or "", (ex.kind, ex.title))
            found[key] = (match.start(), ExpectedExercise(ex.title, kind, tuple(names), module.__name__,
                                                          float(getattr(ex, "points", 0) or 0), ex.number or "",
                                                          heading))
    return [item for _, item in sorted(found.values(), key=lambda pair: pair[0])]


# ---------------------------------------------------------------- matching a submission to the course
def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


@dataclass
class Fingerprint:
    """What identifies a notebook, whatever its file is called."""

    title: str = ""
    headings: set[str] = field(default_factory=set)
    modules: set[str] = field(default_factory=set)
    calls: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, nb: Any) -> Fingerprint:
        title = ""
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                match = re.search(r"^#\s+(.+)$", source(cell), re.M)
                if match:
                    title = _norm(match.group(1))
                    break
        code = _code(nb)
        modules = checker_modules(code)
        calls = {name for module in modules for _, names in module_exercises(module) for name in names
                 if call_re([name]).search(code)}
        return cls(title, {_norm(text) for _, text in exercise_headings(nb).values()},
                   {m.__name__ for m in modules}, calls)


def _number(name: str) -> str | None:
    match = re.match(r"(\d\d)_", name)
    return match.group(1) if match else None


@functools.lru_cache(maxsize=8)
def _course(folder: str, stamp: tuple) -> list[tuple[Path, Fingerprint]]:
    import nbformat

    found = []
    for path in sorted(Path(folder).glob("[0-9][0-9]_*.ipynb")):
        try:
            found.append((path, Fingerprint.of(nbformat.read(path, as_version=4))))
        except Exception:
            continue
    return found


def course_notebooks(folder: Path = COURSE_NOTEBOOKS) -> list[tuple[Path, Fingerprint]]:
    """The course's notebooks in ``folder`` with their fingerprints (cached while the files are unchanged)."""
    stamp = tuple((p.name, p.stat().st_mtime_ns) for p in sorted(Path(folder).glob("[0-9][0-9]_*.ipynb")))
    return _course(str(folder), stamp)


def evidence(submission: Fingerprint, name: str, course_path: Path, course: Fingerprint) -> list[tuple[str, float]]:
    """What the submission shares with one course notebook, each item with its weight."""
    found = []
    if submission.title and submission.title == course.title:
        found.append(("its title", WEIGHTS["title"]))
    shared = submission.headings & course.headings
    if shared:
        found.append((f"{len(shared)} of {len(course.headings)} exercise headings", WEIGHTS["heading"] * len(shared)))
    modules = submission.modules & course.modules
    if modules:
        found.append((f"its checkers ({', '.join(sorted(m.rsplit('.', 1)[-1] for m in modules))})",
                      WEIGHTS["module"] + WEIGHTS["call"] * len(submission.calls & course.calls)))
    if name == course_path.name:
        found.append(("its file name", WEIGHTS["same name"]))
    elif _number(name) is not None and _number(name) == _number(course_path.name):
        found.append(("its file name's number", WEIGHTS["same number"]))
    return found


def match_course_notebook(nb: Any, path: Path, folder: Path = COURSE_NOTEBOOKS) -> tuple[Path | None, str]:
    """``(course notebook, what matched)`` for a submission, by content; ``(None, why not)`` when none fits."""
    fingerprint = Fingerprint.of(nb)
    scored = []
    for course_path, course in course_notebooks(folder):
        found = evidence(fingerprint, Path(path).name, course_path, course)
        scored.append((sum(w for _, w in found), course_path, found))
    scored.sort(key=lambda item: -item[0])
    if not scored or scored[0][0] < MIN_EVIDENCE:
        return None, "no course notebook in notebooks/ has its title, exercise headings or checkers"
    if len(scored) > 1 and scored[1][0] == scored[0][0]:
        return None, (f"it matches {scored[0][1].name} and {scored[1][1].name} equally well "
                      f"(does it combine two notebooks?)")
    best, course_path, found = scored[0]
    return course_path, "matched by " + ", ".join(what for what, _ in found)


def find_original(path: Path, course_notebooks_folder: Path = COURSE_NOTEBOOKS) -> Path | None:
    """The course notebook of the same file name, else of the same ``NN_`` number (the content is not read)."""
    same = course_notebooks_folder / Path(path).name
    if same.is_file():
        return same
    number = _number(Path(path).name)
    if number:
        candidates = sorted(course_notebooks_folder.glob(f"{number}_*.ipynb"))
        if len(candidates) == 1:
            return candidates[0]
    return None


# ---------------------------------------------------------------- naming a cell
def _shorten(text: str, width: int = 50) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def heading_above(nb: Any, index: int) -> str:
    """The last markdown heading at or above cell ``index`` (without its #'s), or ``""``."""
    for cell in reversed(nb.cells[:index + 1]):
        if cell.cell_type == "markdown":
            lines = [line for line in source(cell).splitlines() if re.match(r"^#{1,6}\s", line)]
            if lines:
                return " ".join(lines[-1].lstrip("#").split())
    return ""


def cell_label(nb: Any, index: int) -> str:
    """How a student finds cell ``index``: ``the cell "<its first line>" under "<the heading above>"``."""
    lines = [line for line in source(nb.cells[index]).splitlines() if line.strip()]
    first = f'the cell "{_shorten(lines[0])}"' if lines else "an empty cell"
    code_cells = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    if code_cells and code_cells[0] == index:
        first = f'the first code cell ("{_shorten(lines[0])}")' if lines else "the first code cell"
    heading = heading_above(nb, index)
    return f'{first} under "{_shorten(heading, 60)}"' if heading else first
