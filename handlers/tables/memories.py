"""The memories table, and the memory switch of an agent (agent_switch).

Every column of a memory travels in its export record (scores, counters, embeddings), so an
imported agent recalls exactly as it did at export time. A second import of the same file:
memories are keyed by id and never overwritten; a known id, or content the agent already
holds under another id, is skipped (the target's scores and counters win). Memory ids are unique
in the whole database, so a memory whose id another agent holds (a copy of an agent into another
tenant of the same database) gets a new id; the sessions' refs follow (handlers/tables/sessions.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import apsw

from handlers.audit import Call, Change, record
from handlers.placing import content_hash
from handlers.tables.records import (
    Count,
    NonEmpty,
    Record,
    at,
    interned,
    json_object,
    json_text,
    staged,
)
from handlers.tables.table import Stat, Table, Transfer, counted, delete_rows
from handlers.taxonomy import tags_column
from schema.base import DEFAULT_TENANT, Millis, Role, StoredId, Tenant, Unit
from schema.taxonomy import Category, RecallPolicy, Sensitivity, Tag


class MemoryRecord(Record, frozen=True, tag="memory"):
    id: NonEmpty
    agent_id: StoredId
    role: Role
    content: str
    hash: NonEmpty
    session_id: str | None
    importance: Unit
    confidence: Unit
    access_count: Count
    last_accessed: Millis
    timestamp: Millis
    metadata: dict[str, Any] | None
    embedding: bytes | None  # base64 of the little-endian float32 bytes, as stored
    embedding_model: str | None
    created_at: Millis
    tenant: Tenant = DEFAULT_TENANT  # left out for the default tenant, as in files before tenants
    # Left out when not pinned and not forgotten, as in files before a memory's life.
    pinned: bool = False
    forgotten_at: Millis | None = None
    # Sections 13 and 17, left out when they are the defaults, as in files before them.
    summary: str | None = None
    category: Category = "note"
    sensitivity: Sensitivity = "internal"
    recall_policy: RecallPolicy = "auto"
    tags: list[Tag] | None = None
    flags: list[str] | None = None


MEMORY_COLUMNS = (
    "id, tenant, agent_id, role, content, hash, session_id, importance, confidence, access_count, "
    "last_accessed, timestamp, metadata, embedding, embedding_model, created_at, pinned, "
    "forgotten_at, summary, category, sensitivity, recall_policy, tags, flags"
)
MEMORY_SQL = f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND agent_id = ? " + (
    "ORDER BY timestamp, rowid"
)


def export_memories(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[MemoryRecord]:
    for row in conn.execute(MEMORY_SQL, (tenant, agent_id)):
        yield MemoryRecord(
            tenant=tenant, id=row[0], agent_id=row[2], role=row[3], content=row[4], hash=row[5],
            session_id=row[6], importance=row[7], confidence=row[8], access_count=row[9],
            last_accessed=row[10], timestamp=row[11],
            metadata=json_object(row[12], f"metadata of memory {row[0]}"),
            embedding=row[13], embedding_model=row[14], created_at=row[15],
            pinned=bool(row[16]), forgotten_at=row[17], summary=row[18],
            category=interned(row[19]), sensitivity=interned(row[20]),
            recall_policy=interned(row[21]),
            tags=json_object(row[22], f"tags of memory {row[0]}", list[str]),
            flags=json_object(row[23], f"flags of memory {row[0]}", list[str]),
        )  # fmt: skip


# `fresh_id`: the id a memory gets when another agent holds its own (TAKEN_SQL).
MEMORY_STAGING = f"""
CREATE TEMP TABLE transfer_memories (seq INTEGER PRIMARY KEY, {MEMORY_COLUMNS}, fresh_id,
    UNIQUE (id), UNIQUE (tenant, agent_id, hash));
"""


def stage_memory(conn: apsw.Connection, r: MemoryRecord, tenant: str, line: int) -> None:
    if content_hash(r.content) != r.hash:
        raise at(line, "hash is not the SHA-256 of content", "hash")
    if (r.embedding is None) != (r.embedding_model is None):
        raise at(line, "embedding and embeddingModel are both set or both null", "embedding")
    if r.embedding is not None and len(r.embedding) % 4:
        raise at(line, f"embedding has {len(r.embedding)} bytes, not float32 values", "embedding")
    metadata = None if r.metadata is None else json_text(r.metadata)
    flags = None if not r.flags else json_text(r.flags)
    try:
        conn.execute(
            f"INSERT INTO temp.transfer_memories (seq, {MEMORY_COLUMNS}) "
            f"VALUES ({', '.join('?' * 25)})",
            (line, r.id, tenant, r.agent_id, r.role, r.content, r.hash, r.session_id,
             r.importance, r.confidence, r.access_count, r.last_accessed, r.timestamp, metadata,
             r.embedding, r.embedding_model, r.created_at, int(r.pinned), r.forgotten_at,
             r.summary, r.category, r.sensitivity, r.recall_policy, tags_column(r.tags or []),
             flags),
        )  # fmt: skip
    except apsw.ConstraintError:
        first = conn.execute(
            "SELECT seq, id = ? FROM temp.transfer_memories WHERE id = ? OR "
            "(tenant = ? AND agent_id = ? AND hash = ?)",
            (r.id, r.id, tenant, r.agent_id, r.hash),
        ).fetchone()
        assert first is not None
        what = "the same id" if first[1] else "the same agent and content"
        raise at(line, f"a memory with {what} is on line {first[0]}", "id") from None


# Staged memories whose id another agent holds, and whose content the importing agent does not
# have yet (when it has, the row is skipped and its refs go to the id the agent has).
TAKEN_SQL = """
SELECT t.seq FROM temp.transfer_memories AS t
JOIN main.memories AS held ON held.id = t.id
    AND (held.tenant <> t.tenant OR held.agent_id <> t.agent_id)
WHERE NOT EXISTS (SELECT 1 FROM main.memories AS kept
    WHERE kept.tenant = t.tenant AND kept.agent_id = t.agent_id AND kept.hash = t.hash)
"""


def apply_memories(conn: apsw.Connection, now: int) -> dict[str, int]:
    """Insert the staged memories not present (a taken id replaced by a fresh one); the import's
    audit row: the memories it brought, per agent, from the command line."""
    count = staged(conn, "transfer_memories")
    taken = [(str(uuid.uuid4()), seq) for (seq,) in conn.execute(TAKEN_SQL).fetchall()]
    conn.executemany("UPDATE temp.transfer_memories SET fresh_id = ? WHERE seq = ?", taken)
    imported: dict[tuple[str, str], list[str]] = {}
    for tenant, agent_id, memory_id in conn.execute(
        f"INSERT OR IGNORE INTO main.memories ({MEMORY_COLUMNS}) "
        f"SELECT coalesce(fresh_id, id), {MEMORY_COLUMNS.removeprefix('id, ')} "
        "FROM temp.transfer_memories WHERE true ORDER BY seq RETURNING tenant, agent_id, id"
    ):
        imported.setdefault((str(tenant), str(agent_id)), []).append(str(memory_id))
    changes = [Change(agent, ids) for agent, ids in imported.items()]
    record(conn, Call("memory::import", "cli"), changes, now)
    memories = sum(len(ids) for ids in imported.values())
    return {"memories_imported": memories, "memories_skipped": count - memories}


MEMORIES = Table(
    name="memories",
    owner="agent",
    erase=delete_rows,
    erased_as="memories",
    transfer=Transfer(
        record=MemoryRecord,
        export=export_memories,
        staging=MEMORY_STAGING,
        stage=stage_memory,
        apply=apply_memories,
        summary="memories {memories_imported} imported, {memories_skipped} skipped",
    ),
    stats=(
        Stat(
            key="agents",
            count=counted(
                "SELECT count(*) FROM (SELECT DISTINCT tenant, agent_id FROM memories "
                "WHERE {where})"
            ),
            label="agents",
            metric="Agents with at least one memory.",
        ),
        Stat(
            key="memories",
            count=counted("SELECT count(*) FROM memories WHERE {where}"),
            label="memories",
            metric="Memories stored.",
        ),
        Stat(
            key="memories_without_vector",
            count=counted("SELECT count(*) FROM memories WHERE {where} AND embedding IS NULL"),
            label="memories without a vector",
            metric=None,
        ),
        Stat(
            key="memories_pinned",
            count=counted("SELECT count(*) FROM memories WHERE {where} AND pinned = 1"),
            label="memories pinned",
            metric="Memories pinned: never evicted, never decayed.",
        ),
        Stat(
            key="memories_forgotten",
            count=counted(
                "SELECT count(*) FROM memories WHERE {where} AND forgotten_at IS NOT NULL"
            ),
            label="memories forgotten",
            metric="Memories forgotten and not yet purged.",
        ),
    ),
)


class SwitchRecord(Record, frozen=True, tag="switch"):
    """An agent whose memory is switched off (memory::toggle): it stays off where it is
    imported. Agents whose memory is on have none."""

    agent_id: StoredId
    disabled_at: Millis
    tenant: Tenant = DEFAULT_TENANT


def export_switch(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[SwitchRecord]:
    for (disabled_at,) in conn.execute(
        "SELECT disabled_at FROM agent_switch WHERE tenant = ? AND agent_id = ?",
        (tenant, agent_id),
    ):
        yield SwitchRecord(tenant=tenant, agent_id=agent_id, disabled_at=disabled_at)


def stage_switch(conn: apsw.Connection, r: SwitchRecord, tenant: str, line: int) -> None:
    try:
        conn.execute(
            "INSERT INTO temp.transfer_switches VALUES (?, ?, ?, ?)",
            (line, tenant, r.agent_id, r.disabled_at),
        )
    except apsw.ConstraintError:
        raise at(line, "a second switch record for the agent", "agentId") from None


def apply_switches(conn: apsw.Connection, now: int) -> dict[str, int]:
    """An agent switched off in the file stays off; one switched off here stays off too."""
    conn.execute(
        "INSERT OR IGNORE INTO main.agent_switch (tenant, agent_id, disabled_at) "
        "SELECT tenant, agent_id, disabled_at FROM temp.transfer_switches ORDER BY seq"
    )
    return {}


AGENT_SWITCH = Table(
    name="agent_switch",
    owner="agent",
    erase=delete_rows,
    transfer=Transfer(
        record=SwitchRecord,
        export=export_switch,
        staging="CREATE TEMP TABLE transfer_switches (seq INTEGER PRIMARY KEY, tenant, agent_id, "
        "disabled_at, UNIQUE (tenant, agent_id));",
        stage=stage_switch,
        apply=apply_switches,
        summary=None,
    ),
    stats=(
        Stat(
            key="agents_disabled",
            count=counted("SELECT count(*) FROM agent_switch WHERE {where}"),
            label="agents switched off",
            metric="Agents whose memory is switched off (memory::toggle).",
        ),
    ),
)
