"""Every notebook has the course's shape, is committed executed, and has a solutions notebook.

nbval (run by the same pytest command) re-executes the notebooks and compares outputs;
these tests check what nbval does not: structure, the shared setup cell, tags with reasons.
"""
import json
import re
from pathlib import Path

import pytest

from helpers.env import REPO_SLUG, SETUP_CELL

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
