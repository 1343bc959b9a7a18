"""The sessions table and its ordered message lists (session_messages).

A session travels as one record carrying its message list (references to memories, kept as
written, dangling ones included). A second import of the same file replaces an imported
session: its row and list become exactly the file's (positions renumbered 1..n, only their order
means anything); other sessions are untouched. Merging two lists has no order that is right for
both, so replacing is the predictable rule. A reference follows the memory it names when the
import gave that memory another id (handlers/tables/memories.py): sessions come after memories.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apsw
import msgspec

from handlers.tables.records import Record, insert_once, staged
from handlers.tables.table import Skip, Stat, Table, Transfer, counted, delete_rows
from schema.base import DEFAULT_TENANT, Millis, Role, StoredId, Tenant

Ref = tuple[str | None, Any, int, str | None]  # (memory id, role, timestamp, topic id)


class MessageRef(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    id: str | None  # references are kept as written, dangling ones included
    role: Role
    timestamp: Millis
    topic: str | None = None  # the topic it is in (handlers/tables/topics.py)


class SessionRecord(Record, frozen=True, tag="session"):
    agent_id: StoredId
    id: StoredId
    created_at: Millis
    updated_at: Millis
    compacted_at: Millis | None
    repaired_at: Millis | None
    messages: list[MessageRef]
    tenant: Tenant = DEFAULT_TENANT


def _messages(conn: apsw.Connection, key: tuple[str, str, str]) -> list[Ref]:
    return [
        (row[0], row[1], row[2], row[3])
        for row in conn.execute(
            "SELECT memory_id, role, timestamp, topic_id FROM main.session_messages "
            "WHERE tenant = ? AND agent_id = ? AND session_id = ? ORDER BY position",
            key,
        )
    ]


def export_sessions(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[SessionRecord]:
    sessions = conn.execute(
        "SELECT id, created_at, updated_at, compacted_at, repaired_at FROM sessions "
        "WHERE tenant = ? AND agent_id = ? ORDER BY id",
        (tenant, agent_id),
    )
    for session_id, created_at, updated_at, compacted_at, repaired_at in sessions:
        messages = [
            MessageRef(id=memory_id, role=role, timestamp=timestamp, topic=topic)
            for memory_id, role, timestamp, topic in _messages(conn, (tenant, agent_id, session_id))
        ]
        yield SessionRecord(
            tenant=tenant, agent_id=agent_id, id=session_id, created_at=created_at,
            updated_at=updated_at, compacted_at=compacted_at, repaired_at=repaired_at,
            messages=messages,
        )  # fmt: skip


STAGING = """
CREATE TEMP TABLE transfer_sessions (seq INTEGER PRIMARY KEY, tenant, agent_id, id, created_at,
    updated_at, compacted_at, repaired_at, UNIQUE (tenant, agent_id, id));
CREATE TEMP TABLE transfer_messages (session_seq INTEGER, position INTEGER, tenant, agent_id,
    memory_id, role, timestamp, topic_id, PRIMARY KEY (session_seq, position));
CREATE INDEX temp.transfer_messages_by_memory ON transfer_messages (tenant, agent_id, memory_id);
"""


def stage_session(conn: apsw.Connection, r: SessionRecord, tenant: str, line: int) -> None:
    times = (r.created_at, r.updated_at, r.compacted_at, r.repaired_at)
    insert_once(conn, "transfer_sessions", "session", line, (tenant, r.agent_id), r.id, *times)
    conn.executemany(
        "INSERT INTO temp.transfer_messages VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (line, position, tenant, r.agent_id, ref.id, ref.role, ref.timestamp, ref.topic)
            for position, ref in enumerate(r.messages, start=1)
        ],
    )


# A ref to a staged memory that the agent holds under another id once memories are applied (its
# content was there already, or its id was another agent's and it got a fresh one) follows it.
REMAP_SQL = """
UPDATE temp.transfer_messages SET memory_id = kept.id
FROM temp.transfer_memories AS t
JOIN main.memories AS kept
    ON kept.tenant = t.tenant AND kept.agent_id = t.agent_id AND kept.hash = t.hash
WHERE t.id = transfer_messages.memory_id AND t.tenant = transfer_messages.tenant
    AND t.agent_id = transfer_messages.agent_id AND kept.id <> t.id
"""


def _replace_messages(conn: apsw.Connection, key: tuple[str, str, str], refs: list[Ref]) -> None:
    """The session's list becomes `refs`, positions 1..n (as handlers/session_refs does, here
    with the tenant in the key)."""
    conn.execute(
        "DELETE FROM main.session_messages WHERE tenant = ? AND agent_id = ? AND session_id = ?",
        key,
    )
    conn.executemany(
        "INSERT INTO main.session_messages (tenant, agent_id, session_id, position, memory_id, "
        "role, timestamp, topic_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(*key, position, *ref) for position, ref in enumerate(refs, start=1)],
    )


def apply_sessions(conn: apsw.Connection, now: int) -> dict[str, int]:
    """Replace each imported session whose row or list differs."""
    count = staged(conn, "transfer_sessions")
    conn.execute(REMAP_SQL)
    written = 0
    rows = conn.execute(
        "SELECT seq, tenant, agent_id, id, created_at, updated_at, compacted_at, repaired_at "
        "FROM temp.transfer_sessions ORDER BY seq"
    ).fetchall()
    for seq, tenant, agent_id, session_id, *times in rows:
        key = (str(tenant), str(agent_id), str(session_id))
        refs = [
            (row[0], row[1], row[2], row[3])
            for row in conn.execute(
                "SELECT memory_id, role, timestamp, topic_id FROM temp.transfer_messages "
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
    return {"sessions_written": written, "sessions_unchanged": count - written}


SESSION_MESSAGES = Table(
    name="session_messages",
    owner="agent",
    erase=delete_rows,
    transfer=Skip("each list travels in its session's record (sessions)"),
)
SESSIONS = Table(
    name="sessions",
    owner="agent",
    erase=delete_rows,
    erased_as="sessions",
    transfer=Transfer(
        record=SessionRecord,
        export=export_sessions,
        staging=STAGING,
        stage=stage_session,
        apply=apply_sessions,
        summary="sessions {sessions_written} written, {sessions_unchanged} unchanged",
    ),
    stats=(
        Stat(
            key="sessions",
            count=counted("SELECT count(*) FROM sessions WHERE {where}"),
            label="sessions",
            metric="Sessions.",
        ),
    ),
)
