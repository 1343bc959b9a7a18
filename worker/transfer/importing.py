"""Importing an export file: validate all of it, then apply it in one short transaction.

Records are checked and staged into TEMP tables first. Temp tables belong to this connection
alone, so reading a long file takes no lock on the database and a worker serving the same file
keeps writing meanwhile; only the final apply holds the write lock, and a bad line anywhere
leaves the database untouched. The worker notices the commit (SQLite's data_version) and reloads
its recall index.

An agent is a (tenant, agentId) pair: every key below starts with the tenant, so one agentId in
two tenants is two agents here as everywhere.

What a second import of the same file does, kind by kind:
- memories are keyed by id and never overwritten: a known id, or content the agent already
  holds under another id, is skipped (the target's scores and counters win). Session refs to a
  memory skipped for its content point to the id the agent already has, as memory::store would.
  Memory ids are unique in the whole database, so a memory whose id another agent holds (a copy
  of an agent into another tenant of the same database) gets a new id, and its refs follow.
- sessions are replaced: an imported session's row and message list become exactly the file's
  (positions renumbered 1..n, only their order means anything); other sessions are untouched.
  Merging two lists has no order that is right for both, so replacing is the predictable rule.
- entities are upserted (the file's type and properties win); relations are added if missing.
Counts report what changed, so importing the same file twice reports 0 changes the second time.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import apsw

from handlers.audit import Call, Change, record
from worker.services import wall_clock_ms
from worker.transfer.exporting import check_tenant
from worker.transfer.staging import MEMORY_COLUMNS, STAGE_SQL, STAGE_TABLES, stage
from worker.transfer.state import apply_state

# Staged memories whose id another agent holds, and whose content the importing agent does not
# have yet (then the row is skipped and its refs go to the id the agent has: REMAP_SQL).
TAKEN_SQL = """
SELECT t.seq FROM temp.transfer_memories AS t
JOIN main.memories AS held ON held.id = t.id
    AND (held.tenant <> t.tenant OR held.agent_id <> t.agent_id)
WHERE NOT EXISTS (SELECT 1 FROM main.memories AS kept
    WHERE kept.tenant = t.tenant AND kept.agent_id = t.agent_id AND kept.hash = t.hash)
"""
RENAME_SQL = """
UPDATE temp.transfer_messages SET memory_id = t.fresh_id
FROM temp.transfer_memories AS t
WHERE t.fresh_id IS NOT NULL AND t.id = transfer_messages.memory_id
    AND t.tenant = transfer_messages.tenant AND t.agent_id = transfer_messages.agent_id;
UPDATE temp.transfer_memories SET id = fresh_id WHERE fresh_id IS NOT NULL;
"""
REMAP_SQL = """
UPDATE temp.transfer_messages SET memory_id = kept.id
FROM temp.transfer_memories AS t
JOIN main.memories AS kept
    ON kept.tenant = t.tenant AND kept.agent_id = t.agent_id AND kept.hash = t.hash
WHERE t.id = transfer_messages.memory_id AND t.tenant = transfer_messages.tenant
    AND t.agent_id = transfer_messages.agent_id AND kept.id <> t.id
"""
ENTITY_UPSERT_SQL = """
INSERT INTO main.kg_entities (tenant, agent_id, id, type, properties)
SELECT tenant, agent_id, id, type, properties FROM temp.transfer_entities WHERE true ORDER BY seq
ON CONFLICT (tenant, agent_id, id) DO UPDATE SET type = excluded.type,
    properties = excluded.properties
WHERE type IS NOT excluded.type OR properties IS NOT excluded.properties
"""
Ref = tuple[str | None, str, int]


@dataclass(frozen=True)
class ImportResult:
    records: int
    memories_imported: int
    memories_skipped: int
    sessions_written: int
    sessions_unchanged: int
    entities_written: int
    entities_unchanged: int
    relations_added: int
    relations_present: int
    kv_written: int = 0
    tasks_added: int = 0
    usage_added: int = 0
    canonical_written: int = 0

    def summary(self) -> str:
        return (
            f"{self.records} records: memories {self.memories_imported} imported, "
            f"{self.memories_skipped} skipped; sessions {self.sessions_written} written, "
            f"{self.sessions_unchanged} unchanged; entities {self.entities_written} written, "
            f"{self.entities_unchanged} unchanged; relations {self.relations_added} added, "
            f"{self.relations_present} present; keys {self.kv_written} written, tasks "
            f"{self.tasks_added} added, usage records {self.usage_added} added, canonical "
            f"sessions {self.canonical_written} written"
        )


def _staged(conn: apsw.Connection, table: str) -> int:
    return int(conn.execute(f"SELECT count(*) FROM temp.transfer_{table}").get)


def _messages(conn: apsw.Connection, key: tuple[str, str, str]) -> list[Ref]:
    return [
        (row[0], row[1], row[2])
        for row in conn.execute(
            "SELECT memory_id, role, timestamp FROM main.session_messages "
            "WHERE tenant = ? AND agent_id = ? AND session_id = ? ORDER BY position",
            key,
        )
    ]


def _replace_messages(conn: apsw.Connection, key: tuple[str, str, str], refs: list[Ref]) -> None:
    """The session's list becomes `refs`, positions 1..n (as handlers/session_refs does, here
    with the tenant in the key)."""
    conn.execute(
        "DELETE FROM main.session_messages WHERE tenant = ? AND agent_id = ? AND session_id = ?",
        key,
    )
    conn.executemany(
        "INSERT INTO main.session_messages (tenant, agent_id, session_id, position, memory_id, "
        "role, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(*key, position, *ref) for position, ref in enumerate(refs, start=1)],
    )


def _rename_taken(conn: apsw.Connection) -> None:
    """Give a new id to each staged memory whose id another agent holds, refs included."""
    taken = [(str(uuid.uuid4()), seq) for (seq,) in conn.execute(TAKEN_SQL).fetchall()]
    if taken:
        conn.executemany("UPDATE temp.transfer_memories SET fresh_id = ? WHERE seq = ?", taken)
        conn.execute(RENAME_SQL)


def _apply_sessions(conn: apsw.Connection) -> int:
    """Replace each imported session whose row or list differs; returns how many were written."""
    written = 0
    staged = conn.execute(
        "SELECT seq, tenant, agent_id, id, created_at, updated_at, compacted_at, repaired_at "
        "FROM temp.transfer_sessions ORDER BY seq"
    ).fetchall()
    for seq, tenant, agent_id, session_id, *times in staged:
        key = (str(tenant), str(agent_id), str(session_id))
        refs = [
            (row[0], row[1], row[2])
            for row in conn.execute(
                "SELECT memory_id, role, timestamp FROM temp.transfer_messages "
                "WHERE session_seq = ? ORDER BY position",
                (seq,),
            )
        ]
        current = conn.execute(
            "SELECT created_at, updated_at, compacted_at, repaired_at FROM main.sessions "
            "WHERE tenant = ? AND agent_id = ? AND id = ?",
            key,
        ).fetchone()
        if current == tuple(times) and _messages(conn, key) == refs:
            continue
        conn.execute(
            "INSERT INTO main.sessions (tenant, agent_id, id, created_at, updated_at, "
            "compacted_at, repaired_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (tenant, agent_id, id) DO UPDATE SET "
            "created_at = excluded.created_at, updated_at = excluded.updated_at, "
            "compacted_at = excluded.compacted_at, repaired_at = excluded.repaired_at",
            (*key, *times),
        )
        _replace_messages(conn, key, refs)
        written += 1
    return written


def _apply(conn: apsw.Connection, records: int) -> ImportResult:
    counts = {table: _staged(conn, table) for table in STAGE_TABLES}
    _rename_taken(conn)
    imported: dict[tuple[str, str], list[str]] = {}
    for tenant, agent_id, memory_id in conn.execute(
        f"INSERT OR IGNORE INTO main.memories ({MEMORY_COLUMNS}) "
        f"SELECT {MEMORY_COLUMNS} FROM temp.transfer_memories WHERE true ORDER BY seq "
        "RETURNING tenant, agent_id, id"
    ):
        imported.setdefault((str(tenant), str(agent_id)), []).append(str(memory_id))
    memories = sum(len(ids) for ids in imported.values())
    # The audit of an import: the memories it brought, per agent, from the command line.
    changes = [Change(agent, ids) for agent, ids in imported.items()]
    record(conn, Call("memory::import", "cli"), changes, wall_clock_ms())
    conn.execute(REMAP_SQL)
    sessions = _apply_sessions(conn)
    conn.execute(ENTITY_UPSERT_SQL)
    entities = conn.changes()
    conn.execute(
        "INSERT OR IGNORE INTO main.kg_relations (tenant, agent_id, source, type, target) "
        "SELECT tenant, agent_id, source, type, target FROM temp.transfer_relations ORDER BY seq"
    )
    relations = conn.changes()
    # An agent switched off in the file stays off; one switched off here stays off too.
    conn.execute(
        "INSERT OR IGNORE INTO main.agent_switch (tenant, agent_id, disabled_at) "
        "SELECT tenant, agent_id, disabled_at FROM temp.transfer_switches ORDER BY seq"
    )
    state = apply_state(conn)
    return ImportResult(
        records=records,
        memories_imported=memories,
        memories_skipped=counts["memories"] - memories,
        sessions_written=sessions,
        sessions_unchanged=counts["sessions"] - sessions,
        entities_written=entities,
        entities_unchanged=counts["entities"] - entities,
        relations_added=relations,
        relations_present=counts["relations"] - relations,
        kv_written=state.kv_written,
        tasks_added=state.tasks_added,
        usage_added=state.usage_added,
        canonical_written=state.canonical_written,
    )


def import_jsonl(
    conn: apsw.Connection,
    lines: Iterable[bytes],
    *,
    progress: Callable[[int], None] | None = None,
    tenant: str | None = None,
) -> ImportResult:
    """Import an export file into a migrated database, all of it or nothing.

    `conn` must not be inside a transaction: this function owns its two (staging, apply).
    `progress` receives the bytes read so far after each line. `tenant` puts every record into
    that tenant (how the default tenant moves into an account); None keeps each record's own.
    """
    if tenant is not None:
        check_tenant(tenant, "--tenant")
    drop = "".join(f"DROP TABLE IF EXISTS temp.transfer_{table};" for table in STAGE_TABLES)
    conn.execute(drop)
    conn.execute(STAGE_SQL)
    try:
        with conn:
            records = stage(conn, lines, progress, into=tenant)
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = _apply(conn, records)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result
    finally:
        conn.execute(drop)
