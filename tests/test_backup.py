"""`memory-worker backup`: a consistent copy taken while the worker serves, restorable."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import apsw

from tests.conftest import worker_config
from tests.support import Client
from worker.app import App


async def test_backup_while_serving_is_consistent_and_restores_the_same_recall(
    nats_url: str, tmp_path: Path, client: Client, worker: App
) -> None:
    before = [await client.store("a", f"early note {i}") for i in range(200)]
    writes = asyncio.gather(*(client.store("a", f"late note {i}") for i in range(300)))
    target = tmp_path / "copies" / "backup.db"
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "worker", "backup", str(target), "--db", worker.config.db_path],
        capture_output=True,
        text=True,
    )
    await writes
    assert done.returncode == 0, done.stderr
    conn = apsw.Connection(str(target))
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    copied = {row[0] for row in conn.execute("SELECT id FROM memories")}
    conn.close()
    assert {reply["id"] for reply in before} <= copied
    assert not (tmp_path / "copies" / "backup.db.partial").exists()

    expected = await client.recall("a", "early note 7", limit=5)
    restored = App(worker_config(nats_url, target, subject_prefix="restored."))
    await restored.start()
    try:
        got = await Client(client.nc, "restored.").recall("a", "early note 7", limit=5)
    finally:
        await restored.stop()
    assert [m["id"] for m in got][:1] == [m["id"] for m in expected][:1]
    assert got[0]["content"] == "early note 7"


def backup(target: Path, db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", "backup", str(target), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_backup_of_a_missing_database_fails_and_creates_nothing(tmp_path: Path) -> None:
    """A mistyped --db exits 1 with one line, and creates neither the source nor a copy."""
    missing = tmp_path / "typo" / "memory.db"
    done = backup(tmp_path / "copy.db", missing)
    assert done.returncode == 1
    assert done.stderr == f"memory-worker backup: no database at {missing}; nothing to back up\n"
    assert sorted(tmp_path.iterdir()) == []


def test_backup_of_a_file_that_is_not_a_database_fails_in_one_line(tmp_path: Path) -> None:
    """A text file, or an empty one, at --db is refused without a traceback or a copy."""
    for name, content in (("notes.db", "hello\n" * 100), ("empty.db", "")):
        source = tmp_path / name
        source.write_text(content)
        done = backup(tmp_path / "copy.db", source)
        assert done.returncode == 1, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith(f"memory-worker backup: {source} is not a")
        assert not (tmp_path / "copy.db").exists()
        assert not (tmp_path / "copy.db.partial").exists()
