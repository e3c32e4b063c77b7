"""The house's imports go one way: no module of src/kdbert imports, directly or through others (at
module level or inside a function), a module that imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

import kdbert

SOURCE = Path(kdbert.__file__).parent


def import_graph(root: Path, package: str = "kdbert") -> dict[str, set[str]]:
    """Module name -> the package's modules it imports (``from a.b import c`` counts ``a.b.c`` where
    that is a module, else ``a.b``)."""
    modules = {}
    for path in root.rglob("*.py"):
        name = ".".join((package, *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        modules[name] = path
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                            for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_import_circle():
    assert circles(import_graph(SOURCE)) == []


def test_a_circle_through_a_function_level_import_is_found(tmp_path):
    (tmp_path / "evaluate.py").write_text("from pkg.helpers import x\n\n\ndef pick():\n    from pkg.qa import Q\n")
    (tmp_path / "qa.py").write_text("from pkg.evaluate import predict\n")
    (tmp_path / "helpers.py").write_text("import os\n")
    assert circles(import_graph(tmp_path, "pkg")) == [["pkg.evaluate", "pkg.qa"]]
