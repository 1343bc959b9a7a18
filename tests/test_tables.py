"""Every table of the schema is registered once (handlers/tables/), and a registration is all a
new table needs to be erased with its agent, carried by export and import, and counted."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar, get_type_hints

import apsw
import msgspec
import pytest

from handlers.life import Erasure, apply_erase
from handlers.stats import COUNTED, table_counts
from handlers.tables.records import NonEmpty, Record, TransferError, at
from handlers.tables.registered import TABLES
from handlers.tables.table import Skip, Stat, Table, Transfer, counted, delete_rows
from schema.base import DEFAULT_TENANT, StoredId, Tenant
from schema.life import EraseReply
from schema.stats import StatsReply
from worker.db import migrate, open_db
from worker.metrics import render_metrics
from worker.shards.node import SHARD_LOG_SQL
from worker.stats_table import render
from worker.telemetry import Telemetry
from worker.transfer.exporting import export_jsonl
from worker.transfer.importing import import_jsonl
from worker.transfer.staging import create_staging, temp_tables

T = TypeVar("T")


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[apsw.Connection]:
    conn = open_db(tmp_path / "memory.db", synchronous="normal")
    migrate(conn)
    yield conn
    conn.close()


def schema_tables(conn: apsw.Connection) -> set[str]:
    return {
        str(name)
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not str(name).startswith("sqlite_")
    }


def columns(conn: apsw.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in conn.execute(f'PRAGMA table_info("{table}")')}


def test_every_table_of_the_schema_is_registered_and_every_registration_is_a_table(
    conn: apsw.Connection,
) -> None:
    """The tables after every migration (and a shard file's log position) are exactly the
    registered ones, each registered once: a migration that adds a table fails here until
    the table says how it is erased, exported and counted."""
    conn.execute(SHARD_LOG_SQL)
    names = [table.name for table in TABLES]
    assert len(names) == len(set(names))
    assert schema_tables(conn) == set(names)


def test_an_owned_table_has_the_tenant_and_agent_columns_its_erasure_and_export_read(
    conn: apsw.Connection,
) -> None:
    """A table whose rows someone owns is keyed by `tenant` and `agent_id`; one nobody owns
    says why it is neither erased nor exported."""
    conn.execute(SHARD_LOG_SQL)
    for table in TABLES:
        if table.owner is not None:
            assert {"tenant", "agent_id"} <= columns(conn, table.name), table.name
        else:
            assert isinstance(table.erase, Skip) and table.erase.reason, table.name
            assert isinstance(table.transfer, Skip) and table.transfer.reason, table.name


def test_registrations_agree_with_the_replies_and_the_file_format(conn: apsw.Connection) -> None:
    """Record kinds, stats keys and staging tables are each one table's; every count of the
    erase and stats replies is some table's, and a table erases only into the erase reply's."""
    transfers = [t.transfer for t in TABLES if isinstance(t.transfer, Transfer)]
    kinds = [msgspec.inspect.type_info(t.record).tag for t in transfers]  # type: ignore[attr-defined]
    assert len(kinds) == len(set(kinds))
    assert len(COUNTED) == len(set(COUNTED))
    erased = [t.erased_as for t in TABLES if t.erased_as is not None]
    assert sorted(erased) == sorted(EraseReply.__struct_fields__)
    reply_counts = {name for name, kind in get_type_hints(StatsReply).items() if kind == int | None}
    assert reply_counts and reply_counts <= set(COUNTED)
    create_staging(conn, TABLES)
    assert temp_tables(conn) and all(name.startswith("transfer_") for name in temp_tables(conn))


# A toy table, as a new feature would add it: its migration and its registration, nothing else.
TOY_MIGRATION = """
CREATE TABLE notes (
    tenant   TEXT NOT NULL DEFAULT '',
    agent_id TEXT NOT NULL,
    id       TEXT NOT NULL,
    body     TEXT NOT NULL,
    PRIMARY KEY (tenant, agent_id, id)
) STRICT;
"""


class NoteRecord(Record, frozen=True, tag="note"):
    agent_id: StoredId
    id: NonEmpty
    body: str
    tenant: Tenant = DEFAULT_TENANT


def export_notes(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[NoteRecord]:
    for note_id, body in conn.execute(
        "SELECT id, body FROM notes WHERE tenant = ? AND agent_id = ? ORDER BY id",
        (tenant, agent_id),
    ):
        yield NoteRecord(tenant=tenant, agent_id=agent_id, id=note_id, body=body)


def stage_note(conn: apsw.Connection, r: NoteRecord, tenant: str, line: int) -> None:
    try:
        conn.execute(
            "INSERT INTO temp.transfer_notes VALUES (?, ?, ?, ?, ?)",
            (line, tenant, r.agent_id, r.id, r.body),
        )
    except apsw.ConstraintError:
        raise at(line, "a second note with this id", "id") from None


def apply_notes(conn: apsw.Connection, now: int) -> dict[str, int]:
    conn.execute(
        "INSERT OR IGNORE INTO main.notes (tenant, agent_id, id, body) "
        "SELECT tenant, agent_id, id, body FROM temp.transfer_notes ORDER BY seq"
    )
    return {"notes_added": int(conn.changes())}


NOTES = Table(
    name="notes",
    owner="agent",
    erase=delete_rows,
    transfer=Transfer(
        record=NoteRecord,
        export=export_notes,
        staging="CREATE TEMP TABLE transfer_notes (seq INTEGER PRIMARY KEY, tenant, agent_id, "
        "id, body, UNIQUE (tenant, agent_id, id));",
        stage=stage_note,
        apply=apply_notes,
        summary="notes {notes_added} added",
    ),
    stats=(
        Stat(
            key="notes",
            count=counted("SELECT count(*) FROM notes WHERE {where}"),
            label="notes",
            metric="Notes kept.",
        ),
    ),
)
WITH_NOTES = (*TABLES, NOTES)


def with_notes(path: Path) -> apsw.Connection:
    conn = open_db(path, synchronous="normal")
    migrate(conn)
    conn.execute(TOY_MIGRATION)
    return conn


def notes(conn: apsw.Connection) -> list[tuple[str, ...]]:
    return [tuple(row) for row in conn.execute("SELECT * FROM notes ORDER BY 1, 2, 3")]


@pytest.fixture
def noted(tmp_path: Path) -> Iterator[apsw.Connection]:
    conn = with_notes(tmp_path / "notes.db")
    conn.execute(
        "INSERT INTO notes VALUES ('', 'a', 'n1', 'one'), ('', 'a', 'n2', 'two'), "
        "('', 'b', 'n1', 'other'), ('TEAM', 'a', 'n1', 'another tenant')"
    )
    yield conn
    conn.close()


def test_a_registered_table_is_erased_with_its_agent(noted: apsw.Connection) -> None:
    """memory::erase removes the toy table's rows of the agent, and no other agent's."""
    with noted:
        reply = apply_erase(noted, Erasure(("", "a")), WITH_NOTES)
    assert notes(noted) == [("", "b", "n1", "other"), ("TEAM", "a", "n1", "another tenant")]
    assert reply == EraseReply(memories=0, sessions=0, entities=0, relations=0, kv_keys=0)


def test_a_registered_table_travels_in_export_and_import(
    noted: apsw.Connection, tmp_path: Path
) -> None:
    """Export writes the toy table's records with their agent; import stages, checks and
    applies them, counts them in its summary, and a second import adds nothing."""
    out = io.BytesIO()
    exported = export_jsonl(noted, out, agent_id=None, now=1, tables=WITH_NOTES)
    assert exported == 4 and out.getvalue().count(b'"kind":"note"') == 4
    target = with_notes(tmp_path / "target.db")
    lines = out.getvalue().splitlines(keepends=True)
    first = import_jsonl(target, lines, tables=WITH_NOTES)
    assert notes(target) == notes(noted)
    assert first.notes_added == 4 and "; notes 4 added" in first.summary()
    assert import_jsonl(target, lines, tables=WITH_NOTES).notes_added == 0
    doubled = [*lines[:2], lines[1], *lines[2:-1], lines[-1].replace(b"4", b"5")]
    with pytest.raises(TransferError, match=r"line 3: a second note with this id - at `\$\.id`"):
        import_jsonl(target, doubled, tables=WITH_NOTES)


class Direct:
    """Reads on the test's connection, as worker/readers.py's run them on a reader thread."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn

    async def run(self, fn: Callable[[apsw.Connection], T]) -> T:
        return fn(self.conn)


def test_a_registered_table_is_counted_in_stats_and_metrics(noted: apsw.Connection) -> None:
    """Its count is taken over the scope asked (a tenant, grants), becomes a gauge with its
    help text, and a line of `memory-worker stats` when a reply carries it."""
    assert table_counts(noted, now=0, tables=WITH_NOTES)["notes"] == 4
    assert table_counts(noted, "TEAM", now=0, tables=WITH_NOTES)["notes"] == 1
    assert table_counts(noted, "", ["b*"], now=0, tables=WITH_NOTES)["notes"] == 1
    text = asyncio.run(render_metrics(Telemetry(), Direct(noted), WITH_NOTES))
    assert "# HELP memory_worker_notes Notes kept.\n" in text
    assert "\nmemory_worker_notes 4\n" in text
    reply = {"triggers": {}, "notes": 4, "databaseBytes": 0, "schedule": {}}
    assert any(line.split() == ["notes", "4"] for line in render(reply, WITH_NOTES).splitlines())
