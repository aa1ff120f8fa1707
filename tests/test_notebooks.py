"""Every notebook has the course's shape, is committed executed, and has a solutions notebook.

nbval (run by the same pytest command) re-executes the notebooks and compares outputs;
these tests check what nbval does not: structure, the shared setup cell, tags with reasons.
"""
import json
import re
from pathlib import Path

import nbformat
import pytest

from helpers.env import REPO_SLUG, SETUP_CELL
from helpers.exercises.engine import Exercise
from helpers.exercises.grader import _checker_modules, expected_exercises

ROOT = Path(__file__).resolve().parent.parent
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted((NB_DIR / "solutions").glob("[0-9][0-9]_*.ipynb"))
README = (ROOT / "README.md").read_text(encoding="utf-8")


def load(path):
    return json.loads(path.read_text(encoding="utf-8"))


def source(cell):
    return "".join(cell["source"])


def test_foundation_notebooks_exist():
    assert [p.name[:2] for p in NOTEBOOKS][:2] == ["01", "02"]


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=lambda p: p.name)
def test_header_badge_and_setup_cell(path):
    nb = load(path)
    first = source(nb["cells"][0])
    assert first.startswith("# "), "the first cell is the title"
    rel = path.relative_to(ROOT).as_posix()
    badge = f"https://colab.research.google.com/github/{REPO_SLUG}/blob/main/{rel}"
    assert badge in first, f"Open-in-Colab badge should point at {badge}"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert source(code[0]) == SETUP_CELL, "the setup cell must be identical in every notebook (helpers.env.SETUP_CELL)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_course_shape(path):
    text = "\n".join(source(c) for c in load(path)["cells"] if c["cell_type"] == "markdown")
    for heading in ["## What you will learn", "## Quick checks", "## Exercises", "## Takeaways", "## Sources"]:
        assert heading in text, f"missing section {heading!r}"
    assert text.count("<details>") >= 3, "at least three quick-check answers folded in <details>"
    solution = list((NB_DIR / "solutions").glob(path.name[:3] + "*.ipynb"))
    assert solution, f"no solutions notebook for {path.name}"
    assert f"notebooks/{path.name}" in README, "the README's notebook table should list it"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_sections_are_numbered_1_to_n_and_every_section_cited_exists(path):
    """An edit that drops a heading leaves cells without their introduction and "section N" pointing nowhere."""
    text = "\n".join(source(c) for c in load(path)["cells"] if c["cell_type"] == "markdown")
    numbers = [int(n) for n in re.findall(r"^## (\d+)\.", text, re.M)]
    assert numbers == list(range(1, len(numbers) + 1)), f"sections numbered {numbers}"
    cited = {int(n) for n in re.findall(r"(?<!notebook \d\d.s )\bsection (\d+)", text)}
    assert cited <= set(numbers), f"cites section(s) {sorted(cited - set(numbers))}, which do not exist"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_full_solutions_notebook_keeps_the_lessons_prose(path):
    """Where the solutions notebook is a full copy (it has the lesson's sections), every markdown cell it shares
    with the notebook reads the same, the lesson paragraph of the first cell included (its title, badge and
    solutions note aside): a fix to the lesson must reach both. Cells pair by position when the two notebooks
    have the same cells, else by cell id."""
    solution = NB_DIR / "solutions" / path.name
    lesson, copy = load(path)["cells"], load(solution)["cells"]
    if not any(source(c).startswith("## 1.") for c in copy if c["cell_type"] == "markdown"):
        return                                                   # an exercises-only solutions notebook

    def lesson_lines(cell):
        return [line for line in source(cell).splitlines() if line.strip() and not line.startswith("# ")
                and "colab-badge" not in line and not re.match(r"\*+(This is the solutions notebook|Solutions notebook)", line)]

    assert lesson_lines(copy[0]) == lesson_lines(lesson[0]), "the solutions' first cell has another lesson paragraph"
    if [c["cell_type"] for c in lesson] == [c["cell_type"] for c in copy]:
        pairs = list(zip(lesson[1:], copy[1:]))
    else:
        by_id = {c.get("id"): c for c in lesson}
        pairs = [(by_id[c.get("id")], c) for c in copy[1:] if c.get("id") in by_id]
    drifted = [i for i, (a, b) in enumerate(pairs, start=1) if a["cell_type"] == b["cell_type"] == "markdown"
               and source(a) != source(b)]
    assert not drifted, f"the solutions' prose differs from the notebook's in cells {drifted}"


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=lambda p: p.name)
def test_committed_executed_and_clean(path):
    for i, cell in enumerate(load(path)["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell["execution_count"] is not None, f"cell {i} was not executed before committing"
        for out in cell["outputs"]:
            assert out["output_type"] != "error", f"cell {i} has an error output"
            assert out.get("name") != "stderr", f"cell {i} writes to stderr (warnings vary run to run)"
        tags = cell.get("metadata", {}).get("tags", [])
        if "nbval-ignore-output" in tags or "nbval-skip" in tags:
            assert re.search(r"^# nbval: .+", source(cell), re.M), \
                f"cell {i} is exempt from nbval: say why in a '# nbval: <reason>' comment"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_are_blank_stubs_reported_not_attempted(path):
    outputs = "".join("".join(o.get("text", "")) for c in load(path)["cells"] if c["cell_type"] == "code"
                      for o in c["outputs"])
    assert outputs.count("not attempted yet") >= 4, "at least four exercises, left blank for the learner"
    assert "❌" not in outputs


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solutions_pass(path):
    outputs = "".join("".join(o.get("text", "")) for c in load(path)["cells"] if c["cell_type"] == "code"
                      for o in c["outputs"])
    assert outputs.count("✅") >= 4 and "❌" not in outputs and "not attempted" not in outputs


#: a line that introduces an exercise: a heading or a bold lead-in
EXERCISE_LINE = re.compile(r"^\s*(?:#+\s*|\*\*)Exercise\s+\d")
#: how it must read: ``### Exercise 3 (investigate): what to find out``
EXERCISE_HEADING = re.compile(r"^#{2,4} Exercise (\d+) \((build|investigate|debug)\): \S")


def exercise_headings(nb):
    """``[(line, number, kind)]`` for every line that introduces an exercise (number/kind None when malformed)."""
    found = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in source(cell).splitlines():
                if EXERCISE_LINE.match(line):
                    match = EXERCISE_HEADING.match(line)
                    found.append((line, *(match.groups() if match else (None, None))))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=lambda p: p.name)
def test_exercise_headings_say_build_or_investigate(path):
    headings = exercise_headings(load(path))
    malformed = [line for line, number, _ in headings if number is None]
    assert not malformed, f"write each exercise as '### Exercise N (build|investigate|debug): ...', not {malformed}"
    assert [int(number) for _, number, _ in headings] == list(range(1, len(headings) + 1)), "numbered 1, 2, 3, ..."
    kinds = [kind for _, _, kind in headings]
    # COURSE_DESIGN's exercise contract: build and investigate in every notebook (a heading names what the
    # exercise is, so a build is not relabelled to make up a count)
    assert "investigate" in kinds, "at least one investigate exercise"
    assert "build" in kinds, "at least one build exercise"


#: a row of README's study table: ``| 08 | about 2 h | 6 (1 build, 2 investigate, 3 debug) | 4,499 |``
STUDY_ROW = re.compile(r"^\| (\d\d) \| about [^|]+ \| (\d+) \(([^)]*)\) \| [\d,]+ \|$", re.M)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_readme_study_table_counts_the_exercises(path):
    rows = {nn: (int(total), parts) for nn, total, parts in STUDY_ROW.findall(README)}
    assert path.name[:2] in rows, f"README's study table has no row for {path.name[:2]}"
    total, parts = rows[path.name[:2]]
    kinds = [kind for _, _, kind in exercise_headings(load(path))]
    said = {kind: int(n) for n, kind in re.findall(r"(\d+) (build|investigate|debug)", parts)}
    counted = {kind: kinds.count(kind) for kind in ("build", "investigate", "debug") if kind in kinds}
    assert (total, said) == (len(kinds), counted), \
        f"README's study table says {total} ({parts}); the notebook has {len(kinds)} {counted}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_headings_agree_with_the_checkers_and_the_solutions(path):
    nb = load(path)
    headings = {number: kind for _, number, kind in exercise_headings(nb)}
    code = "\n".join(source(c) for c in nb["cells"] if c["cell_type"] == "code")
    called = {}
    for module in _checker_modules(code):
        for name, ex in vars(module).items():
            if isinstance(ex, Exercise) and re.search(rf"\b{re.escape(name)}\s*\(", code):
                called[ex.number] = ex
    assert set(called) == set(headings), f"headings {sorted(headings)} vs checkers called {sorted(called)}"
    wrong_kind = {n: (headings[n], ex.kind) for n, ex in called.items() if ex.kind != headings[n]}
    assert not wrong_kind, f"heading kind vs the checker's kind= : {wrong_kind}"
    solution = NB_DIR / "solutions" / path.name
    assert [(n, k) for _, n, k in exercise_headings(load(solution))] == \
        [(n, k) for _, n, k in exercise_headings(nb)], "the solutions notebook has the same exercises"
    assert [e.title for e in expected_exercises(nbformat.read(path, as_version=4))] == \
        [e.title for e in expected_exercises(nbformat.read(solution, as_version=4))], \
        "and calls the same checkers, in order"
