"""Importing an export file: validate all of it, then apply it in one short transaction.

Records are checked and staged into TEMP tables first. Temp tables belong to this connection
alone, so reading a long file takes no lock on the database and a worker serving the same file
keeps writing meanwhile; only the final apply holds the write lock, and a bad line anywhere
leaves the database untouched. The worker notices the commit (SQLite's data_version) and reloads
its recall index.

What a second import of the same file does, kind by kind:
- memories are keyed by id and never overwritten: a known id, or content the agent already
  holds under another id, is skipped (the target's scores and counters win). Session refs to a
  memory skipped for its content point to the id the agent already has, as memory::store would.
- sessions are replaced: an imported session's row and message list become exactly the file's
  (positions renumbered 1..n, only their order means anything); other sessions are untouched.
  Merging two lists has no order that is right for both, so replacing is the predictable rule.
- entities are upserted (the file's type and properties win); relations are added if missing.
Counts report what changed, so importing the same file twice reports 0 changes the second time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import apsw

from handlers.session_refs import read_messages, write_messages
from worker.transfer.staging import MEMORY_COLUMNS, STAGE_SQL, STAGE_TABLES, stage

REMAP_SQL = """
UPDATE temp.transfer_messages SET memory_id = kept.id
FROM temp.transfer_memories AS t
JOIN main.memories AS kept ON kept.agent_id = t.agent_id AND kept.hash = t.hash
WHERE t.id = transfer_messages.memory_id AND t.agent_id = transfer_messages.agent_id
    AND kept.id <> t.id
"""
ENTITY_UPSERT_SQL = """
INSERT INTO main.kg_entities (agent_id, id, type, properties)
SELECT agent_id, id, type, properties FROM temp.transfer_entities WHERE true ORDER BY seq
ON CONFLICT (agent_id, id) DO UPDATE SET type = excluded.type, properties = excluded.properties
WHERE type IS NOT excluded.type OR properties IS NOT excluded.properties
"""


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

    def summary(self) -> str:
        return (
            f"{self.records} records: memories {self.memories_imported} imported, "
            f"{self.memories_skipped} skipped; sessions {self.sessions_written} written, "
            f"{self.sessions_unchanged} unchanged; entities {self.entities_written} written, "
            f"{self.entities_unchanged} unchanged; relations {self.relations_added} added, "
            f"{self.relations_present} present"
        )


def _staged(conn: apsw.Connection, table: str) -> int:
    return int(conn.execute(f"SELECT count(*) FROM temp.transfer_{table}").get)


def _apply_sessions(conn: apsw.Connection) -> int:
    """Replace each imported session whose row or list differs; returns how many were written."""
    written = 0
    staged = conn.execute(
        "SELECT seq, agent_id, id, created_at, updated_at, compacted_at, repaired_at "
        "FROM temp.transfer_sessions ORDER BY seq"
    )
    for seq, agent_id, session_id, *times in staged:
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
            "WHERE agent_id = ? AND id = ?",
            (agent_id, session_id),
        ).fetchone()
        if current == tuple(times) and read_messages(conn, agent_id, session_id) == refs:
            continue
        conn.execute(
            "INSERT INTO main.sessions (agent_id, id, created_at, updated_at, compacted_at, "
            "repaired_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (agent_id, id) DO UPDATE SET "
            "created_at = excluded.created_at, updated_at = excluded.updated_at, "
            "compacted_at = excluded.compacted_at, repaired_at = excluded.repaired_at",
            (agent_id, session_id, *times),
        )
        write_messages(conn, agent_id, session_id, refs)
        written += 1
    return written


def _apply(conn: apsw.Connection, records: int) -> ImportResult:
    counts = {table: _staged(conn, table) for table in STAGE_TABLES}
    conn.execute(
        f"INSERT OR IGNORE INTO main.memories ({MEMORY_COLUMNS}) "
        f"SELECT {MEMORY_COLUMNS} FROM temp.transfer_memories ORDER BY seq"
    )
    memories = conn.changes()
    conn.execute(REMAP_SQL)
    sessions = _apply_sessions(conn)
    conn.execute(ENTITY_UPSERT_SQL)
    entities = conn.changes()
    conn.execute(
        "INSERT OR IGNORE INTO main.kg_relations (agent_id, source, type, target) "
        "SELECT agent_id, source, type, target FROM temp.transfer_relations ORDER BY seq"
    )
    relations = conn.changes()
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
    )


def import_jsonl(
    conn: apsw.Connection,
    lines: Iterable[bytes],
    *,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import an export file into a migrated database, all of it or nothing.

    `conn` must not be inside a transaction: this function owns its two (staging, apply).
    `progress` receives the bytes read so far after each line.
    """
    drop = "".join(f"DROP TABLE IF EXISTS temp.transfer_{table};" for table in STAGE_TABLES)
    conn.execute(drop)
    conn.execute(STAGE_SQL)
    try:
        with conn:
            records = stage(conn, lines, progress)
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
