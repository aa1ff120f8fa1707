"""No control characters in a notebook's cells or a helper's source.

A Python string like "$\varepsilon$" written without a raw prefix turns "\v" into a vertical tab: the cell then
shows "arepsilon" to the learner (notebook 05's jitter formula once did). Only newline and tab are allowed.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def test_no_cell_source_holds_a_control_character():
    found = []
    for path in NOTEBOOKS:
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            text = "".join(cell["source"])
            found += [f"{path.relative_to(ROOT)} cell {i}: {m.group(0)!r} near "
                      f"{text[max(0, m.start() - 20):m.end() + 20]!r}" for m in CONTROL.finditer(text)]
    assert not found, "control characters in cell sources (an escape like \\v lost in a Python string?):\n" + \
        "\n".join(found)


def test_no_helper_source_holds_a_control_character():
    found = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "helpers").rglob("*.py"))
             if CONTROL.search(p.read_text(encoding="utf-8"))]
    assert not found, f"control characters in: {found}"
