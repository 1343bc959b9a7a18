"""One storage unit (worker/storage.py), opened alike by single mode and by each partition of a
shard, with what is per process (the recall gate first) shared by all the units of a process."""

from __future__ import annotations

import ast
import time
from pathlib import Path

from tests.test_shards import shards
from worker.recalls_first import STORE_WAIT_S

ROOT = Path(__file__).resolve().parent.parent
BATCHES = 5


async def test_a_partition_writer_waits_for_a_recall_on_any_partition_of_its_shard(
    nats_url: str, tmp_path: Path
) -> None:
    """While a recall is in progress on one partition, another partition's writer holds each
    batch back (up to STORE_WAIT_S), as single mode's writer does: the partitions of a shard
    share its cores, and one recall gate."""
    async with shards(nats_url, tmp_path, "s1") as [app]:
        recalling, writing = app.nodes[0].services, app.nodes[1].services
        assert recalling is not None and writing is not None
        assert writing.recalls_first is recalling.recalls_first
        with recalling.recalls_first.recalling():
            started = time.monotonic()
            for _ in range(BATCHES):  # one batch each: the next is queued after the commit
                await writing.writer.run(lambda conn: None, durable=False)
            held = time.monotonic() - started
        assert held >= BATCHES * STORE_WAIT_S * 0.9, held


def _imports(path: Path) -> set[str]:
    """The modules a source file imports, inside functions too (what runs, sooner or later),
    apart from `if TYPE_CHECKING:` blocks (what never runs)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for statement in node.orelse:
                visit(statement)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _source(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _reached_from(module: str) -> set[str]:
    """Every module of this repository that importing `module` may import, transitively."""
    reached, todo = set(), [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for k in range(1, len(parts) + 1):  # a module's packages are imported with it
            parent = ".".join(parts[:k])
            path = _source(parent)
            if path is not None and parent not in reached:
                reached.add(parent)
                todo.extend(_imports(path))
    return reached


def test_the_shard_process_never_imports_the_single_mode_app() -> None:
    """worker.app may start a shard (worker.shards.app); nothing a shard imports, even inside a
    function, imports worker.app back: the embedder's choice and the storage unit live where
    both import them."""
    assert "worker.shards.app" in _reached_from("worker.app")
    assert "worker.app" not in _reached_from("worker.shards.app")
