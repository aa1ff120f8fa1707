"""One weight layout in the whole course: PyTorch's ``nn.Linear``.

W1, W3: (d_ff, d_model); W2: (d_model, d_ff); y = W2·φ(W1·x); for a batch of rows X: φ(X W1ᵀ) W2ᵀ.
Keys are the rows of W1, values the columns of W2. These tests catch the other (row, ``x @ W1``) layout
creeping back into a notebook's text or code, a helper's docstring, or an exercise checker's hidden cases.
"""
from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
from pathlib import Path

import pytest
import torch

from helpers import exercises
from helpers.exercises.engine import Exercise

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
HELPERS = sorted(p for p in (ROOT / "helpers").rglob("*.py"))

# The row layout, as it would be written in LaTeX or in plain text.
ROW_LAYOUT = [
    # W_1 ∈ ℝ^{d × d_ff}  /  W_2 ∈ ℝ^{d_ff × d}
    re.compile(r"W_\{?1\}?\s*\\in\s*\\mathbb\{R\}\^\{\s*d(?:_\{?\\?\w+\}?)?\s*\\times\s*d_\{?\\(?:mathrm|text)\{ff"),
    re.compile(r"W_\{?2\}?\s*\\in\s*\\mathbb\{R\}\^\{\s*d_\{?\\(?:mathrm|text)\{ff\}\}?\s*\\times\s*d(?:_\{?\\?\w+\}?)?\s*\}"),
    re.compile(r"W_?1\s*∈\s*ℝ\^?\{?\s*d(?:_model)?\s*[×x]\s*d_ff"),
    re.compile(r"W_?2\s*∈\s*ℝ\^?\{?\s*d_ff\s*[×x]\s*d\b"),
    # "W1 (d_model, d_ff)", "W1 of shape (d, d_ff)", "W2: (d_ff, d_model)"
    re.compile(r"\bW_?1\b[^\n(]{0,24}\(\s*d(?:_model)?\s*,\s*d_ff\s*\)"),
    re.compile(r"\bW_?2\b[^\n(]{0,24}\(\s*d_ff\s*,\s*d(?:_model)?\s*\)"),
]
# Code that multiplies data (x, X, h, H, tokens, inputs...) by W1 on the right without a transpose: x @ W1 is the
# row layout. (W2 @ W1, a product of weights, is nn.Linear's composition and is fine.)
ROW_CODE = re.compile(r"\b(?:x|X|h|H|xs|tok\w*|inp\w*|batch)\w*\s*@\s*(?:W1|W3|w1|w3)\b(?!\s*(?:\[[^\]]*\])?\s*\.\s*(?:T|t\(\)|mT|transpose))")


def _sources():
    for path in NOTEBOOKS:
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            yield f"{path.relative_to(ROOT)} cell {i}", cell["cell_type"], "".join(cell["source"])
    for path in HELPERS:
        yield str(path.relative_to(ROOT)), "code", path.read_text(encoding="utf-8")


def test_no_text_uses_the_row_layout():
    found = [f"{where}: {m.group(0)!r}" for where, _, text in _sources() for pattern in ROW_LAYOUT
             for m in pattern.finditer(text)]
    assert not found, "the course uses nn.Linear's layout (W1: (d_ff, d_model)); found the other one:\n" + \
        "\n".join(found)


def test_no_code_multiplies_by_an_untransposed_w1():
    found = [f"{where}: {m.group(0)!r}" for where, kind, text in _sources() if kind == "code"
             for m in ROW_CODE.finditer(text)]
    assert not found, "x @ W1 is the row layout; with nn.Linear's layout write x @ W1.T:\n" + "\n".join(found)


def test_the_patterns_catch_the_other_layout():
    assert any(p.search(r"W_1 \in \mathbb{R}^{d \times d_\mathrm{ff}}") for p in ROW_LAYOUT)
    assert any(p.search("W1 of shape (d_model, d_ff)") for p in ROW_LAYOUT)
    assert not any(p.search(r"W_1 \in \mathbb{R}^{d_\mathrm{ff} \times d}") for p in ROW_LAYOUT)
    assert not any(p.search("W1 of shape (d_ff, d_model)") for p in ROW_LAYOUT)
    assert ROW_CODE.search("h = x @ W1 + b1") and not ROW_CODE.search("h = x @ W1.T + b1")
    assert not ROW_CODE.search("W = W2 @ W1") and not ROW_CODE.search("x @ w1[block].T")


def _exercises():
    for info in pkgutil.iter_modules(exercises.__path__):
        if info.name.startswith("nb"):
            module = importlib.import_module(f"{exercises.__name__}.{info.name}")
            for attr, value in vars(module).items():
                if isinstance(value, Exercise):
                    yield f"{info.name}.{attr}", value


WEIGHT_EXERCISES = []
for _name, _ex in _exercises():
    try:
        _params = list(inspect.signature(_ex.reference).parameters)
    except (TypeError, ValueError):
        continue
    if any(p in _params for p in ("W1", "w1", "W2", "w2")):
        WEIGHT_EXERCISES.append((_name, _ex, _params))


@pytest.mark.parametrize("name,exercise,params", WEIGHT_EXERCISES, ids=[n for n, _, _ in WEIGHT_EXERCISES])
def test_checkers_pass_weights_in_nn_linear_layout(name, exercise, params):
    """Every hidden case hands W1 as (d_ff, d_model) and W2 as (d_model, d_ff)."""
    saw_rectangular = False
    for case in exercise.cases():
        bound = dict(zip(params, case.args)) | case.kwargs
        w1 = bound.get("W1", bound.get("w1"))
        w2 = bound.get("W2", bound.get("w2"))
        x = next((bound[k] for k in ("x", "X") if isinstance(bound.get(k), torch.Tensor)), None)
        if isinstance(w1, torch.Tensor) and w1.dim() >= 2:
            saw_rectangular |= w1.shape[-1] != w1.shape[-2]
        if isinstance(w1, torch.Tensor) and isinstance(w2, torch.Tensor):
            assert w2.shape[-1] == w1.shape[-2], f"{name}: W2 {tuple(w2.shape)} does not take W1's {tuple(w1.shape)} output"
        if isinstance(w1, torch.Tensor) and x is not None and x.dim() >= 1:
            assert x.shape[-1] == w1.shape[-1], f"{name}: x {tuple(x.shape)} vs W1 {tuple(w1.shape)}: not (d_ff, d_model)"
        hidden = next((bound[k] for k in ("h", "H", "hidden") if isinstance(bound.get(k), torch.Tensor)), None)
        if isinstance(w2, torch.Tensor) and hidden is not None and hidden.dim() >= 1:
            assert hidden.shape[-1] == w2.shape[-1], f"{name}: hidden {tuple(hidden.shape)} vs W2 {tuple(w2.shape)}"
    assert saw_rectangular or not any(isinstance(dict(zip(params, c.args)).get("W1"), torch.Tensor)
                                      for c in exercise.cases()), \
        f"{name}: give at least one hidden case with d_ff != d_model, or the layout is not tested"
