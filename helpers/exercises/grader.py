"""Grade learner notebooks: run each one top to bottom and collect every checker's verdict.

``python -m helpers.grade PATH...`` (a notebook, several, or a folder) executes each
notebook in a fresh kernel with nbclient, with a time limit per notebook and per cell,
reads the verdict lines the checkers printed (``<icon> Exercise N (...): <message>``,
see ``helpers.exercises.engine.parse_line``) and prints a table notebook × exercise:

* ✅ passed, ⏳ not attempted yet, ❌ anything else, with the checker's message and hint;
* the exercises a notebook should contain come from the course's original notebook of
  the same file name in ``notebooks/`` (or the same ``NN_`` number): a deleted checker
  call, a cell that raised before its check, a notebook that timed out or crashed are
  each reported for the exercise they cost, not as a traceback;
* a verdict line the notebook printed itself, without a checker call behind it, is not
  trusted (the checkers also log what they print, to a file only the grader reads).

``--json FILE`` writes the same table for a gradebook; ``--jobs N`` grades N notebooks at a
time. The exit status is 0 only when every exercise of every notebook passed and every
notebook ran to its end (1 otherwise; 2 for a usage error or no notebook found).

Each notebook runs with its own folder as the working directory (its setup cell finds
``helpers`` by walking up from there); a notebook outside the course repository runs from
the course's ``notebooks/`` folder instead. On a time-out the kernel and every process it
started are killed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from helpers.exercises.engine import FAILED, HINT_PREFIX, ICONS, NOT_ATTEMPTED, PASSED, TIME_LIMIT_ENV, \
    VERDICT_LOG_ENV, Exercise, parse_line

ROOT = Path(__file__).resolve().parents[2]
COURSE_NOTEBOOKS = ROOT / "notebooks"
DEFAULT_TIMEOUT = 300

# notebook statuses
RAN = "ran to the end"
CELL_ERROR = "a cell raised"
TIMED_OUT = "timed out"
KERNEL_DIED = "kernel died"
KERNEL_FAILED = "kernel failed to start"
NOT_A_NOTEBOOK = "not a notebook"


@dataclass
class ExpectedExercise:
    """An exercise a notebook should report: its checker's title, kind and the names it is called by."""

    title: str
    kind: str
    names: tuple[str, ...]
    module: str = ""            # e.g. "helpers.exercises.nb01"


@dataclass
class ExerciseGrade:
    """One row of the table."""

    title: str
    kind: str
    status: str                 # engine status: "passed", "failed" or "not attempted"
    message: str
    hint: str | None = None
    problem: str = ""           # why there is no verdict of the checker's own: "missing", "not run", ...
    expected: bool = True       # False for a verdict the course's notebook does not contain

    @property
    def icon(self) -> str:
        return ICONS[self.status]

    @property
    def passed(self) -> bool:
        return self.status == PASSED


@dataclass
class NotebookGrade:
    """The grade of one notebook."""

    path: str
    status: str
    note: str = ""
    seconds: float = 0.0
    original: str | None = None
    exercises: list[ExerciseGrade] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == RAN and bool(self.exercises) and all(e.passed for e in self.exercises)

    def counts(self) -> dict[str, int]:
        return {status: sum(e.status == status for e in self.exercises) for status in (PASSED, FAILED, NOT_ATTEMPTED)}

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        for row, grade in zip(data["exercises"], self.exercises):
            row["icon"] = grade.icon
        return data


# ---------------------------------------------------------------- what a notebook should contain
def _source(cell: Any) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def _code(nb: Any) -> str:
    return "\n".join(_source(cell) for cell in nb.cells if cell.cell_type == "code")


def _call_re(names: Iterable[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in names)
    return re.compile(rf"\b(?:{alternatives})\s*(?:\.\s*(?:check|evaluate)\s*)?\(")


def _checker_modules(code: str) -> list[Any]:
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


def _kinds_from_headings(nb: Any) -> dict[str, str]:
    kinds = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for number, kind in re.findall(r"^#+\s*Exercise\s+(\w+)\s*\((build|investigate|debug)\)", _source(cell),
                                           re.M):
                kinds[number] = kind
    return kinds


def expected_exercises(nb: Any) -> list[ExpectedExercise]:
    """The exercises whose checkers ``nb``'s code calls, in order of their first call.

    The checkers are found in the ``helpers.exercises.nbNN`` modules the notebook imports; the kind
    comes from the exercise's heading (``### Exercise 3 (investigate): ...``), else from the checker.
    """
    code = _code(nb)
    headings = _kinds_from_headings(nb)
    found: dict[int, tuple[int, ExpectedExercise]] = {}
    for module in _checker_modules(code):
        names_of: dict[int, list[str]] = {}
        objects: dict[int, Exercise] = {}
        for attr, value in vars(module).items():
            if isinstance(value, Exercise):
                names_of.setdefault(id(value), []).append(attr)
                objects[id(value)] = value
        for key, names in names_of.items():
            match = _call_re(names).search(code)
            if match is None or key in found:
                continue
            ex = objects[key]
            kind = headings.get(ex.number or "", ex.kind)
            found[key] = (match.start(), ExpectedExercise(ex.title, kind, tuple(names), module.__name__))
    return [item for _, item in sorted(found.values(), key=lambda pair: pair[0])]


def find_original(path: Path, course_notebooks: Path = COURSE_NOTEBOOKS) -> Path | None:
    """The course's own notebook a learner's copy comes from: same file name, else the same ``NN_`` number."""
    same = course_notebooks / path.name
    if same.is_file():
        return same
    match = re.match(r"(\d\d)_", path.name)
    if match:
        candidates = sorted(course_notebooks.glob(f"{match.group(1)}_*.ipynb"))
        if len(candidates) == 1:
            return candidates[0]
    return None


# ---------------------------------------------------------------- running a notebook
def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every process we can see (``/proc``, else ``ps``)."""
    table: dict[int, tuple[int, str]] = {}
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                fields = stat[stat.rfind(")") + 2:].split()
                table[int(entry.name)] = (int(fields[1]), fields[19])  # ppid, start time (clock ticks)
        return table
    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,lstart="], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return table
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            table[int(parts[0])] = (int(parts[1]), parts[2] if len(parts) > 2 else "")
    return table


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` (children, grandchildren, ...), with their start times."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found: dict[int, str] = {}
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        if child not in found:
            found[child] = table[child][1]
            stack.extend(children.get(child, []))
    return found


def kill_survivors(processes: dict[int, str]) -> list[int]:
    """SIGKILL each process of ``processes`` that still runs (the same process: same start time)."""
    killed = []
    table = _process_table()
    for pid, started in processes.items():
        if pid in table and table[pid][1] == started:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


def _kernel_pid(client: Any) -> int | None:
    km = getattr(client, "km", None)
    provisioner = getattr(km, "provisioner", None)
    pid = getattr(provisioner, "pid", None) or getattr(getattr(km, "kernel", None), "pid", None)
    return int(pid) if pid else None


def _workdir(path: Path) -> Path:
    """The notebook's own folder when ``helpers`` can be found above it, else the course's notebooks folder."""
    folder = path.resolve().parent
    if any((p / "helpers" / "__init__.py").is_file() for p in [folder, *folder.parents]):
        return folder
    return COURSE_NOTEBOOKS


@dataclass
class _Run:
    status: str = RAN
    note: str = ""
    stopped_at: int | None = None            # index of the cell that timed out / killed the kernel
    errors: dict[int, str] = field(default_factory=dict)  # cell index -> "Name: value"


def _error_text(output: Any) -> str:
    text = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}".strip().rstrip(":")
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


def execute(nb: Any, workdir: Path, *, timeout: float, cell_timeout: float | None, kernel_name: str,
            env: dict[str, str]) -> _Run:
    """Run ``nb``'s code cells in place, in a fresh kernel; stop at ``timeout`` seconds in total."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    run = _Run()
    client = NotebookClient(nb, kernel_name=kernel_name, allow_errors=True, record_timing=False,
                            shutdown_kernel="immediate", startup_timeout=120,
                            resources={"metadata": {"path": str(workdir)}})
    deadline = time.monotonic() + timeout
    started: dict[int, str] = {}
    try:
        # the kernel's own log (not the cells' output) would clutter the grader's report
        with client.setup_kernel(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
            pid = _kernel_pid(client)
            try:
                for index, cell in enumerate(nb.cells):
                    if cell.cell_type != "code":
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        run.status, run.stopped_at = TIMED_OUT, index
                        break
                    limit = min(remaining, cell_timeout) if cell_timeout else remaining
                    client.timeout = max(1, int(math.ceil(limit)))
                    try:
                        client.execute_cell(cell, index)
                    except CellTimeoutError:
                        run.status, run.stopped_at = TIMED_OUT, index
                        break
                    except DeadKernelError:
                        run.status, run.stopped_at = KERNEL_DIED, index
                        break
                    for output in cell.get("outputs", []):
                        if output.get("output_type") == "error":
                            run.errors.setdefault(index, _error_text(output))
            finally:
                if pid:
                    started = {**descendants(pid), pid: _process_table().get(pid, (0, ""))[1]}
    except Exception as err:  # the kernel could not start, or the client broke: a verdict, not a traceback
        if run.status == RAN and run.stopped_at is None:
            run.status = KERNEL_FAILED
            run.note = " ".join(f"{type(err).__name__}: {err}".split())[:300]
    finally:
        kill_survivors(started)
    if run.status == RAN and run.errors:
        run.status = CELL_ERROR
    return run


# ---------------------------------------------------------------- reading the verdicts
def _texts(cell: Any) -> Iterable[str]:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stdout":
            yield output.get("text", "")
        elif output.get("output_type") in ("execute_result", "display_data"):
            yield output.get("data", {}).get("text/plain", "")


def verdict_lines(nb: Any) -> list[tuple[int, str, str, str, str]]:
    """``(cell index, status, title, message, line)`` for every verdict line in ``nb``'s outputs, in order."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for text in _texts(cell):
            for raw in str(text).splitlines():
                line = raw.split("\r")[-1]
                parsed = parse_line(line)
                if parsed:
                    found.append((index, *parsed, line.strip()))
    return found


def _split_hint(message: str) -> str | None:
    return message.split(HINT_PREFIX, 1)[1].strip() if HINT_PREFIX in message else None


def _code_cell_number(nb: Any, index: int) -> int:
    return sum(1 for cell in nb.cells[:index + 1] if cell.cell_type == "code")


def _read_log(path: Path) -> set[str] | None:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    logged = set()
    for line in lines:
        with contextlib.suppress(ValueError, TypeError, KeyError):
            logged.add(json.loads(line)["line"].strip())
    return logged


def _grade_exercises(nb: Any, expected: list[ExpectedExercise], run: _Run, logged: set[str] | None
                     ) -> tuple[list[ExerciseGrade], str]:
    verdicts: dict[str, tuple[int, str, str, str]] = {}
    for index, status, title, message, line in verdict_lines(nb):
        verdicts[title] = (index, status, message, line)  # the last verdict of a title counts
    trust = bool(logged)
    note = "" if trust or not verdicts else ("the verdicts could not be verified: the notebook's checkers did not "
                                             "log them (an older helpers package?)")
    first_error = min(run.errors) if run.errors else None
    rows = []
    for item in expected:
        if item.title in verdicts:
            index, status, message, line = verdicts.pop(item.title)
            if trust and line not in logged:
                rows.append(ExerciseGrade(item.title, item.kind, FAILED, "this verdict line was printed by the "
                                          "notebook's own code, not by a checker call", problem="not checked"))
            else:
                rows.append(ExerciseGrade(item.title, item.kind, status, message, _split_hint(message)))
            continue
        call = _call_re(item.names)
        cells = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and call.search(_source(cell))]
        name = item.names[0]
        if not cells:
            problem, message = "missing", f"missing: the notebook no longer calls {name}(...) (the checker call " \
                                          f"was deleted or renamed)"
        elif run.stopped_at is not None and cells[0] >= run.stopped_at:
            problem = "not run"
            what = "the kernel died" if run.status == KERNEL_DIED else f"the notebook {run.status}"
            message = f"not run: {what} in code cell {_code_cell_number(nb, run.stopped_at)}, before this check"
        elif cells[0] in run.errors:
            problem = "cell raised"
            message = f"no verdict: its cell (code cell {_code_cell_number(nb, cells[0])}) raised " \
                      f"{run.errors[cells[0]]}"
            if first_error is not None and first_error < cells[0]:
                message += (f", after code cell {_code_cell_number(nb, first_error)} raised "
                            f"{run.errors[first_error]}")
        else:
            problem, message = "no verdict", f"no verdict: code cell {_code_cell_number(nb, cells[0])} calls " \
                                             f"{name} but printed no verdict line"
        rows.append(ExerciseGrade(item.title, item.kind, FAILED, message, problem=problem))
    for title, (index, status, message, line) in verdicts.items():  # checks the course's notebook does not have
        if trust and line not in logged:
            rows.append(ExerciseGrade(title, "", FAILED, "this verdict line was printed by the notebook's own code, "
                                      "not by a checker call", problem="not checked", expected=False))
        else:
            rows.append(ExerciseGrade(title, "", status, message, _split_hint(message), expected=False))
    return rows, note


def _run_note(nb: Any, run: _Run) -> str:
    if run.status in (TIMED_OUT, KERNEL_DIED) and run.stopped_at is not None:
        return f"{run.status} in code cell {_code_cell_number(nb, run.stopped_at)}"
    if run.errors:
        first = min(run.errors)
        where = "the setup cell" if _code_cell_number(nb, first) == 1 else f"code cell {_code_cell_number(nb, first)}"
        more = f" (and {len(run.errors) - 1} more cell{'s' if len(run.errors) > 2 else ''})" if len(run.errors) > 1 \
            else ""
        return f"{where} raised {run.errors[first]}{more}"
    return run.note


def grade_notebook(path: Path, *, timeout: float = DEFAULT_TIMEOUT, cell_timeout: float | None = None,
                   check_timeout: float | None = None, kernel_name: str | None = None) -> NotebookGrade:
    """Execute one learner notebook (a copy in memory: the file is not changed) and grade it."""
    import nbformat

    path = Path(path)
    shown = _display_path(path)
    original_path = find_original(path)
    original = None
    if original_path is not None:
        with contextlib.suppress(Exception):
            original = nbformat.read(original_path, as_version=4)
    try:
        nb = nbformat.read(path, as_version=4)
        if not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
    except Exception as err:
        grade = NotebookGrade(shown, NOT_A_NOTEBOOK, " ".join(f"{type(err).__name__}: {err}".split())[:200],
                              original=_display_path(original_path) if original_path else None)
        for item in expected_exercises(original) if original is not None else []:
            grade.exercises.append(ExerciseGrade(item.title, item.kind, FAILED, "not run: the file is not a notebook",
                                                 problem="not run"))
        return grade
    expected = expected_exercises(original if original is not None else nb)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ffn-grade-") as tmp:
        log = Path(tmp) / "verdicts.jsonl"
        log.touch()
        env = {**os.environ, VERDICT_LOG_ENV: str(log), "FFN_STATIC_PLOTS": "1"}
        if check_timeout is not None:
            env[TIME_LIMIT_ENV] = f"{check_timeout:g}"
        run = execute(nb, _workdir(path), timeout=timeout, cell_timeout=cell_timeout,
                      kernel_name=kernel_name or nb.metadata.get("kernelspec", {}).get("name") or "python3", env=env)
        logged = _read_log(log)
    rows, note = _grade_exercises(nb, expected, run, logged)
    notes = [n for n in (_run_note(nb, run), note) if n]
    if original is None:
        notes.append("no course notebook of this name in notebooks/: graded the checks it calls")
    return NotebookGrade(shown, run.status, "; ".join(notes), time.monotonic() - start,
                         _display_path(original_path) if original_path else None, rows)


def _display_path(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    return str(path)


def collect(paths: Sequence[str | Path], recursive: bool = False) -> list[Path]:
    """The notebooks to grade: files as given, folders' ``*.ipynb`` (sorted; checkpoints skipped)."""
    found: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            pattern = "**/*.ipynb" if recursive else "*.ipynb"
            found += sorted(p for p in path.glob(pattern) if ".ipynb_checkpoints" not in p.parts)
        else:
            found.append(path)
    return list(dict.fromkeys(found))


# ---------------------------------------------------------------- the report
def format_report(grades: Sequence[NotebookGrade]) -> str:
    """The table: per notebook its status and one row per exercise, then a summary grid."""
    lines = []
    title_width = max([len(e.title) for g in grades for e in g.exercises] + [20])
    for grade in grades:
        counts = grade.counts()
        head = f"{grade.path} — {grade.status}"
        if grade.status != NOT_A_NOTEBOOK:
            head += f" ({grade.seconds:.0f} s)"
        head += f": {counts[PASSED]}/{len(grade.exercises)} passed"
        lines.append(head)
        if grade.note:
            lines.append(f"    note: {grade.note}")
        for ex in grade.exercises:
            extra = "" if ex.expected else " [not in the course notebook]"
            lines.append(f"  {ex.icon} {ex.title:<{title_width}}  {ex.kind or '-':<11}  {ex.message}{extra}")
        lines.append("")
    lines.append("Summary")
    path_width = max([len(g.path) for g in grades] + [8])
    for grade in grades:
        icons = " ".join(e.icon for e in grade.exercises) or "—"
        verdict = "all passed" if grade.passed else grade.status if grade.status != RAN else ""
        lines.append(f"  {grade.path:<{path_width}}  {icons}  {grade.counts()[PASSED]}/{len(grade.exercises)}"
                     f"{'  ' + verdict if verdict else ''}")
    total = sum(g.passed for g in grades)
    lines.append(f"{total} of {len(grades)} notebook{'s' if len(grades) != 1 else ''} passed every exercise.")
    return "\n".join(lines)


def to_json(grades: Sequence[NotebookGrade]) -> dict[str, Any]:
    return {"passed": all(g.passed for g in grades) and bool(grades),
            "notebooks": [g.to_json() for g in grades]}


def _grade_path(path: Path, options: dict[str, Any]) -> NotebookGrade:
    if not path.exists():
        return NotebookGrade(_display_path(path), NOT_A_NOTEBOOK, "no such file")
    return grade_notebook(path, **options)


def grade_all(paths: Sequence[Path], *, jobs: int = 1, show_progress: bool = True, **options: Any
              ) -> list[NotebookGrade]:
    """Grade ``paths`` in order (``jobs`` at a time, each in its own process), with a bar over notebooks."""
    from helpers.progress import progress

    bar = progress(total=len(paths), desc="grading", unit="notebook", disable=not show_progress, file=sys.stderr)
    grades: list[NotebookGrade | None] = [None] * len(paths)
    if jobs == 1 or len(paths) == 1:
        for i, path in enumerate(paths):
            bar.set_postfix_str(path.name)
            grades[i] = _grade_path(path, options)
            bar.update()
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_grade_path, path, options): i for i, path in enumerate(paths)}
            for future in as_completed(futures):
                grades[futures[future]] = future.result()
                bar.set_postfix_str(paths[futures[future]].name)
                bar.update()
    bar.close()
    return [g for g in grades if g is not None]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.grade",
        description="Run learner notebooks top to bottom in a fresh kernel and tabulate every exercise's verdict.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a notebook, several, or a folder of notebooks")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds per notebook, all cells together (default {DEFAULT_TIMEOUT})")
    parser.add_argument("--cell-timeout", type=float, default=None, help="seconds per cell (default: no own limit)")
    parser.add_argument("--check-timeout", type=float, default=None,
                        help=f"the checkers' time limit per exercise, seconds of computing time "
                             f"(sets {TIME_LIMIT_ENV}; default: the checkers' own)")
    parser.add_argument("--json", metavar="FILE", help="also write the grades to FILE as JSON")
    parser.add_argument("-r", "--recursive", action="store_true", help="look for notebooks in sub-folders too")
    parser.add_argument("--kernel", default=None, help="kernel name (default: the notebook's, else python3)")
    parser.add_argument("-j", "--jobs", type=int, default=1,
                        help="notebooks graded at the same time, each in its own process (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.jobs < 1:
        parser.error(f"--jobs must be a positive int, got {args.jobs}")
    paths = collect(args.paths, args.recursive)
    if not paths:
        print("No notebooks found in: " + ", ".join(map(str, args.paths)), file=sys.stderr)
        return 2
    options = dict(timeout=args.timeout, cell_timeout=args.cell_timeout, check_timeout=args.check_timeout,
                   kernel_name=args.kernel)
    grades = grade_all(paths, jobs=args.jobs, show_progress=not args.no_progress, **options)
    print(format_report(grades))
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(grades), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return 0 if all(g.passed for g in grades) else 1
