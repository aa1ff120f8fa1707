"""Committed outputs must read the same on a learner's machine.

A number at rounding-noise level (|x| < 1e-12, e.g. ``max |a - b| = 2.8e-16``) depends on the CPU, the BLAS,
the thread count and the package versions, so strict nbval would fail on another machine although nothing in
the course is wrong. Such figures are shown as bounds (``< 1e-12``) or rounded. This test scans the text of
every committed output (streams and ``text/plain``) of every notebook and fails on any noise-level number that
is not a stated bound. Cells whose output nbval does not compare (tagged ``nbval-ignore-output``, each with a
``# nbval: <reason>`` line, which ``tests/test_notebooks.py`` enforces) are exempt: they hold timings and widgets.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").rglob("*.ipynb"))
NOTEBOOKS = [p for p in NOTEBOOKS if ".ipynb_checkpoints" not in p.parts]

#: a number written with an exponent of -12 or below: 2.8e-16, -1.7E-13, 3e-300
NOISE = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?[eE]-(1[2-9]|[2-9]\d|\d{3})\b")
#: what may stand just before such a number when it is a bound or a tolerance, not a measurement
BOUND = re.compile(r"(to|<|<=|≤|tol\w*|within|below|under|atol|rtol|eps\w*)\s*[(=:]?\s*$", re.I)


def noise_numbers(text: str) -> list[str]:
    """The noise-level numbers in ``text`` that are not stated bounds."""
    found = []
    for match in NOISE.finditer(text):
        if not BOUND.search(text[max(0, match.start() - 12):match.start()]):
            found.append(match.group(0))
    return found


def output_text(output: dict) -> str:
    text = output.get("text", "")
    plain = output.get("data", {}).get("text/plain", "")
    join = (lambda v: "".join(v) if isinstance(v, list) else v)
    return join(text) + join(plain)


def test_the_scanner_tells_noise_from_bounds():
    assert noise_numbers("max |lists - numpy| = 2.8e-16") == ["2.8e-16"]
    assert noise_numbers("residual -1.7E-13 and 3e-300") == ["-1.7E-13", "3e-300"]
    assert noise_numbers("max |a - b| < 1e-12: True") == []
    assert noise_numbers("equal to 1e-15, tolerance 1e-14, rtol=1e-13") == []
    assert noise_numbers("gap 4.73e-4, lr 1e-3, spacing 5.96e-08") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_no_rounding_noise_in_committed_outputs(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    problems = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code" or "nbval-ignore-output" in cell.get("metadata", {}).get("tags", []):
            continue
        for output in cell.get("outputs", []):
            for number in noise_numbers(output_text(output)):
                problems.append(f"cell {index}: {number}")
    assert not problems, ("rounding-noise numbers in compared outputs (show a bound such as '< 1e-12' or a "
                          "rounded figure instead): " + "; ".join(problems))


def test_notebook_01_reads_the_same_on_a_flush_to_zero_cpu_with_the_plain_kernel():
    """Notebook 01 measures low-precision formats, where a CPU that flushes subnormal numbers to zero, or another
    vectorised kernel, once changed a stored output (an AVX-512 machine printed 2.9 % instead of 1.4 %). Re-run it
    under strict nbval with flush-to-zero on (``FFN_FLUSH_DENORMAL=1``, read by ``helpers.env.setup``) and the
    plain, non-vectorised kernel (``ATEN_CPU_CAPABILITY=default``): its outputs must not move."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "FFN_FLUSH_DENORMAL": "1", "ATEN_CPU_CAPABILITY": "default"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
                          "--nbval-current-env", "--nbval-sanitize-with", str(ROOT / "tests" / "nbval_sanitize.cfg"),
                          str(ROOT / "notebooks" / "01_activations.ipynb")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
