"""No import cycles among the modules of worker, handlers, schema and scheduler: a module's
imports, read with ast (those under `if TYPE_CHECKING:` aside, which never run; those inside a
function counted, since they run when it is called), form no loop.

A loop makes the import order matter (a name is missing while its module is half run) and
ties the modules in it into one: none of them can be read, tested or moved alone."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("worker", "handlers", "schema", "scheduler")


def modules() -> dict[str, Path]:
    """Every module of the four packages by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that can run: all but those in an `if TYPE_CHECKING:` body."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.orelse:
                yield from runtime_imports(ast.Module(body=[child], type_ignores=[]))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from runtime_imports(node)


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of the four packages that importing `name` runs first: each one it names,
    and the packages above them (importing a.b runs a/__init__.py)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            above = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*above, base] if base else above)
        for alias in node.names:  # `from a import b`: the module a.b when there is one
            targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    found = set()
    for target in targets:
        while target:
            if target in known and target != name:
                found.add(target)
            target = target.rpartition(".")[0]
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def loop_in(component: frozenset[str], edges: dict[str, set[str]]) -> list[str]:
    """One import loop through the component, to name in a failure."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(edges[node] & component):
            if child == start:
                return [*paths[node], start]
            if child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    return sorted(component)


def test_no_import_cycle_among_the_modules() -> None:
    """No module of worker, handlers, schema and scheduler imports itself through others."""
    edges = graph()
    found = [" -> ".join(loop_in(cycle, edges)) for cycle in cycles(edges)]
    assert not found, f"import cycles: {'; '.join(found)}"


def test_the_reader_sees_a_cycle_and_skips_type_checking_imports(tmp_path: Path) -> None:
    """A two-module loop is found, through `from . import` and a function's import alike, and
    an import under `if TYPE_CHECKING:` makes none (c imports a, a imports c only for types)."""
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\nfrom . import b\nif TYPE_CHECKING:\n    import pkg.c\n"
    )
    (tmp_path / "b.py").write_text("def f():\n    import pkg.a\n")
    (tmp_path / "c.py").write_text("from pkg.a import f\n")
    known = {f"pkg.{n}": tmp_path / f"{n}.py" for n in "abc"} | {"pkg": tmp_path / "__init__.py"}
    edges = {name: imported(name, path, known) for name, path in known.items()}
    assert edges == {"pkg": set(), "pkg.a": {"pkg", "pkg.b"}, "pkg.b": {"pkg", "pkg.a"},
                     "pkg.c": {"pkg", "pkg.a"}}  # fmt: skip
    assert cycles(edges) == [frozenset({"pkg.a", "pkg.b"})]
