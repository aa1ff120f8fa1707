"""Grade learner notebooks: run each one top to bottom and collect every checker's verdict.

``python -m helpers.grade PATH...`` (a notebook, several, or a folder) executes each submission in
a fresh kernel (``helpers.exercises.kernel``), reads the verdict lines its checkers printed
(``<icon> Exercise N (...): <message>``, see ``helpers.exercises.engine.parse_line``) and prints a
table submission × exercise with points (``helpers.exercises.gradebook``):

* the exercises a submission must report are those of the course notebook it is matched to **by
  content** (``helpers.exercises.matching``), so "Copy of 05_mixture_of_experts.ipynb" and
  "alice_ffn.ipynb" are graded as notebook 05, and a deleted checker call, a cell that raised
  before its check, a notebook that timed out or crashed are each reported for the exercise they
  cost, with the cell named by its first line and the heading above it;
* a verdict line the notebook printed itself, without a checker call behind it, is not trusted
  (the checkers also log what they print, to a file only the grader reads), and a check passed by the
  checker's own code (``f = check_x.reference``) is flagged in the gradebook's notes.

``--json FILE`` writes everything; ``--csv FILE`` a gradebook, one row per student (a student is the
first folder below the folder graded, else the file's name: a folder of two notebooks is one row);
``--feedback DIR`` a Markdown file per student; ``--points FILE`` overrides the points; ``--jobs N``
grades N submissions at a time. Before anything runs, every path to grade must exist and every output
must be writable (a missing folder, ``--feedback`` naming a file, two outputs on one path are usage
errors), so a typo never costs a grading run or overwrites a gradebook; without ``--recursive``, the
sub-folders left out are named. The exit status is 0 only when every exercise of every notebook passed
and every notebook ran to its end (1 otherwise; 2 for a usage error or no notebook found).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from helpers.exercises.engine import CHECKERS_CODE, FAILED, HINT_PREFIX, TIME_LIMIT_ENV, VERDICT_LOG_ENV, parse_line
from helpers.exercises.gradebook import ExerciseGrade, NotebookGrade, PointsError, format_report, load_points, \
    points_for, points_keys, to_json, write_csv, write_feedback
from helpers.exercises.kernel import CELL_ERROR, KERNEL_DIED, KERNEL_FAILED, NOT_A_NOTEBOOK, RAN, TIMED_OUT, Run, \
    execute, working_folder
from helpers.exercises.matching import COURSE_NOTEBOOKS, ExpectedExercise, call_re, cell_label, checker_modules, \
    course_notebooks, exercise_headings, expected_exercises, find_original, match_course_notebook, source

__all__ = ["main", "grade_notebook", "grade_all", "collect", "expected_exercises", "find_original",
           "verdict_lines", "format_report", "to_json", "ExpectedExercise", "ExerciseGrade", "NotebookGrade",
           "RAN", "CELL_ERROR", "TIMED_OUT", "KERNEL_DIED", "KERNEL_FAILED", "NOT_A_NOTEBOOK"]

DEFAULT_TIMEOUT = 300
#: seconds one cell may run: the course's longest cells take well under a minute on a loaded 2-core machine
DEFAULT_CELL_TIMEOUT = 120

_Run = Run                        # the names the tests and notebooks' tests knew
_checker_modules = checker_modules


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


def _read_log(path: Path) -> dict[str, str] | None:
    """Every verdict line the checkers logged, with its reason (``""`` when it passed or logged none)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    logged: dict[str, str] = {}
    for line in lines:
        with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
            record = json.loads(line)
            logged[record["line"].strip()] = str(record.get("reason", ""))
    return logged


_NOT_CHECKED = "this verdict line was printed by the notebook's own code, not by a checker call"


def _grade_exercises(nb: Any, expected: list[ExpectedExercise], run: Run, logged: dict[str, str] | set[str] | None,
                     notebook: str = "?", overrides: dict[str, float] | None = None
                     ) -> tuple[list[ExerciseGrade], str]:
    """One row per expected exercise (its verdict, or why there is none), then any other verdict printed."""
    verdicts: dict[str, tuple[int, str, str, str]] = {}
    for index, status, title, message, line in verdict_lines(nb):
        verdicts[title] = (index, status, message, line)  # the last verdict of a title counts
    trust = bool(logged)
    note = "" if trust or not verdicts else ("the verdicts could not be verified: the notebook's checkers did not "
                                             "log them (an older helpers package?)")
    own_headings = exercise_headings(nb)
    first_error = min(run.errors) if run.errors else None
    rows = []
    for item in expected:
        worth = points_for(item, notebook, overrides or {})
        heading = own_headings.get(item.number, ("", item.heading))[1] or item.heading
        row = ExerciseGrade(item.title, item.kind, FAILED, "", max_points=worth, number=item.number, heading=heading)
        rows.append(row)
        if item.title in verdicts:
            index, status, message, line = verdicts.pop(item.title)
            if trust and line not in logged:
                row.message, row.problem = _NOT_CHECKED, "not checked"
            else:
                row.status, row.message, row.hint = status, message, _split_hint(message)
                row.points = worth if row.passed else 0.0
                if isinstance(logged, dict) and logged.get(line) == CHECKERS_CODE:
                    row.problem = CHECKERS_CODE
            continue
        if run.status == KERNEL_FAILED:
            row.problem, row.message = "not run", "not run: the kernel failed to start, so no cell ran"
            continue
        call = call_re(item.names)
        cells = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and call.search(source(cell))]
        name = item.names[0]
        if not cells:
            row.problem = "missing"
            row.message = f"missing: the notebook no longer calls {name}(...) (the checker call was deleted or renamed)"
        elif run.stopped_at is not None and cells[0] >= run.stopped_at:
            row.problem = "not run"
            what = "the kernel died" if run.status == KERNEL_DIED else f"the notebook {run.status}"
            row.message = f"not run: {what} in {cell_label(nb, run.stopped_at)}, before this check"
        elif cells[0] in run.errors:
            row.problem = "cell raised"
            row.message = f"no verdict: its cell ({cell_label(nb, cells[0])}) raised {run.errors[cells[0]]}"
            if first_error is not None and first_error < cells[0]:
                row.message += f", after {cell_label(nb, first_error)} raised {run.errors[first_error]}"
        else:
            row.problem = "no verdict"
            row.message = f"no verdict: {cell_label(nb, cells[0])} calls {name} but printed no verdict line"
    for title, (index, status, message, line) in verdicts.items():  # checks the course's notebook does not have
        if trust and line not in logged:
            rows.append(ExerciseGrade(title, "", FAILED, _NOT_CHECKED, problem="not checked", expected=False))
        else:
            rows.append(ExerciseGrade(title, "", status, message, _split_hint(message), expected=False))
    return rows, note


def _run_note(nb: Any, run: Run) -> str:
    if run.status in (TIMED_OUT, KERNEL_DIED) and run.stopped_at is not None:
        limit = f" (the limit: {run.limit})" if run.status == TIMED_OUT and run.limit else ""
        return f"{run.status} in {cell_label(nb, run.stopped_at)}{limit}"
    if run.errors:
        first = min(run.errors)
        more = f" (and {len(run.errors) - 1} more cell{'s' if len(run.errors) > 2 else ''})" if len(run.errors) > 1 \
            else ""
        return f"{cell_label(nb, first)} raised {run.errors[first]}{more}"
    return run.note


# ---------------------------------------------------------------- one submission
def grade_notebook(path: Path, *, timeout: float = DEFAULT_TIMEOUT, cell_timeout: float | None = DEFAULT_CELL_TIMEOUT,
                   check_timeout: float | None = None, kernel_name: str | None = None,
                   points: dict[str, float] | None = None, label: str | None = None,
                   student: str | None = None) -> NotebookGrade:
    """Execute one submission (a copy in memory: the file is not changed) and grade it."""
    import nbformat

    path = Path(path)
    shown = label or _display_path(path)
    grade = NotebookGrade(shown, RAN, student=student or path.stem)
    try:
        nb = nbformat.read(path, as_version=4)
        if not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
    except Exception as err:
        grade.status, grade.note = NOT_A_NOTEBOOK, " ".join(f"{type(err).__name__}: {err}".split())[:200]
        original = find_original(path)  # unreadable: only its name can say which notebook it was
        if original is not None:
            grade.original, grade.matched_by = _display_path(original), "matched by its file name only"
            for item in expected_exercises(nbformat.read(original, as_version=4)):
                grade.exercises.append(ExerciseGrade(item.title, item.kind, FAILED, "not run: the file is not a "
                                                     "notebook", problem="not run", number=item.number,
                                                     heading=item.heading,
                                                     max_points=points_for(item, grade.notebook, points or {})))
        return grade
    original_path, why = match_course_notebook(nb, path)
    original = nbformat.read(original_path, as_version=4) if original_path is not None else None
    if original_path is not None:
        grade.original, grade.matched_by = _display_path(original_path), why
    expected = expected_exercises(original if original is not None else nb)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ffn-grade-") as tmp:
        log = Path(tmp) / "verdicts.jsonl"
        log.touch()
        env = {**os.environ, VERDICT_LOG_ENV: str(log), "FFN_STATIC_PLOTS": "1"}
        if check_timeout is not None:
            env[TIME_LIMIT_ENV] = f"{check_timeout:g}"
        run = execute(nb, working_folder(path), timeout=timeout, cell_timeout=cell_timeout,
                      kernel_name=kernel_name or nb.metadata.get("kernelspec", {}).get("name") or "python3", env=env)
        logged = _read_log(log)
    grade.seconds = time.monotonic() - start
    grade.status = run.status
    grade.exercises, note = _grade_exercises(nb, expected, run, logged, grade.notebook, points)
    grade.run_note = _run_note(nb, run)
    notes = [n for n in (grade.run_note, note) if n]
    if original is None:
        notes.append(f"graded the checks it calls ({why})")
    grade.note = "; ".join(notes)
    return grade


def _display_path(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    return str(path)


# ---------------------------------------------------------------- a class of submissions
def _skipped(part: str) -> bool:
    return part == ".ipynb_checkpoints" or part.startswith(".")


def collect(paths: Sequence[str | Path], recursive: bool = False) -> list[Path]:
    """The notebooks to grade: files as given, folders' ``*.ipynb`` (sorted; checkpoints and hidden folders
    skipped)."""
    found: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            pattern = "**/*.ipynb" if recursive else "*.ipynb"
            found += sorted(p for p in path.glob(pattern)
                            if not any(_skipped(part) for part in p.relative_to(path).parts[:-1]))
        else:
            found.append(path)
    return list(dict.fromkeys(found))


def skipped_folders(paths: Sequence[str | Path]) -> list[Path]:
    """The sub-folders of the folders in ``paths`` that hold notebooks (at any depth) ``collect`` leaves out
    without ``recursive``."""
    found = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            for sub in sorted(p for p in path.iterdir() if p.is_dir() and not _skipped(p.name)):
                if any(not any(_skipped(part) for part in nb.relative_to(sub).parts[:-1])
                       for nb in sub.glob("**/*.ipynb")):
                    found.append(sub)
    return found


def name_submissions(paths: Sequence[Path], folders: Sequence[Path] = ()) -> list[tuple[str, str]]:
    """``(label, student)`` for each submission. Inside a folder that was graded, the label is the path
    below it and the student its first sub-folder (``alice/05.ipynb`` -> ``alice``; every notebook in
    ``alice/`` is alice's), else the file's name; a file given on its own is labelled by its path and is
    its own student (two such files of the same name are told apart by their paths)."""
    named = []
    for path in paths:
        root = next((f for f in folders if _within(path, f)), None)
        if root is not None:
            relative = path.resolve().relative_to(root.resolve())
            named.append((relative.as_posix(), relative.parts[0] if len(relative.parts) > 1 else relative.stem, True))
        else:
            named.append((_display_path(path), path.stem, False))
    students = [student for _, student, _ in named]
    return [(label, student if in_folder or students.count(student) == 1 else str(Path(label).with_suffix("")))
            for label, student, in_folder in named]


def _within(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def _grade_path(path: Path, options: dict[str, Any]) -> NotebookGrade:
    if not path.exists():  # gone since the command line was checked
        return NotebookGrade(options.get("label") or _display_path(path), NOT_A_NOTEBOOK, "no such file",
                             student=options.get("student") or path.stem)
    return grade_notebook(path, **options)


def grade_all(paths: Sequence[Path], *, jobs: int = 1, show_progress: bool = True,
              names: Sequence[tuple[str, str]] | None = None, **options: Any) -> list[NotebookGrade]:
    """Grade ``paths`` in order (``jobs`` at a time, each in its own process); the bar names each submission."""
    from helpers.progress import progress

    names = list(names) if names is not None else name_submissions(paths)
    per_path = [{**options, "label": label, "student": student} for label, student in names]
    bar = progress(total=len(paths), desc="grading", unit="notebook", disable=not show_progress, file=sys.stderr)
    grades: list[NotebookGrade | None] = [None] * len(paths)
    if jobs == 1 or len(paths) == 1:
        for i, path in enumerate(paths):
            bar.set_postfix_str(names[i][0])
            grades[i] = _grade_path(path, per_path[i])
            bar.update()
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_grade_path, path, per_path[i]): i for i, path in enumerate(paths)}
            for future in as_completed(futures):
                i = futures[future]
                grades[i] = future.result()
                bar.set_postfix_str(f"{names[i][0]} done")
                bar.update()
    bar.close()
    return [g for g in grades if g is not None]


def _course_exercises(folder: Path = COURSE_NOTEBOOKS) -> list[tuple[str, list[ExpectedExercise]]]:
    import nbformat

    return [(path.name[:2], expected_exercises(nbformat.read(path, as_version=4)))
            for path, _ in course_notebooks(folder)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.grade",
        description="Run learner notebooks top to bottom in a fresh kernel and grade every exercise.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a notebook, several, or a folder of notebooks")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds per notebook, all cells together (default {DEFAULT_TIMEOUT})")
    parser.add_argument("--cell-timeout", type=float, default=DEFAULT_CELL_TIMEOUT,
                        help=f"seconds per cell (default {DEFAULT_CELL_TIMEOUT}; 0: only the notebook's limit)")
    parser.add_argument("--check-timeout", type=float, default=None,
                        help=f"the checkers' time limit per exercise, seconds of computing time "
                             f"(sets {TIME_LIMIT_ENV}; default: the checkers' own)")
    parser.add_argument("--points", metavar="FILE",
                        help='JSON overriding the points, e.g. {"build": 1, "investigate": 2, "05/6": 4}')
    parser.add_argument("--json", metavar="FILE", help="also write the grades to FILE as JSON")
    parser.add_argument("--csv", metavar="FILE", help="write a gradebook: one row per student, a column per exercise")
    parser.add_argument("--feedback", metavar="DIR", help="write one Markdown feedback file per student into DIR")
    parser.add_argument("-r", "--recursive", action="store_true", help="look for notebooks in sub-folders too")
    parser.add_argument("--kernel", default=None, help="kernel name (default: the notebook's, else python3)")
    parser.add_argument("-j", "--jobs", type=int, default=1,
                        help="notebooks graded at the same time, each in its own process (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.cell_timeout is not None and args.cell_timeout < 0:
        parser.error(f"--cell-timeout must be a number of seconds >= 0, got {args.cell_timeout:g}")
    if args.jobs < 1:
        parser.error(f"--jobs must be a positive int, got {args.jobs}")
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        parser.error("no such file or folder: " + ", ".join(missing) + " (nothing was graded or written)")
    problem = output_problem(args.csv, args.json, args.feedback, args.paths)
    if problem:
        parser.error(problem + " (nothing was graded or written)")
    overrides: dict[str, float] = {}
    if args.points:
        try:
            overrides = load_points(args.points, points_keys(_course_exercises()))
        except PointsError as err:
            parser.error(str(err))
    paths = collect(args.paths, args.recursive)
    left_out = [] if args.recursive else skipped_folders(args.paths)
    note = ""
    if left_out:
        shown = ", ".join(f"{_display_path(p)}/" for p in left_out[:5]) + (", ..." if len(left_out) > 5 else "")
        note = (f"Not graded: {len(left_out)} sub-folder{'s' if len(left_out) != 1 else ''} holding notebooks "
                f"({shown}); add --recursive to grade them.")
    if not paths:
        print("No notebooks found in: " + ", ".join(map(str, args.paths)) + (f". {note}" if note else ""),
              file=sys.stderr)
        return 2
    if note:
        print(note, file=sys.stderr)
    names = name_submissions(paths, [Path(p) for p in args.paths if Path(p).is_dir()])
    options = dict(timeout=args.timeout, cell_timeout=args.cell_timeout or None, check_timeout=args.check_timeout,
                   kernel_name=args.kernel, points=overrides)
    grades = grade_all(paths, jobs=args.jobs, show_progress=not args.no_progress, names=names, **options)
    print(format_report(grades))
    if note:
        print(note)
    if args.json:
        _write_text(Path(args.json), json.dumps(to_json(grades), ensure_ascii=False, indent=2) + "\n")
    if args.csv:
        write_csv(grades, args.csv)
    if args.feedback:
        write_feedback(grades, args.feedback)
    return 0 if all(g.passed for g in grades) else 1


def _write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file beside it, then a rename)."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.",
                                     delete=False) as handle:
        handle.write(text)
    os.replace(handle.name, path)


def output_problem(csv_file: str | None, json_file: str | None, feedback: str | None,
                   inputs: Sequence[str] = ()) -> str | None:
    """What is wrong with the output paths, before anything is graded (``None`` when they can be written)."""
    outputs = [(flag, Path(value)) for flag, value in (("--csv", csv_file), ("--json", json_file),
                                                        ("--feedback", feedback)) if value]
    for flag, path in outputs:
        if flag == "--feedback":
            if path.exists() and not path.is_dir():
                return f"--feedback {path}: that is a file; name a folder (it is created if missing)"
            folder = path if path.is_dir() else path.parent
        else:
            if path.is_dir():
                return f"{flag} {path}: that is a folder; name a file, e.g. {path / f'grades.{flag[2:]}'}"
            if path.suffix == ".ipynb" or any(path.resolve() == Path(p).resolve() for p in inputs):
                return f"{flag} {path}: that would overwrite a notebook to grade"
            folder = path.parent
        if not folder.is_dir():
            return f"{flag} {path}: the folder {folder} does not exist"
        if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            return f"{flag} {path}: cannot write there"
    resolved = [path.resolve() for _, path in outputs]
    if len(set(resolved)) != len(resolved):
        return "--csv, --json and --feedback must name different paths"
    return None
