"""The grader, ``python -m helpers.grade``: real notebooks (blank and solved) and doctored copies.

Grading costs a kernel per notebook, so only notebook 01 is graded for real (blank: all ⏳ and a
non-zero exit; solutions: all ✅ and exit 0, through the command line from another folder). The
doctored cases are small synthetic notebooks built in a tmp folder: a right answer, a wrong one,
an infinite loop (stopped by the checker's time limit), a cell that raises, a deleted checker
call, a verdict line printed by hand, a notebook that crashes at the top, one that never ends
(and leaves a process behind, which must be killed), and a file that is not a notebook. A class
of two renamed copies of notebook 05 ("Copy of ...", "bob_ffn.ipynb") is graded with points, a
CSV gradebook and feedback files; matching by content, the points file and the naming of
submissions are tested without a kernel.

The teacher's mistakes of the trial (``learner-and-teacher-trial.md``, part C): a mistyped path is a
usage error (exit 2) that writes nothing, output paths are checked before grading, a student folder
with two notebooks is one row and one feedback file, sub-folders left out without ``--recursive`` are
named, every status reads as a sentence to the student, and the checker's own reference handed in as
an answer is flagged.
"""
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from helpers.env import SETUP_CELL
from helpers.exercises.engine import CHECKERS_CODE, FAILED, NOT_ATTEMPTED, PASSED
from helpers.exercises.grader import (CELL_ERROR, KERNEL_DIED, NOT_A_NOTEBOOK, RAN, TIMED_OUT, ExpectedExercise, _Run,
                                      _grade_exercises, collect, expected_exercises, find_original, main,
                                      verdict_lines)

ROOT = Path(__file__).resolve().parent.parent
BLANK = ROOT / "notebooks" / "01_activations.ipynb"
SOLVED = ROOT / "notebooks" / "solutions" / "01_activations.ipynb"


def _grade(tmp_path, *args):
    """Run the grader in this process; returns (exit status, the JSON gradebook)."""
    out = tmp_path / "grades.json"
    status = main([*map(str, args), "--json", str(out), "--no-progress"])
    return status, json.loads(out.read_text(encoding="utf-8"))


def _notebook(*cells, name="01_activations.ipynb", folder):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(c[3:]) if c.startswith("md:") else nbformat.v4.new_code_cell(c)
                for c in cells]
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


# ---------------------------------------------------------------- the course's own notebooks
def test_blank_notebook_is_all_not_attempted(tmp_path, capsys):
    status, book = _grade(tmp_path, BLANK)
    assert status != 0 and not book["passed"]
    (grade,) = book["notebooks"]
    expected = expected_exercises(nbformat.read(BLANK, as_version=4))
    assert grade["status"] == RAN and len(grade["exercises"]) == len(expected) >= 4
    assert [e["title"] for e in grade["exercises"]] == [e.title for e in expected]
    assert all(e["status"] == NOT_ATTEMPTED and e["icon"] == "⏳" for e in grade["exercises"]), grade
    report = capsys.readouterr().out
    assert "⏳ Exercise 1 (" in report and f"0/{len(expected)} passed" in report


def test_solutions_pass_from_the_command_line_in_any_folder(tmp_path):
    out = tmp_path / "book.json"
    result = subprocess.run([sys.executable, str(ROOT / "helpers" / "grade.py"), str(SOLVED), "--json", str(out)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 of 1 notebook passed every exercise." in result.stdout
    assert "100%" in result.stderr  # the progress bar over notebooks
    (grade,) = json.loads(out.read_text(encoding="utf-8"))["notebooks"]
    assert grade["passed"] and grade["original"].endswith("notebooks/01_activations.ipynb")
    assert grade["exercises"] and all(e["status"] == PASSED for e in grade["exercises"])
    assert {e["kind"] for e in grade["exercises"]} <= {"build", "investigate"}


# ---------------------------------------------------------------- doctored copies
def _pick_original():
    """A course notebook with at least five exercises (one per doctored role) and its expected exercises."""
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        expected = expected_exercises(nbformat.read(path, as_version=4))
        if len(expected) >= 5:
            return path, expected
    raise AssertionError("no course notebook has five exercises")


def test_a_doctored_copy_gets_a_verdict_for_every_exercise(tmp_path):
    original, expected = _pick_original()
    right, wrong, loops, raises, deleted = expected[:5]
    assert right.names[0] == "check_collapse", right  # the right answer below is a learner's collapse
    imports = "\n".join(f"from {e.module} import {e.names[0]}" for e in expected[:4])
    path = _notebook(
        SETUP_CELL,
        imports,
        "def collapse(layers):\n    w, b = layers[0]\n    for w_next, b_next in layers[1:]:\n"
        "        w, b = w_next @ w, w_next @ b + b_next\n    return w, b\n\ncheck_collapse(collapse)",
        f"{wrong.names[0]}({wrong.names[0]}.mistakes[0][1])",
        f"def endless(*args, **kwargs):\n    while True:\n        pass\n\n{loops.names[0]}(endless)",
        f"raise ValueError('boom')\n{raises.names[0]}(lambda *args: {raises.names[0]}.reference(*args))",
        "print('✅ Exercise 99 (made up): passed (4 hidden test cases)')",
        name=original.name, folder=tmp_path / "alice")
    start = time.monotonic()
    status, book = _grade(tmp_path, path, "--check-timeout", "1")
    assert status != 0 and time.monotonic() - start < 240
    (grade,) = book["notebooks"]
    assert grade["status"] == CELL_ERROR and "raised ValueError: boom" in grade["note"]
    rows = {e["title"]: e for e in grade["exercises"]}
    assert rows[right.title]["status"] == PASSED
    assert rows[wrong.title]["status"] == FAILED and rows[wrong.title]["hint"] == _first_hint(wrong)
    assert rows[loops.title]["message"].startswith("time limit: your function"), rows[loops.title]
    assert rows[raises.title]["problem"] == "cell raised" and "ValueError: boom" in rows[raises.title]["message"]
    assert rows[deleted.title]["problem"] == "missing" and deleted.names[0] in rows[deleted.title]["message"]
    fake = rows["Exercise 99 (made up)"]
    assert fake["status"] == FAILED and fake["problem"] == "not checked" and not fake["expected"]
    assert [e["title"] for e in grade["exercises"]][:len(expected)] == [e.title for e in expected]


def _first_hint(item):
    checker = getattr(importlib.import_module(item.module), item.names[0])
    return " ".join(checker.mistakes[0][0].split())


def test_a_notebook_that_crashes_at_the_top(tmp_path):
    path = _notebook("import helpers_that_do_not_exist",
                     "from helpers.exercises.nb01 import check_collapse",
                     "check_collapse(lambda *args: None)", name="crash.ipynb", folder=tmp_path)
    status, book = _grade(tmp_path, path)
    (grade,) = book["notebooks"]
    assert status != 0 and grade["status"] == CELL_ERROR
    assert grade["note"].startswith('the first code cell ("import helpers_that_do_not_exist") raised '
                                    'ModuleNotFoundError'), grade["note"]
    assert "graded the checks it calls (no course notebook" in grade["note"] and grade["original"] is None
    (row,) = grade["exercises"]
    assert row["status"] == FAILED and 'after the first code cell ("import helpers_that_do_not_exist") raised ' \
        'ModuleNotFoundError' in row["message"], row
    assert row["message"].startswith('no verdict: its cell (the cell "check_collapse(lambda *args: None)") raised '), \
        row


def test_a_notebook_that_never_ends_is_stopped_and_its_processes_killed(tmp_path):
    pid_file = tmp_path / "child.pid"
    path = _notebook(
        "import subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "while True:\n    pass",
        "from helpers.exercises.nb01 import check_collapse\ncheck_collapse(lambda *args: None)",
        name="loop.ipynb", folder=tmp_path)
    start = time.monotonic()
    status, book = _grade(tmp_path, path, "--timeout", "8")
    assert time.monotonic() - start < 90
    (grade,) = book["notebooks"]
    assert status != 0 and grade["status"] == TIMED_OUT
    assert grade["note"].startswith('timed out in the first code cell ("import subprocess, sys") (the limit: the '
                                    "notebook's 8 s); "), grade["note"]
    (row,) = grade["exercises"]
    assert row["problem"] == "not run" and "before this check" in row["message"]
    child = int(pid_file.read_text())
    for _ in range(50):  # a killed process may take a moment to be reaped
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child), "the kernel's child process survived the time-out"


def test_a_notebook_that_kills_its_kernel(tmp_path):
    path = _notebook("import os\nos._exit(1)",
                     "from helpers.exercises.nb01 import check_collapse\ncheck_collapse(lambda *args: None)",
                     name="dies.ipynb", folder=tmp_path)
    nb = nbformat.read(path, as_version=4)  # a verdict saved in the file, from an earlier run: not this run's
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="✅ Exercise 1 (collapse a stack of "
                                                  "affine layers): passed (5 hidden test cases)\n")]
    nbformat.write(nb, path)
    status, book = _grade(tmp_path, path)
    (grade,) = book["notebooks"]
    assert status != 0 and grade["status"] == KERNEL_DIED
    assert grade["note"].startswith('kernel died in the first code cell ("import os"); '), grade["note"]
    assert grade["exercises"][0]["message"] == 'not run: the kernel died in the first code cell ("import os"), ' \
        "before this check"


def _alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    return stat[stat.rfind(")") + 2] != "Z"  # a zombie is dead, waiting for its parent


def test_a_file_that_is_not_a_notebook(tmp_path):
    broken = tmp_path / "bob" / "01_activations.ipynb"
    broken.parent.mkdir()
    broken.write_text("this is not JSON", encoding="utf-8")
    empty = tmp_path / "ivan.ipynb"
    empty.write_text("", encoding="utf-8")
    status, book = _grade(tmp_path, broken, empty, "--jobs", "2")  # two worker processes
    assert status != 0
    first, second = book["notebooks"]
    assert first["status"] == NOT_A_NOTEBOOK and first["exercises"]
    assert all(e["problem"] == "not run" for e in first["exercises"])
    assert second["status"] == NOT_A_NOTEBOOK and not second["exercises"]


def _usage_error(capsys, *argv):
    """``main(argv)`` must stop with exit status 2 before grading; returns what it printed on stderr."""
    with pytest.raises(SystemExit) as stop:
        main([*map(str, argv), "--no-progress"])
    assert stop.value.code == 2
    return capsys.readouterr().err


def test_usage_errors(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2  # an empty folder
    for bad in (["--timeout", "0"], ["--jobs", "0"]):
        _usage_error(capsys, BLANK, *bad)


def test_a_mistyped_path_is_a_usage_error_and_the_gradebook_stays(tmp_path, capsys):
    """The trial's teacher typed ``submision/``: graded as one 'not a notebook', exit 1, gradebook overwritten."""
    book, feedback = tmp_path / "grades.csv", tmp_path / "feedback"
    book.write_text("student,total\nalice,10\n", encoding="utf-8")
    err = _usage_error(capsys, tmp_path / "submision", "--csv", book, "--feedback", feedback)
    assert f"no such file or folder: {tmp_path / 'submision'}" in err and "nothing was graded or written" in err
    assert book.read_text(encoding="utf-8") == "student,total\nalice,10\n" and not feedback.exists()
    err = _usage_error(capsys, BLANK, tmp_path / "typo.ipynb", "--csv", book)   # one good path, one typo
    assert "typo.ipynb" in err and book.read_text(encoding="utf-8") == "student,total\nalice,10\n"


@pytest.mark.parametrize("flags, words", [
    (["--csv", "{tmp}/missing/grades.csv"], "--csv {tmp}/missing/grades.csv: the folder {tmp}/missing does not exist"),
    (["--json", "{tmp}/missing/grades.json"], "the folder {tmp}/missing does not exist"),
    (["--feedback", "{tmp}/missing/deeper/feedback"], "the folder {tmp}/missing/deeper does not exist"),
    (["--feedback", "{tmp}/grades.csv"], "--feedback {tmp}/grades.csv: that is a file; name a folder"),
    (["--csv", "{tmp}"], "--csv {tmp}: that is a folder; name a file"),
    (["--csv", "{tmp}/out.csv", "--json", "{tmp}/out.csv"], "must name different paths"),
    (["--json", str(BLANK)], "would overwrite a notebook to grade"),
], ids=["csv folder", "json folder", "feedback folder", "feedback is a file", "csv is a folder", "same path",
        "onto a notebook"])
def test_output_paths_are_checked_before_grading(tmp_path, capsys, flags, words):
    """A missing folder or a file where a folder is wanted used to crash after the whole class was graded."""
    (tmp_path / "grades.csv").write_text("kept\n", encoding="utf-8")
    start = time.monotonic()
    err = _usage_error(capsys, BLANK, *[f.format(tmp=tmp_path) for f in flags])
    assert words.format(tmp=tmp_path) in err, err
    assert time.monotonic() - start < 10, "checked before any notebook ran"
    assert (tmp_path / "grades.csv").read_text(encoding="utf-8") == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grades.csv"]


# ---------------------------------------------------------------- the pieces, without a kernel
def test_finding_the_original_and_the_notebooks(tmp_path):
    assert find_original(tmp_path / "01_activations.ipynb") == BLANK
    assert find_original(SOLVED) == BLANK
    assert find_original(tmp_path / "05_mine.ipynb").name.startswith("05_")
    assert find_original(tmp_path / "homework.ipynb") is None
    for name in ("b.ipynb", "a.ipynb", "sub/c.ipynb", ".ipynb_checkpoints/a-checkpoint.ipynb"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    assert [p.name for p in collect([tmp_path])] == ["a.ipynb", "b.ipynb"]
    assert [p.name for p in collect([tmp_path], recursive=True)] == ["a.ipynb", "b.ipynb", "c.ipynb"]


def test_verdicts_are_read_from_outputs_and_checked_against_the_log():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("check_collapse(f)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="progress 10%\r"
                                           "✅ Exercise 1 (collapse a stack of affine layers): passed (5 hidden test "
                                           "cases)\nother text\n")]
    fake = nbformat.v4.new_code_cell("print(...)")
    fake.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                           text="✅ Exercise 2 (a title): passed (4 hidden test cases)\n")]
    nb.cells = [cell, fake]
    lines = verdict_lines(nb)
    assert [(status, title) for _, status, title, _, _ in lines] == [
        (PASSED, "Exercise 1 (collapse a stack of affine layers)"), (PASSED, "Exercise 2 (a title)")]
    expected = [ExpectedExercise("Exercise 1 (collapse a stack of affine layers)", "build", ("check_collapse",)),
                ExpectedExercise("Exercise 2 (a title)", "investigate", ("check_title",))]
    rows, note = _grade_exercises(nb, expected, _Run(), {lines[0][4]})
    assert rows[0].status == PASSED and rows[1].status == FAILED and rows[1].problem == "not checked"
    rows, note = _grade_exercises(nb, expected, _Run(), set())  # nothing logged: an engine that cannot log
    assert [r.status for r in rows] == [PASSED, PASSED] and "could not be verified" in note


# ---------------------------------------------------------------- a class: renamed copies, points, CSV, feedback
COURSE_05 = ROOT / "notebooks" / "05_mixture_of_experts.ipynb"


def _class_copy(folder, name, answers, *, delete=()):
    """A light copy of notebook 05 (its markdown, setup, the checker import, the exercise cells), with the
    checker calls of ``delete`` removed and ``answers`` (checker name -> code for the function) filled in."""
    course = nbformat.read(COURSE_05, as_version=4)
    code = [i for i, c in enumerate(course.cells) if c.cell_type == "code"]
    keep = []
    for i, cell in enumerate(course.cells):
        text = cell.source
        exercise_cell = "raise NotImplementedError" in text  # it imports its own checker since 2026-11-27
        if cell.cell_type == "markdown" or i == code[0] or ("from helpers.exercises.nb05 import" in text and
                                                           not exercise_cell):
            keep.append(cell if "from helpers.exercises.nb05 import" not in text else nbformat.v4.new_code_cell(
                "\n".join(line for line in text.splitlines() if "helpers.exercises" in line or
                          line.startswith(" ") and "check_" in line)))
        elif cell.cell_type == "code" and "check_" in text and "raise NotImplementedError" in text:
            checker = next(n for n in answers.keys() | set(delete) | {""} if n and f"{n}(" in text) \
                if any(f"{n}(" in text for n in answers.keys() | set(delete)) else None
            lines = text.splitlines()
            fn = lines[0].split("def ")[1].split("(")[0]
            if checker in answers:
                imports = [line for line in lines if line.startswith("from helpers.exercises")]  # the cell's own
                text = f"{lines[0]}\n    return {answers[checker]}\n\n\n" + "\n".join([*imports, lines[-1]])
            if checker in delete:
                text = "\n".join(line for line in text.splitlines() if not line.startswith(checker))
            assert fn
            keep.append(nbformat.v4.new_code_cell(text))
    nb = nbformat.v4.new_notebook()
    nb.metadata = course.metadata
    nb.cells = keep
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_a_class_of_renamed_copies_is_graded_with_points_csv_and_feedback(tmp_path, capsys):
    import csv

    from helpers.exercises import nb05

    subs = tmp_path / "class"
    _class_copy(subs / "alice", "Copy of 05_mixture_of_experts.ipynb",
                {"check_z_loss": "2.0 / logits.shape[0] * torch.logsumexp(logits, dim=-1, keepdim=True) * torch.softmax(logits, dim=-1)",
                 "check_balance_loss": "nb05.check_balance_loss.mistakes[0][1](probs, expert_index)"},
                delete=("check_capacity_keep",))
    _class_copy(subs, "bob_ffn.ipynb", {"check_z_loss": "2.0 / logits.shape[0] * torch.logsumexp(logits, dim=-1, keepdim=True) * torch.softmax(logits, dim=-1)"})
    for path in subs.rglob("*.ipynb"):  # the answers use the checkers' module
        nb = nbformat.read(path, as_version=4)
        setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
        nb.cells.insert(setup + 1, nbformat.v4.new_code_cell("import torch\nfrom helpers.exercises import nb05"))
        nbformat.write(nb, path)
    points = tmp_path / "points.json"
    points.write_text(json.dumps({"investigate": 1, "05/4": 5}), encoding="utf-8")
    out, book_csv, feedback = tmp_path / "grades.json", tmp_path / "grades.csv", tmp_path / "feedback"
    status = main([str(subs), "-r", "--jobs", "2", "--points", str(points), "--json", str(out), "--csv", str(book_csv),
                   "--feedback", str(feedback)])
    captured = capsys.readouterr()
    assert status == 1
    book = json.loads(out.read_text(encoding="utf-8"))
    alice, bob = book["notebooks"]
    assert alice["path"] == "alice/Copy of 05_mixture_of_experts.ipynb" and alice["student"] == "alice"
    assert bob["path"] == "bob_ffn.ipynb" and bob["student"] == "bob_ffn"
    for grade in (alice, bob):
        assert grade["original"].endswith("notebooks/05_mixture_of_experts.ipynb"), grade
        assert "its title" in grade["matched_by"] and grade["status"] == RAN, grade
        assert [e["title"] for e in grade["exercises"]] == [c.title for c in nb05.EXERCISES]
    rows = {e["title"]: e for e in alice["exercises"]}
    deleted = rows[nb05.check_capacity_keep.title]
    assert deleted["problem"] == "missing" and "check_capacity_keep" in deleted["message"]
    assert rows[nb05.check_z_loss.title]["status"] == PASSED and rows[nb05.check_z_loss.title]["points"] == 5
    assert rows[nb05.check_balance_loss.title]["hint"] == " ".join(nb05.check_balance_loss.mistakes[0][0].split())
    expected_max = sum(5 if ex is nb05.check_z_loss else 1 if ex.kind == "investigate" else ex.points
                       for ex in nb05.EXERCISES)
    assert alice["points"] == 5 and alice["max_points"] == expected_max and bob["points"] == 5

    report = captured.out
    summary = report[report.index("Summary"):].splitlines()
    grid = [line for line in summary if line.strip().startswith(("alice/", "bob_ffn"))]
    assert len(grid) == 2 and len({line.index(" 5/") for line in grid}) == 1, grid  # the columns line up
    assert "alice/Copy of 05_mixture_of_experts.ipynb" in captured.err and "bob_ffn.ipynb" in captured.err  # the bar

    with open(book_csv, newline="", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    assert [r["student"] for r in table] == ["alice", "bob_ffn"]
    columns = list(table[0])
    assert columns[:3] == ["student", "files", "05 Ex1 (2)"] and columns[-3:] == ["total", "max", "notes"], columns
    assert table[0]["05 Ex4 (5)"] == "5" and table[0]["05 Ex2 (2)"] == "0" and table[0]["total"] == "5"
    assert table[0]["max"] == str(expected_max) and "Ex2 missing" in table[0]["notes"]

    alice_md = (feedback / "alice.md").read_text(encoding="utf-8")
    assert alice_md.startswith("# Feedback for alice") and "**05_mixture_of_experts.ipynb**" in alice_md
    assert "Points: **5 of " in alice_md and "Exercise 3 (build): the load-balancing loss" in alice_md
    assert "Likely mistake: " + " ".join(nb05.check_balance_loss.mistakes[0][0].split()) in alice_md
    assert "missing: the notebook no longer calls check_capacity_keep" in alice_md and "⏳ not attempted" in alice_md
    assert sorted(p.name for p in feedback.iterdir()) == ["alice.md", "bob_ffn.md"]


# ---------------------------------------------------------------- matching, points, names: no kernel
def test_a_submission_is_matched_by_its_content_not_its_name(tmp_path):
    from helpers.exercises.matching import match_course_notebook

    course = nbformat.read(COURSE_05, as_version=4)
    for name in ("Copy of 05_mixture_of_experts.ipynb", "alice_ffn.ipynb", "01_activations.ipynb"):
        found, why = match_course_notebook(course, tmp_path / name)
        assert found == COURSE_05 and why.startswith("matched by its title"), (name, why)
    solved = nbformat.read(SOLVED, as_version=4)
    assert match_course_notebook(solved, tmp_path / "homework.ipynb")[0] == BLANK
    one_call = nbformat.v4.new_notebook()
    one_call.cells = [nbformat.v4.new_code_cell("from helpers.exercises.nb05 import check_z_loss\ncheck_z_loss(f)")]
    found, why = match_course_notebook(one_call, tmp_path / "mine.ipynb")
    assert found is None and "no course notebook" in why


def test_points_files_are_checked(tmp_path, capsys):
    from helpers.exercises.gradebook import PointsError, load_points, points_for, points_keys
    from helpers.exercises.grader import _course_exercises

    keys = points_keys(_course_exercises())
    assert {"build", "investigate", "debug", "05/3"} <= set(keys)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"build": 1, "05/3": 4}), encoding="utf-8")
    overrides = load_points(good, keys)
    item = ExpectedExercise("Exercise 3 (x)", "build", ("check_x",), points=2, number="3")
    assert points_for(item, "05", overrides) == 4 and points_for(item, "02", overrides) == 1
    assert points_for(item, "02", {}) == 2
    for bad in ({"05/99": 1}, {"build": -1}, {"build": "two"}, [1, 2]):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad), encoding="utf-8")
        with pytest.raises(PointsError):
            load_points(path, keys)
    with pytest.raises(SystemExit):
        main([str(BLANK), "--points", str(tmp_path / "bad.json")])
    assert "must be a JSON object" not in capsys.readouterr().err


def test_submissions_are_named_by_folder_and_file(tmp_path):
    from helpers.exercises.grader import name_submissions

    folder = tmp_path / "class"
    paths = [folder / "alice" / "05.ipynb", folder / "bob" / "05.ipynb", folder / "carol_ffn.ipynb",
             folder / "dora" / "08_ffn_in_real_code.ipynb", folder / "dora" / "sub" / "my 09 notebook.ipynb"]
    assert name_submissions(paths, [folder]) == [("alice/05.ipynb", "alice"), ("bob/05.ipynb", "bob"),
                                                  ("carol_ffn.ipynb", "carol_ffn"),
                                                  ("dora/08_ffn_in_real_code.ipynb", "dora"),
                                                  ("dora/sub/my 09 notebook.ipynb", "dora")]  # one student, one row
    alone = name_submissions([tmp_path / "x" / "05.ipynb", tmp_path / "y" / "05.ipynb"])
    assert alone[0][1] != alone[1][1]  # two files of the same name given on their own are two students


def _grade_of(status, note="", run_note="", original="notebooks/05_mixture_of_experts.ipynb"):
    from helpers.exercises.gradebook import ExerciseGrade, NotebookGrade

    grade = NotebookGrade("alice.ipynb", status, note, original=original, student="alice", run_note=run_note)
    grade.exercises = [ExerciseGrade("Exercise 1 (x)", "build", FAILED, "not run: ...", problem="not run",
                                     max_points=2, number="1")]
    return grade


def test_every_status_reads_as_a_sentence_to_the_student():
    """G5 of the trial: 'Your notebook a cell raised', 'Graded as the course notebook **no course notebook
    matched**'. Each status now has its own sentence, which names what happened."""
    from helpers.exercises.gradebook import feedback_markdown
    from helpers.exercises.kernel import KERNEL_FAILED

    cell = 'the cell "import numpyy" under "Setup"'
    cases = {
        RAN: ("", "Your notebook ran to the end."),
        CELL_ERROR: (f"{cell} raised ModuleNotFoundError: No module named 'numpyy' (and 2 more cells)",
                     f"Your notebook ran to the end, but not every cell worked: {cell} raised ModuleNotFoundError: "
                     f"No module named 'numpyy' (and 2 more cells)."),
        TIMED_OUT: (f"timed out in {cell} (the limit: 120 s for one cell)",
                    f"Your notebook was stopped before its end: it timed out in {cell} (the limit: 120 s for one "
                    f"cell)."),
        KERNEL_DIED: (f"kernel died in {cell}",
                      f"Your notebook was stopped before its end: its kernel died in {cell}."),
        KERNEL_FAILED: ("NoSuchKernel: No such kernel named python2",
                        "Your notebook could not be run: its kernel failed to start (NoSuchKernel: No such kernel "
                        "named python2)."),
        NOT_A_NOTEBOOK: ("NotJSONError: Notebook does not appear to be JSON: ''",
                         "Your file could not be read as a notebook (NotJSONError: Notebook does not appear to be "
                         "JSON: ''), so none of it could be run."),
    }
    for status, (note, sentence) in cases.items():
        grade = _grade_of(status, note=note, run_note="" if status in (KERNEL_FAILED, NOT_A_NOTEBOOK) else note)
        text = feedback_markdown("alice", [grade])
        assert "Graded as the course notebook **05_mixture_of_experts.ipynb**. " + sentence in text, (status, text)
        assert status == RAN or f"Your notebook {status}" not in text
    unmatched = feedback_markdown("alice", [_grade_of(RAN, original=None)])
    assert "It matched no course notebook, so it was graded by the checks it calls. Your notebook ran" in unmatched
    unreadable = feedback_markdown("alice", [_grade_of(NOT_A_NOTEBOOK, "NotJSONError: x", original=None)])
    assert "It could not be matched to a course notebook. Your file could not be read" in unreadable
    assert "**no course notebook matched**" not in unmatched + unreadable


def test_the_legend_says_how_a_debug_cell_run_as_given_is_graded():
    from helpers.exercises.gradebook import _MEANING

    assert "A debug exercise whose function was run as given" in _MEANING and "is ❌ not passed" in _MEANING
    assert "still the original with its bug" not in _MEANING  # it is not ⏳: the checker fails it (the symptom)
    assert "changes one of its inputs in place" in _MEANING and "checker's own code" in _MEANING


def _tiny(folder, name, answer, checker="nb01.check_collapse"):
    """A small notebook calling one checker on ``answer`` (code for the learner's function)."""
    module, check = checker.split(".")
    return _notebook(SETUP_CELL, f"from helpers.exercises.{module} import {check}",
                     f"answer = {answer}\n{check}(answer)", name=name, folder=folder)


def test_a_class_folder_one_row_per_student_skipped_folders_named_and_the_reference_flagged(tmp_path, capsys):
    """carol/ holds two notebooks: one row and one feedback file. Without --recursive carol/ is named as left
    out. dan hands in the checker's reference: ❌, and the gradebook's notes say so."""
    import csv

    from helpers.exercises.grader import _display_path

    subs = tmp_path / "class"
    _tiny(subs / "carol", "01_activations.ipynb", "lambda layers: None")
    _tiny(subs / "carol" / "more", "02_expand_activate_contract.ipynb",
          "lambda x, w1, b1, w2, b2: __import__('torch').nn.functional.gelu(x @ w1 + b1, approximate='tanh') @ w2 + b2",
          checker="nb02.check_gpt2_mlp")
    _tiny(subs, "dan.ipynb", "check_collapse.reference")
    book, feedback = tmp_path / "grades.csv", tmp_path / "feedback"

    status = main([str(subs), "--csv", str(book), "--feedback", str(feedback), "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 1
    left_out = (f"Not graded: 1 sub-folder holding notebooks ({_display_path(subs / 'carol')}/); add --recursive "
                f"to grade them.")
    assert left_out in err and left_out in out, (out, err)
    with open(book, newline="", encoding="utf-8") as handle:
        (dan,) = list(csv.DictReader(handle))
    assert dan["student"] == "dan" and dan["total"] == "0" and f"Ex1 {CHECKERS_CODE}" in dan["notes"], dan
    assert "the checker's own code, not yours" in (feedback / "dan.md").read_text(encoding="utf-8")

    status = main([str(subs), "-r", "--csv", str(book), "--feedback", str(feedback), "--no-progress", "--jobs", "2"])
    out, err = capsys.readouterr()
    assert "Not graded" not in out + err
    with open(book, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["student"] for r in rows] == ["carol", "dan"], rows
    carol = rows[0]
    assert carol["files"] == "carol/01_activations.ipynb; carol/more/02_expand_activate_contract.ipynb", carol
    assert carol["01 Ex1 (2)"] == "0" and carol["02 Ex1 (2)"] == "2" and carol["total"] == "2", carol
    assert sorted(p.name for p in feedback.iterdir()) == ["carol.md", "dan.md"]
    carol_md = (feedback / "carol.md").read_text(encoding="utf-8")
    assert "## carol/01_activations.ipynb" in carol_md and "## carol/more/02_expand_activate_contract.ipynb" in carol_md


def test_cells_are_named_by_first_line_and_heading():
    from helpers.exercises.matching import cell_label

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_code_cell("import torch"),
                nbformat.v4.new_markdown_cell("## Exercises\n### Exercise 2 (debug): fix the slice"),
                nbformat.v4.new_code_cell("\n\ndef mean_of_last(x, n):\n    return x[-n:].mean()"),
                nbformat.v4.new_code_cell("")]
    assert cell_label(nb, 1) == 'the first code cell ("import torch") under "Title"'
    assert cell_label(nb, 3) == 'the cell "def mean_of_last(x, n):" under "Exercise 2 (debug): fix the slice"'
    assert cell_label(nb, 4) == 'an empty cell under "Exercise 2 (debug): fix the slice"'


def test_debug_headings_give_the_kind():
    from helpers.exercises.matching import exercise_headings

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("### Exercise 1 (debug): the softmax axis\ntext\n"
                                              "### Exercise 2 (build): more")]
    assert exercise_headings(nb) == {"1": ("debug", "Exercise 1 (debug): the softmax axis"),
                                     "2": ("build", "Exercise 2 (build): more")}


def test_a_follow_up_that_only_asks_passes_is_not_a_checker_call():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("if check_collapse.passes(f):\n    show(f)"),
                nbformat.v4.new_code_cell("result = check_collapse.evaluate(f)")]
    expected = [ExpectedExercise("Exercise 1 (collapse a stack of affine layers)", "build", ("check_collapse",),
                                 points=2, number="1")]
    (row,), _ = _grade_exercises(nb, expected, _Run(), set())
    assert row.problem == "missing" and row.max_points == 2 and row.points == 0
