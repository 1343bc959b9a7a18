"""Reading an export file into TEMP tables, checking every line, before anything is applied.

Temp tables belong to this connection alone, so reading a long file takes no lock on the
database; worker/transfer/importing.py applies what was staged in one short transaction.
Every staged row carries the tenant it goes to (the record's, or the one `import --tenant`
names): an agent is a (tenant, agentId) pair, so that is the prefix of every key here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import apsw
import msgspec

from handlers.store import content_hash
from handlers.taxonomy import tags_column
from worker.transfer.exporting import (
    VERSION,
    AnyRecord,
    CanonicalRecord,
    End,
    EntityRecord,
    Header,
    KvRecord,
    MemoryRecord,
    SessionRecord,
    SwitchRecord,
    TaskRecord,
    TransferError,
    UsageRecord,
)
from worker.transfer.state import STAGE_SQL as STATE_STAGE_SQL
from worker.transfer.state import STAGE_TABLES as STATE_STAGE_TABLES
from worker.transfer.state import stage_state

MEMORY_COLUMNS = (
    "id, tenant, agent_id, role, content, hash, session_id, importance, confidence, access_count, "
    "last_accessed, timestamp, metadata, embedding, embedding_model, created_at, pinned, "
    "forgotten_at, summary, category, sensitivity, recall_policy, tags, flags"
)
STAGE_TABLES = (
    "memories",
    "sessions",
    "messages",
    "entities",
    "relations",
    "switches",
    *STATE_STAGE_TABLES,
)
STAGE_SQL = f"""
CREATE TEMP TABLE transfer_memories (seq INTEGER PRIMARY KEY, {MEMORY_COLUMNS}, fresh_id,
    UNIQUE (id), UNIQUE (tenant, agent_id, hash));
CREATE TEMP TABLE transfer_sessions (seq INTEGER PRIMARY KEY, tenant, agent_id, id, created_at,
    updated_at, compacted_at, repaired_at, UNIQUE (tenant, agent_id, id));
CREATE TEMP TABLE transfer_messages (session_seq INTEGER, position INTEGER, tenant, agent_id,
    memory_id, role, timestamp, PRIMARY KEY (session_seq, position));
CREATE INDEX temp.transfer_messages_by_memory ON transfer_messages (tenant, agent_id, memory_id);
CREATE TEMP TABLE transfer_entities (seq INTEGER PRIMARY KEY, tenant, agent_id, id, type,
    properties, UNIQUE (tenant, agent_id, id));
CREATE TEMP TABLE transfer_relations (seq INTEGER PRIMARY KEY, tenant, agent_id, source, type,
    target);
CREATE TEMP TABLE transfer_switches (seq INTEGER PRIMARY KEY, tenant, agent_id, disabled_at,
    UNIQUE (tenant, agent_id));
"""
STAGE_SQL += STATE_STAGE_SQL


def _at(line: int, message: str, field: str) -> TransferError:
    return TransferError(f"line {line}: {message} - at `$.{field}`")


def _stage_memory(conn: apsw.Connection, r: MemoryRecord, tenant: str, line: int) -> None:
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
            f"VALUES ({', '.join('?' * 25)})",
            (
                line,
                r.id,
                tenant,
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
                int(r.pinned),
                r.forgotten_at,
                r.summary,
                r.category,
                r.sensitivity,
                r.recall_policy,
                tags_column(r.tags or []),
                None if not r.flags else msgspec.json.encode(r.flags).decode(),
            ),
        )
    except apsw.ConstraintError:
        first = conn.execute(
            "SELECT seq, id = ? FROM temp.transfer_memories WHERE id = ? OR "
            "(tenant = ? AND agent_id = ? AND hash = ?)",
            (r.id, r.id, tenant, r.agent_id, r.hash),
        ).fetchone()
        assert first is not None
        what = "the same id" if first[1] else "the same agent and content"
        raise _at(line, f"a memory with {what} is on line {first[0]}", "id") from None


def _insert_once(
    conn: apsw.Connection, table: str, what: str, line: int, agent: tuple[str, str], *rest: object
) -> None:
    """Stage a record keyed by (tenant, agent, id), the first of `rest`; a second record with
    the same key is refused, naming the line of the first."""
    row = (line, *agent, *rest)
    try:
        conn.execute(f"INSERT INTO temp.{table} VALUES ({', '.join('?' * len(row))})", row)
    except apsw.ConstraintError:
        first = conn.execute(
            f"SELECT seq FROM temp.{table} WHERE tenant = ? AND agent_id = ? AND id = ?",
            (*agent, rest[0]),
        ).fetchone()
        assert first is not None
        raise _at(line, f"the same {what} is on line {first[0]}", "id") from None


def _stage_session(conn: apsw.Connection, r: SessionRecord, tenant: str, line: int) -> None:
    times = (r.created_at, r.updated_at, r.compacted_at, r.repaired_at)
    _insert_once(conn, "transfer_sessions", "session", line, (tenant, r.agent_id), r.id, *times)
    conn.executemany(
        "INSERT INTO temp.transfer_messages VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (line, position, tenant, r.agent_id, ref.id, ref.role, ref.timestamp)
            for position, ref in enumerate(r.messages, start=1)
        ],
    )


def _stage_entity(conn: apsw.Connection, r: EntityRecord, tenant: str, line: int) -> None:
    properties = msgspec.json.encode(r.properties).decode()
    agent = (tenant, r.agent_id)
    _insert_once(conn, "transfer_entities", "entity", line, agent, r.id, r.type, properties)


def _stage_switch(conn: apsw.Connection, r: SwitchRecord, tenant: str, line: int) -> None:
    try:
        conn.execute(
            "INSERT INTO temp.transfer_switches VALUES (?, ?, ?, ?)",
            (line, tenant, r.agent_id, r.disabled_at),
        )
    except apsw.ConstraintError:
        raise _at(line, "a second switch record for the agent", "agentId") from None


def stage(
    conn: apsw.Connection,
    lines: Iterable[bytes],
    progress: Callable[[int], None] | None,
    into: str | None = None,
) -> int:
    """Decode and check every line into the temp tables; returns the count of data records.

    `into` is the tenant of every record (`import --tenant`); None keeps each record's own.
    """
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
        if header.tenant is not None and record.tenant != header.tenant:
            raise _at(
                line, f"tenant {record.tenant!r} in an export of tenant {header.tenant!r}", "tenant"
            )
        tenant = record.tenant if into is None else into
        if isinstance(record, MemoryRecord):
            _stage_memory(conn, record, tenant, line)
        elif isinstance(record, SessionRecord):
            _stage_session(conn, record, tenant, line)
        elif isinstance(record, EntityRecord):
            _stage_entity(conn, record, tenant, line)
        elif isinstance(record, SwitchRecord):
            _stage_switch(conn, record, tenant, line)
        elif isinstance(record, KvRecord | TaskRecord | UsageRecord | CanonicalRecord):
            repeated = stage_state(conn, record, tenant, line)
            if repeated is not None:
                field = {KvRecord: "key", CanonicalRecord: "userId"}.get(type(record), "id")
                raise _at(line, repeated, field)
        else:
            conn.execute(
                "INSERT INTO temp.transfer_relations VALUES (?, ?, ?, ?, ?, ?)",
                (line, tenant, record.agent_id, record.source, record.type, record.target),
            )
        count += 1
    if header is None:
        raise TransferError("empty file: not a memory-worker export (no header record)")
    if end is None:
        raise TransferError(f"the file ends at line {line} without its end record: truncated")
    return count
