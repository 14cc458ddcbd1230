"""No import cycles among the modules of the `spamd` package.

Every import counts, at module level and inside functions and methods alike: a
function-level import only hides a cycle until that function runs, it does not
remove it. Only imports under `if TYPE_CHECKING:` are left out, since they never
run.

Importing `spamd.a.b` also runs `spamd/a/__init__.py` first, so a module that
imports `spamd.a.b` depends on `spamd.a` too; `from spamd.a import b` where `b` is
a submodule depends on `spamd.a.b` (and so on `spamd.a`). A package's
`__init__` importing its own submodules is no cycle by that alone: the package
is fully imported before anything outside it can import the submodule.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = "spamd"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the package."""
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join([package, *parts])] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    if isinstance(test, ast.Attribute):
        return test.attr == "TYPE_CHECKING"
    return False


def _imports(tree: ast.AST) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import statement in the tree, in any scope, but not under `if TYPE_CHECKING:`."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)  # the `else:` branch does run
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _with_parents(name: str, package: str) -> set[str]:
    """`spamd.a.b` -> {spamd.a.b, spamd.a, spamd}: importing a module imports its packages."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]).startswith(package)}


def dependencies(name: str, path: Path, modules: Mapping[str, Path], package: str = PACKAGE) -> set[str]:
    """The package's modules that importing `name` (from `path`) runs."""
    is_package = path.name == "__init__.py"
    # The package a relative import starts from.
    here = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.add(alias.name)
            continue
        if node.level:
            base_parts = here.split(".")
            if node.level > 1:
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join(base_parts)
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module or ""
        targets.add(source)
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            if submodule in modules:
                targets.add(submodule)
    # The packages that hold `name` are already being imported when it runs, so the
    # implicit edge to them (importing a sibling) is no dependency; an explicit import
    # of one of them (`from spamd.cli import x` inside spamd/cli/) still is.
    ancestors = _with_parents(name, package) - {name}
    found: set[str] = set()
    for target in targets:
        if target == package or target.startswith(package + "."):
            found |= {m for m in _with_parents(target, package) - ancestors if m in modules}
            if target in modules:
                found.add(target)
    found.discard(name)
    return found


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    modules = module_files(root, package)
    return {name: dependencies(name, path, modules, package) for name, path in modules.items()}


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a self-loop), each sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    def nodes() -> set[str]:
        every = set(graph)
        for targets in graph.values():
            every |= set(targets)
        return every

    for start in sorted(nodes()):
        if start in index:
            continue
        # Iterative Tarjan: (node, iterator over its successors).
        work: list[tuple[str, Iterable[str]]] = []
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        work.append((start, iter(sorted(graph.get(start, ())))))
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def a_cycle_through(component: list[str], graph: Mapping[str, Iterable[str]]) -> list[str]:
    """One concrete import path a -> b -> ... -> a inside a strongly connected component, for the message."""
    members = set(component)
    start = component[0]
    # Breadth-first from start's successors back to start, within the component.
    parents: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        following: list[str] = []
        for node in frontier:
            for successor in sorted(graph.get(node, ())):
                if successor not in members:
                    continue
                if successor == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if successor not in seen:
                    seen.add(successor)
                    parents[successor] = node
                    following.append(successor)
        frontier = following
    return component


def describe(found: list[list[str]], graph: Mapping[str, Iterable[str]]) -> str:
    lines = [f"{len(found)} import cycle(s) among the {PACKAGE} modules:"]
    for component in found:
        lines.append(f"  modules {', '.join(component)}")
        lines.append(f"    e.g. {' -> '.join(a_cycle_through(component, graph))}")
    return "\n".join(lines)


def test_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}}
    found = cycles(graph)
    assert found == [["a", "b", "c"], ["e"]]
    assert a_cycle_through(["a", "b", "c"], graph) == ["a", "b", "c", "a"]
    assert "a, b, c" in describe(found, graph)
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_graph_counts_function_level_imports_and_parent_packages(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("from pkg import top\n")
    (root / "sub" / "leaf.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pkg import hidden\n"
        "def f():\n"
        "    from .. import top\n"
    )
    (root / "top.py").write_text("def g():\n    import pkg.sub.leaf\n")
    (root / "hidden.py").write_text("from pkg.sub import leaf\n")
    (root / "other.py").write_text("from pkg.sub import leaf\n")
    graph = import_graph(root, "pkg")
    assert graph["pkg.sub.leaf"] == {"pkg", "pkg.top"}
    # pkg is being imported whenever pkg.top runs: importing a sibling adds no edge to it.
    assert graph["pkg.top"] == {"pkg.sub", "pkg.sub.leaf"}
    assert graph["pkg.other"] == {"pkg.sub", "pkg.sub.leaf"}
    assert "pkg.hidden" not in graph["pkg.sub.leaf"]
    assert cycles(graph) == [["pkg.sub", "pkg.sub.leaf", "pkg.top"]]


def test_no_import_cycles_in_spamd() -> None:
    graph = import_graph()
    assert "spamd.engine.engine" in graph and "spamd.store" in graph, "the walk found no spamd modules"
    found = cycles(graph)
    assert not found, describe(found, graph)
