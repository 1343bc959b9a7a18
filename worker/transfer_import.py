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
import msgspec

from handlers.session_refs import read_messages, write_messages
from handlers.store import content_hash
from worker.transfer_export import (
    VERSION,
    AnyRecord,
    End,
    EntityRecord,
    Header,
    MemoryRecord,
    SessionRecord,
    TransferError,
)

MEMORY_COLUMNS = (
    "id, agent_id, role, content, hash, session_id, importance, confidence, access_count, "
    "last_accessed, timestamp, metadata, embedding, embedding_model, created_at"
)
STAGE_TABLES = ("memories", "sessions", "messages", "entities", "relations")
STAGE_SQL = f"""
CREATE TEMP TABLE transfer_memories (seq INTEGER PRIMARY KEY, {MEMORY_COLUMNS},
    UNIQUE (id), UNIQUE (agent_id, hash));
CREATE TEMP TABLE transfer_sessions (seq INTEGER PRIMARY KEY, agent_id, id, created_at, updated_at,
    compacted_at, repaired_at, UNIQUE (agent_id, id));
CREATE TEMP TABLE transfer_messages (session_seq INTEGER, position INTEGER, agent_id, memory_id,
    role, timestamp, PRIMARY KEY (session_seq, position));
CREATE TEMP TABLE transfer_entities (seq INTEGER PRIMARY KEY, agent_id, id, type, properties,
    UNIQUE (agent_id, id));
CREATE TEMP TABLE transfer_relations (seq INTEGER PRIMARY KEY, agent_id, source, type, target);
"""
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


def _at(line: int, message: str, field: str) -> TransferError:
    return TransferError(f"line {line}: {message} - at `$.{field}`")


def _stage_memory(conn: apsw.Connection, r: MemoryRecord, line: int) -> None:
    if content_hash(r.content) != r.hash:
        raise _at(line, "hash is not the SHA-256 of content", "hash")
    if (r.embedding is None) != (r.embedding_model is None):
        raise _at(line, "embedding and embeddingModel are both set or both null", "embedding")
    if r.embedding is not None and len(r.embedding) % 4:
        raise _at(line, f"embedding has {len(r.embedding)} bytes, not float32 values", "embedding")
    metadata = None if r.metadata is None else msgspec.json.encode(r.metadata).decode()
    try:
        conn.execute(
            f"INSERT INTO temp.transfer_memories (seq, {MEMORY_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                line,
                r.id,
                r.agent_id,
                r.role,
                r.content,
                r.hash,
                r.session_id,
                r.importance,
                r.confidence,
                r.access_count,
                r.last_accessed,
                r.timestamp,
                metadata,
                r.embedding,
                r.embedding_model,
                r.created_at,
            ),
        )
    except apsw.ConstraintError:
        first = conn.execute(
            "SELECT seq, id = ? FROM temp.transfer_memories WHERE id = ? OR "
            "(agent_id = ? AND hash = ?)",
            (r.id, r.id, r.agent_id, r.hash),
        ).fetchone()
        assert first is not None
        what = "the same id" if first[1] else "the same agent and content"
        raise _at(line, f"a memory with {what} is on line {first[0]}", "id") from None


def _stage_session(conn: apsw.Connection, r: SessionRecord, line: int) -> None:
    try:
        conn.execute(
            "INSERT INTO temp.transfer_sessions VALUES (?, ?, ?, ?, ?, ?, ?)",
            (line, r.agent_id, r.id, r.created_at, r.updated_at, r.compacted_at, r.repaired_at),
        )
    except apsw.ConstraintError:
        first = conn.execute(
            "SELECT seq FROM temp.transfer_sessions WHERE agent_id = ? AND id = ?",
            (r.agent_id, r.id),
        ).fetchone()
        assert first is not None
        raise _at(line, f"the same session is on line {first[0]}", "id") from None
    conn.executemany(
        "INSERT INTO temp.transfer_messages VALUES (?, ?, ?, ?, ?, ?)",
        [
            (line, position, r.agent_id, ref.id, ref.role, ref.timestamp)
            for position, ref in enumerate(r.messages, start=1)
        ],
    )


def _stage_entity(conn: apsw.Connection, r: EntityRecord, line: int) -> None:
    properties = msgspec.json.encode(r.properties).decode()
    try:
        conn.execute(
            "INSERT INTO temp.transfer_entities VALUES (?, ?, ?, ?, ?)",
            (line, r.agent_id, r.id, r.type, properties),
        )
    except apsw.ConstraintError:
        first = conn.execute(
            "SELECT seq FROM temp.transfer_entities WHERE agent_id = ? AND id = ?",
            (r.agent_id, r.id),
        ).fetchone()
        assert first is not None
        raise _at(line, f"the same entity is on line {first[0]}", "id") from None


def _stage(
    conn: apsw.Connection, lines: Iterable[bytes], progress: Callable[[int], None] | None
) -> int:
    """Decode and check every line into the temp tables; returns the count of data records."""
    decoder = msgspec.json.Decoder(AnyRecord)
    header: Header | None = None
    end: End | None = None
    count = line = read = 0
    for raw in lines:
        line += 1
        read += len(raw)
        if progress is not None:
            progress(read)
        if not raw.strip():
            continue
        if end is not None:
            raise TransferError(f"line {line}: data after the end record")
        try:
            record = decoder.decode(raw)
        except msgspec.DecodeError as error:
            raise TransferError(f"line {line}: {error}") from None
        if header is None:
            if not isinstance(record, Header):
                raise TransferError(f"line {line}: not a memory-worker export (no header record)")
            if record.version != VERSION:
                raise _at(line, f"format version {record.version} is not {VERSION}", "version")
            header = record
            continue
        if isinstance(record, Header):
            raise TransferError(f"line {line}: a second header record")
        if isinstance(record, End):
            if record.records != count:
                raise _at(line, f"{record.records} records announced, {count} read", "records")
            end = record
            continue
        if header.agent is not None and record.agent_id != header.agent:
            raise _at(
                line, f"agent {record.agent_id!r} in an export of agent {header.agent!r}", "agentId"
            )
        if isinstance(record, MemoryRecord):
            _stage_memory(conn, record, line)
        elif isinstance(record, SessionRecord):
            _stage_session(conn, record, line)
        elif isinstance(record, EntityRecord):
            _stage_entity(conn, record, line)
        else:
            conn.execute(
                "INSERT INTO temp.transfer_relations VALUES (?, ?, ?, ?, ?)",
                (line, record.agent_id, record.source, record.type, record.target),
            )
        count += 1
    if header is None:
        raise TransferError("empty file: not a memory-worker export (no header record)")
    if end is None:
        raise TransferError(f"the file ends at line {line} without its end record: truncated")
    return count


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
            records = _stage(conn, lines, progress)
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
