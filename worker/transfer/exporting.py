"""Moving agents between databases as JSON Lines: the record format and the export.

A file is a header, then per agent its memories, sessions, entities and relations (and its
keys, posted tasks and usage records; the tenant's `shared` keys as agent ''), then an
`end` record carrying the count of records between the two, so that a file cut short by a full
disk or a killed pipe is refused on import instead of half-applied. Every column travels
(scores, counters, embeddings), so an imported agent recalls exactly as it did at export time.

An agent is a (tenant, agentId) pair: every agent-level record names its tenant, and the default
tenant '' is left out, so that a file written before tenants existed is a default-tenant export
and a default-tenant export is byte for byte what this format always was.
Import lives in worker/transfer/importing.py, the two commands in worker/transfer/commands.py.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator
from typing import Annotated, Any, BinaryIO, Literal, TextIO

import apsw
import msgspec

from schema.base import DEFAULT_TENANT, Millis, Role, StoredId, Tenant, Unit
from schema.taxonomy import Category, RecallPolicy, Sensitivity, Tag

FORMAT: Literal["memory-worker-export"] = "memory-worker-export"
VERSION = 1
FLUSH_BYTES = 1 << 16
NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
Count = Annotated[int, msgspec.Meta(ge=0)]


class TransferError(ValueError):
    """A file or database that cannot be moved as asked; the message names the line and field."""


class Record(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    rename="camel",
    tag_field="kind",
    omit_defaults=True,
):
    pass


class Header(Record, frozen=True, tag="header"):
    format: Literal["memory-worker-export"]
    version: int
    schema_version: int
    exported_at: Millis
    agent: StoredId | None
    # The tenant the export was limited to; absent (None) when it holds every tenant.
    tenant: Tenant | None = None


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


class MessageRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: str | None  # references are kept as written, dangling ones included
    role: Role
    timestamp: Millis


class SessionRecord(Record, frozen=True, tag="session"):
    agent_id: StoredId
    id: StoredId
    created_at: Millis
    updated_at: Millis
    compacted_at: Millis | None
    repaired_at: Millis | None
    messages: list[MessageRef]
    tenant: Tenant = DEFAULT_TENANT


class EntityRecord(Record, frozen=True, tag="entity"):
    agent_id: StoredId
    id: StoredId
    type: str | None
    properties: dict[str, Any]
    tenant: Tenant = DEFAULT_TENANT


class RelationRecord(Record, frozen=True, tag="relation"):
    agent_id: StoredId
    source: StoredId
    type: StoredId
    target: StoredId
    tenant: Tenant = DEFAULT_TENANT


class SwitchRecord(Record, frozen=True, tag="switch"):
    """An agent whose memory is switched off (memory::toggle): it stays off where it is
    imported. Agents whose memory is on have none."""

    agent_id: StoredId
    disabled_at: Millis
    tenant: Tenant = DEFAULT_TENANT


class KvRecord(Record, frozen=True, tag="kv"):
    """A key of an agent, or of the tenant's `shared` namespace when `agentId` is left out."""

    key: NonEmpty
    value: Any
    version: Annotated[int, msgspec.Meta(ge=1)]
    updated_at: Millis
    agent_id: StoredId | None = None
    tenant: Tenant = DEFAULT_TENANT


class TaskRecord(Record, frozen=True, tag="task"):
    """A task, with the agent that posted it (`agentId`, the task's `createdBy`)."""

    agent_id: StoredId
    id: NonEmpty
    title: str
    status: Literal["pending", "claimed", "completed"]
    claim_timeout: Annotated[int, msgspec.Meta(ge=1)]
    created_at: Millis
    description: str | None = None
    assignee: str | None = None
    claimed_by: str | None = None
    claim_expires: int | None = None
    result: Any = None
    claimed_at: Millis | None = None
    completed_at: Millis | None = None
    tenant: Tenant = DEFAULT_TENANT


class UsageRecord(Record, frozen=True, tag="usage"):
    agent_id: StoredId
    id: NonEmpty
    model: str
    prompt_tokens: Count
    completion_tokens: Count
    cost_usd: Annotated[float, msgspec.Meta(ge=0.0)]
    timestamp: Millis
    tenant: Tenant = DEFAULT_TENANT


class CanonicalRecord(Record, frozen=True, tag="canonical"):
    """A canonical session's row (section 14); its messages travel as the memories and the
    session `canonical:<userId>` of the agent."""

    agent_id: StoredId
    user_id: StoredId
    last_channel: StoredId
    message_count: Count
    updated_at: Millis
    summary: str | None = None
    tenant: Tenant = DEFAULT_TENANT


class End(Record, frozen=True, tag="end"):
    records: Count


AnyRecord = (
    Header
    | MemoryRecord
    | SessionRecord
    | EntityRecord
    | RelationRecord
    | SwitchRecord
    | KvRecord
    | TaskRecord
    | UsageRecord
    | CanonicalRecord
    | End
)

MEMORY_SQL = (
    "SELECT id, agent_id, role, content, hash, session_id, importance, confidence, access_count, "
    "last_accessed, timestamp, metadata, embedding, embedding_model, created_at, pinned, "
    "forgotten_at, summary, category, sensitivity, recall_policy, tags, flags FROM memories "
    "WHERE tenant = ? AND agent_id = ? ORDER BY timestamp, rowid"
)
# The agent '' of `kv` is the namespace `shared`: a whole-tenant export carries it.
AGENT_TABLES = (
    "memories",
    "sessions",
    "kg_entities",
    "kg_relations",
    "agent_switch",
    "kv",
    "tasks",
    "usage",
    "canonical_sessions",
)


def agents_sql(tenant: str | None, agent_id: str | None) -> tuple[str, tuple[str | None, ...]]:
    """The (tenant, agent) pairs to export, in file order, limited as the command was asked."""
    given = {
        column: value
        for column, value in (("tenant", tenant), ("agent_id", agent_id))
        if value is not None
    }
    condition = " WHERE " + " AND ".join(f"{column} = ?" for column in given) if given else ""
    selects = [f"SELECT tenant, agent_id FROM {table}{condition}" for table in AGENT_TABLES]
    return " UNION ".join(selects) + " ORDER BY 1, 2", tuple(given.values()) * len(AGENT_TABLES)


def check_tenant(name: str, where: str) -> str:
    """A tenant named on the command line or in a file must be one a caller could have: the
    NATS account rule of schema/base.py. `where` names the flag or field in the error."""
    try:
        return msgspec.convert(name, Tenant)
    except msgspec.ValidationError as error:
        raise TransferError(f"{where}: {name!r} is not a tenant name: {error}") from None


def _json_object(text: str | None, what: str, kind: Any = dict[str, Any]) -> Any:
    """Re-encoded rather than copied verbatim, so a stray newline cannot split a JSONL line;
    `kind`: an object (metadata, properties) or a list of strings (tags, flags)."""
    if text is None:
        return None
    try:
        return msgspec.json.decode(text, type=kind)
    except msgspec.DecodeError as error:
        raise TransferError(f"{what} is not valid JSON in the database: {error}") from None


def _interned(text: Any) -> Any:
    """`omit_defaults` leaves a default out only when it is that very string object."""
    return sys.intern(str(text))


def _agent_records(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[Record]:
    key = (tenant, agent_id)
    for (disabled_at,) in conn.execute(
        "SELECT disabled_at FROM agent_switch WHERE tenant = ? AND agent_id = ?", key
    ):
        yield SwitchRecord(tenant=tenant, agent_id=agent_id, disabled_at=disabled_at)
    for row in conn.execute(MEMORY_SQL, key):
        yield MemoryRecord(
            tenant=tenant,
            id=row[0],
            agent_id=row[1],
            role=row[2],
            content=row[3],
            hash=row[4],
            session_id=row[5],
            importance=row[6],
            confidence=row[7],
            access_count=row[8],
            last_accessed=row[9],
            timestamp=row[10],
            metadata=_json_object(row[11], f"metadata of memory {row[0]}"),
            embedding=row[12],
            embedding_model=row[13],
            created_at=row[14],
            pinned=bool(row[15]),
            forgotten_at=row[16],
            summary=row[17],
            category=_interned(row[18]),
            sensitivity=_interned(row[19]),
            recall_policy=_interned(row[20]),
            tags=_json_object(row[21], f"tags of memory {row[0]}", list[str]),
            flags=_json_object(row[22], f"flags of memory {row[0]}", list[str]),
        )
    sessions = conn.execute(
        "SELECT id, created_at, updated_at, compacted_at, repaired_at FROM sessions "
        "WHERE tenant = ? AND agent_id = ? ORDER BY id",
        key,
    )
    for session_id, created_at, updated_at, compacted_at, repaired_at in sessions:
        messages = [
            MessageRef(id=memory_id, role=role, timestamp=timestamp)
            for memory_id, role, timestamp in conn.execute(
                "SELECT memory_id, role, timestamp FROM session_messages "
                "WHERE tenant = ? AND agent_id = ? AND session_id = ? ORDER BY position",
                (*key, session_id),
            )
        ]
        yield SessionRecord(
            tenant=tenant,
            agent_id=agent_id,
            id=session_id,
            created_at=created_at,
            updated_at=updated_at,
            compacted_at=compacted_at,
            repaired_at=repaired_at,
            messages=messages,
        )
    entities = conn.execute(
        "SELECT id, type, properties FROM kg_entities WHERE tenant = ? AND agent_id = ? "
        "ORDER BY id",
        key,
    )
    for entity_id, entity_type, properties in entities:
        yield EntityRecord(
            tenant=tenant,
            agent_id=agent_id,
            id=entity_id,
            type=entity_type,
            properties=_json_object(properties, f"properties of entity {entity_id}") or {},
        )
    relations = conn.execute(
        "SELECT source, type, target FROM kg_relations WHERE tenant = ? AND agent_id = ? "
        "ORDER BY seq",
        key,
    )
    for source, relation_type, target in relations:
        yield RelationRecord(
            tenant=tenant, agent_id=agent_id, source=source, type=relation_type, target=target
        )
    # Section 14's state, written beside (worker/transfer/state.py needs the record types).
    from worker.transfer.state import state_records

    yield from state_records(conn, tenant, agent_id)


def _sink(out: BinaryIO | TextIO) -> Callable[[bytes], object]:
    if isinstance(out, io.TextIOBase):
        text: Any = out
        return lambda data: text.write(data.decode("utf-8"))
    binary: Any = out
    return lambda data: binary.write(data)


def export_jsonl(
    conn: apsw.Connection,
    out: BinaryIO | TextIO,
    *,
    agent_id: str | None,
    now: int,
    tenant: str | None = None,
) -> int:
    """Write one agent id (or every agent) of one tenant (or every tenant) to `out`; returns the
    count of records between header and end.

    All reads happen in one transaction, so the file is a single snapshot even while a worker
    keeps writing (WAL readers never block the writer), and rows stream out in 64 KiB writes
    rather than being gathered in memory.
    """
    write = _sink(out)
    encoder = msgspec.json.Encoder()
    buffer = bytearray()

    def emit(record: Record) -> None:
        encoder.encode_into(record, buffer, -1)
        buffer.extend(b"\n")
        if len(buffer) >= FLUSH_BYTES:
            write(bytes(buffer))
            buffer.clear()

    if tenant is not None:
        check_tenant(tenant, "--tenant")
    count = 0
    with conn:
        schema_version = int(conn.pragma("user_version"))
        emit(
            Header(
                format=FORMAT,
                version=VERSION,
                schema_version=schema_version,
                exported_at=now,
                agent=agent_id,
                tenant=tenant,
            )
        )
        sql, params = agents_sql(tenant, agent_id)
        for agent_tenant, agent in conn.execute(sql, params).fetchall():
            for record in _agent_records(conn, str(agent_tenant), str(agent)):
                emit(record)
                count += 1
    emit(End(records=count))
    write(bytes(buffer))
    return count
