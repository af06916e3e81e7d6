"""The project's import graph (#35): no import cycle between its modules, and paper/ imports no method and
no runner.

Every `.py` under the project's packages is parsed with `ast` (nothing is imported). An edge a -> b is an
import of project module b anywhere in a: at the top, inside functions and classes, inside `try` or `if`,
except under `if TYPE_CHECKING:` (never executed). `import a.b.c` and `from a.b import c` are edges to the
most specific project module they name (`a.b.c` when it is a module, else `a.b`); relative imports are
resolved against the importing module's package. A module importing itself (`if __name__ == "__main__":
from experiments.compare import main`) is not a cycle between modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "envs", "experiments", "replications", "paper", "slurm", "bench", "scripts")
PAPER_MUST_NOT_IMPORT = ("replications", "experiments")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
            if ".venv" not in p.parts}


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under `node`, skipping the bodies of `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child.test):
            for stmt in child.orelse:
                yield from _imports(ast.Module(body=[stmt], type_ignores=[]))
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        yield from _imports(child)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The most specific project module that `name` (a dotted name) is or is inside of."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in modules:
            return ".".join(parts[:i])
    return None


def imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `module` imports (see the module docstring)."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if base else a.name for a in node.names]
        out |= {t for t in (_resolve(x, modules) for x in targets) if t is not None}
    out.discard(module)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {m: imported(m, p, modules) for m, p in modules.items()}


def knots(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted; sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def shortest_cycle(graph: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """A shortest cycle from `start` back to it through `within` (breadth first), as a path."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & within):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start]


def cycles_text(graph: dict[str, set[str]]) -> str:
    lines = []
    for knot in knots(graph):
        lines.append(" -> ".join(shortest_cycle(graph, knot[0], set(knot)))
                     + (f"  (knot of {len(knot)}: {', '.join(knot)})" if len(knot) > 2 else ""))
    return "\n".join(lines)


def test_the_walk_sees_the_project():
    graph = import_graph()
    assert {"paper.build", "common.stats", "experiments.compare"} <= set(graph)
    assert "paper.load" in graph["paper.build"]  # a top-level import
    assert "common.stats" in graph["paper.head_to_head"]


def test_the_walk_resolves_relative_imports_and_skips_type_checking(tmp_path):
    files = {"pkg": "pkg/__init__.py", "pkg.a": "pkg/a.py", "pkg.b": "pkg/b.py",
             "pkg.sub": "pkg/sub/__init__.py", "pkg.sub.c": "pkg/sub/c.py"}
    modules = {m: tmp_path / f for m, f in files.items()}
    for p in modules.values():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    modules["pkg.sub.c"].write_text(
        "from typing import TYPE_CHECKING\nfrom .. import a\nif TYPE_CHECKING:\n    from pkg import b\n"
        "else:\n    import os\ndef f():\n    from . import nothing\n    from ..sub import c\n")
    assert imported("pkg.sub.c", modules["pkg.sub.c"], modules) == {"pkg.a", "pkg.sub"}
    modules["pkg.sub.c"].write_text("def f():\n    import pkg.b.x\n")
    assert imported("pkg.sub.c", modules["pkg.sub.c"], modules) == {"pkg.b"}  # inside a function too


def test_knots_and_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}}
    assert knots(graph) == [["a", "b", "c"], ["e", "f"]]
    assert cycles_text(graph) == "a -> b -> c -> a  (knot of 3: a, b, c)\ne -> f -> e"


def test_no_import_cycle():
    found = cycles_text(import_graph())
    assert not found, f"import cycles between the project's modules:\n{found}"


def test_paper_imports_no_method_and_no_runner():
    graph = import_graph()
    bad = sorted(f"{m} imports {t}" for m, ts in graph.items() if m.split(".")[0] == "paper"
                 for t in ts if t.split(".")[0] in PAPER_MUST_NOT_IMPORT)
    assert not bad, "paper/ reads run folders and card files only:\n" + "\n".join(bad)
