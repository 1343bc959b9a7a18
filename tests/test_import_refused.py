"""A refused `memory-worker import` leaves no database behind that it was not asked to keep."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from worker.config import load_config
from worker.db import migrate, open_db
from worker.transfer.commands import import_command


def refuse(tmp_path: Path, db: Path, content: bytes | None) -> str:
    source = tmp_path / "agents.jsonl"
    if content is not None:
        source.write_bytes(content)
    config = load_config({}, db_path=str(db))
    assert import_command(config, argparse.Namespace(file=str(source), tenant=None)) == 1
    return str(source)


@pytest.mark.parametrize(
    "content",
    [b'{"kind": "end", "records": 0}\n', b"not json at all\n", b""],
    ids=["no-header", "not-json", "empty"],
)
def test_a_refused_file_leaves_no_new_database_or_directory(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad content refuses the import and removes the database file (and folder) it opened."""
    db = tmp_path / "new" / "deeper" / "memory.db"
    refuse(tmp_path, db, content)
    assert capsys.readouterr().err.startswith("memory-worker import: ")
    assert not (tmp_path / "new").exists()


def test_a_missing_file_creates_no_database(tmp_path: Path) -> None:
    """An import file that does not exist is refused before any database is opened."""
    db = tmp_path / "memory.db"
    refuse(tmp_path, db, None)
    assert sorted(tmp_path.iterdir()) == []


def test_a_refused_file_leaves_an_existing_database_as_it_was(tmp_path: Path) -> None:
    """Only what the import created is removed: a database that was there stays, unchanged."""
    db = tmp_path / "memory.db"
    conn = open_db(db)
    migrate(conn)
    conn.execute("INSERT INTO schedule_claims (job, last_fire) VALUES ('evict', 1)")
    conn.close()
    refuse(tmp_path, db, b"not json at all\n")
    conn = open_db(db)
    assert conn.execute("SELECT job, last_fire FROM schedule_claims").fetchall() == [("evict", 1)]
    conn.close()
