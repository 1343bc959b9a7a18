"""A damaged database: start-up refuses it in one line; met at run time, the worker says so."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import worker_config
from tests.support import Client, damage_table
from worker.app import App
from worker.commands import Exit

WORKER = [sys.executable, "-m", "worker"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMORY_WORKER_EMBEDDER": "none", "MEMORY_WORKER_LOG_FORMAT": "json"}
    return subprocess.run([*WORKER, *args], capture_output=True, text=True, timeout=30, env=env)


async def filled_and_stopped(nats_url: str, db: Path) -> None:
    app = App(worker_config(nats_url, db))
    await app.start()
    client = Client(app.nc)
    try:
        await asyncio.gather(*(client.store("a", f"note {i} " + "x" * 1500) for i in range(100)))
    finally:
        await app.stop()


def refused_in_one_line(done: subprocess.CompletedProcess[str], why: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("memory-worker: ")]
    assert why in line, line


async def test_run_refuses_a_file_that_is_not_a_database_without_a_traceback(
    nats_url: str, tmp_path: Path
) -> None:
    """A text file at the database path stops start-up: exit 1, one line, no traceback."""
    db = tmp_path / "memory.db"
    db.write_text("these are my notes, not a database\n" * 50)
    done = await asyncio.to_thread(cli, "run", "--db", str(db), "--nats-url", nats_url)
    refused_in_one_line(done, f"{db} is not a SQLite database or is damaged (NotADBError")


async def test_run_refuses_a_database_that_fails_quick_check(nats_url: str, tmp_path: Path) -> None:
    """A damaged page found by PRAGMA quick_check at start-up stops it: exit 1, one line."""
    db = tmp_path / "memory.db"
    await filled_and_stopped(nats_url, db)
    damage_table(db, "memories")
    done = await asyncio.to_thread(cli, "run", "--db", str(db), "--nats-url", nats_url)
    refused_in_one_line(done, f"{db} is damaged (PRAGMA quick_check: ")
    assert '"event": "worker.started"' not in done.stderr


async def test_damage_met_at_run_time_fails_check_and_shows_in_stats(
    nats_url: str, worker: App, client: Client
) -> None:
    """After a trigger meets a damaged page, `check` exits 1 saying the database is corrupt,
    and memory::stats and `memory-worker stats` report health "corrupt" with the reason."""
    await asyncio.gather(*(client.store("b", f"note {i} " + "x" * 1500) for i in range(100)))
    healthy = await asyncio.to_thread(cli, "check", "--nats-url", nats_url)
    assert healthy.returncode == Exit.OK, healthy.stderr
    damage_table(worker.config.db_path, "memories")
    # memory::stats counts memories through the primary key's index, not the table's pages.
    damage_table(worker.config.db_path, "sqlite_autoindex_memories_1")

    reply = await client.call("memory::recall", {"agentId": "b", "query": "note"})
    assert reply.code == "500"

    done = await asyncio.to_thread(cli, "check", "--nats-url", nats_url)
    assert done.returncode == Exit.ERROR_REPLY
    assert "damaged" in (reply.description or "")
    assert "answers but is unhealthy: database corrupt: memory::recall: CorruptError" in (
        done.stderr
    )
    stats = await client.ok("memory::stats")
    assert stats["health"] == "corrupt"
    assert stats["healthReason"].startswith("memory::recall: CorruptError: ")
    assert stats["memories"] is None  # not counted through the damaged index, yet an answer
    table = await asyncio.to_thread(cli, "stats", "--nats-url", nats_url)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].startswith("health                       corrupt: ")
    assert "memories                            ?" in table.stdout
