"""No import circle in ``helpers``: every intra-package import, module-level or inside a function, read statically.

A circle hides an "upward" import (an earlier idea reaching into a later one, as ``helpers.costs`` once imported
``helpers.moe`` inside ``layer_cost`` while ``helpers.moe`` imported ``helpers.costs``): it works only while every
import of it stays lazy, and it breaks the order the course builds the library in.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "helpers"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The package module ``name`` refers to (itself, or the longest prefix that is a module)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> set[str]:
    """Package modules ``module`` imports anywhere in its source (functions, classes and ``if`` blocks included)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:                                    # from . import x / from .y import z
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            resolved = _resolve(target)
            if resolved is not None and resolved != module and resolved != "helpers":
                found.add(resolved)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted: the import circles."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_function_level_imports():
    assert "helpers.moe" in GRAPH["helpers.expert_parallel"]            # imported inside demo_problem only
    assert "helpers.costs" in GRAPH["helpers.moe"] and "helpers.ffn" in GRAPH["helpers.costs"]


def test_the_circle_finder_finds_a_circle_through_a_function_level_import():
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["helpers.costs"].add("helpers.moe")                          # what layer_cost once did, lazily
    assert ["helpers.costs", "helpers.moe"] in circles(graph)


def test_no_import_circle_in_helpers():
    assert circles(GRAPH) == [], "import circles in helpers (cut each by moving the piece to the later module)"


@pytest.mark.parametrize("later", ["helpers.moe", "helpers.expert_parallel", "helpers.tensor_parallel",
                                   "helpers.distributed", "helpers.inference"])
def test_costs_and_the_ffn_reach_no_later_idea(later):
    """The FFN and its accounting come before the MoE and the distributed modules: nothing they import reaches them."""
    for early in ("helpers.ffn", "helpers.costs", "helpers.activations", "helpers.chunking"):
        seen, todo = set(), [early]
        while todo:
            module = todo.pop()
            for target in GRAPH[module] - seen:
                seen.add(target)
                todo.append(target)
        assert later not in seen, f"{early} reaches {later}"
