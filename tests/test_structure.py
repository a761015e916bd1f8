"""The package's import graph has no cycles (lazy imports inside functions included): each module has one direction
of dependence, so a module can be read, tested and changed without the ones that use it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hf_specgen"


def import_graph() -> dict[str, set[str]]:
    modules = {".".join(f.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): f
               for f in PACKAGE.rglob("*.py")}
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
                module = ".".join(filter(None, [base, node.module]))
                candidates = [module] + [f"{module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            graph[name] |= {c for c in candidates if c in modules and c != name and c != "hf_specgen"}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycles():
    graph = import_graph()
    assert "hf_specgen.reports" in graph["hf_specgen.bench.batch_curve"]  # a lazy import (inside a function) counts
    assert cycles(graph) == []


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
