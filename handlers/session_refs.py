"""A session's ordered message list, shared by store, evict, compact and repair."""

from __future__ import annotations

from collections.abc import Iterable

import apsw

from handlers.topics.upkeep import refresh_topics, topics_of_session
from schema.base import Agent
from schema.errors import NotFound

# A reference in a session's list: (memory id, or None where it went missing; role; timestamp).
Ref = tuple[str | None, str, int]


def require_session(conn: apsw.Connection, agent: Agent, session_id: str) -> None:
    found = conn.execute(
        "SELECT 1 FROM sessions WHERE tenant = ? AND agent_id = ? AND id = ?", (*agent, session_id)
    ).fetchone()
    if found is None:
        raise NotFound(f"session `{session_id}` of agent `{agent[1]}` not found (at `$.sessionId`)")


def ensure_session(conn: apsw.Connection, agent: Agent, session_id: str, now: int) -> None:
    conn.execute(
        "INSERT INTO sessions (tenant, agent_id, id, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (tenant, agent_id, id) DO UPDATE SET updated_at = excluded.updated_at",
        (*agent, session_id, now, now),
    )


def append_message(
    conn: apsw.Connection,
    agent: Agent,
    session_id: str,
    ref: tuple[str, str, int],
    now: int,
    topic_id: str | None = None,
) -> int | None:
    """Append (memory id, role, timestamp), in `topic_id` when given, unless that memory is
    already in the list; the position it was appended at (None: it was there already).

    The session is created if new and its updatedAt becomes now either way.
    """
    ensure_session(conn, agent, session_id, now)
    memory_id, role, timestamp = ref
    present = conn.execute(
        "SELECT 1 FROM session_messages "
        "WHERE tenant = ? AND agent_id = ? AND session_id = ? AND memory_id = ?",
        (*agent, session_id, memory_id),
    ).fetchone()
    if present:
        return None
    row = conn.execute(
        "INSERT INTO session_messages "
        "(tenant, agent_id, session_id, position, memory_id, role, timestamp, topic_id) "
        "SELECT ?, ?, ?, coalesce(max(position), 0) + 1, ?, ?, ?, ? FROM session_messages "
        "WHERE tenant = ? AND agent_id = ? AND session_id = ? RETURNING position",
        (*agent, session_id, memory_id, role, timestamp, topic_id, *agent, session_id),
    ).fetchone()
    return None if row is None else int(row[0])


def read_messages(conn: apsw.Connection, agent: Agent, session_id: str) -> list[Ref]:
    """The list in order, as (memory id or None, role, timestamp)."""
    return [
        (row[0], row[1], row[2])
        for row in conn.execute(
            "SELECT memory_id, role, timestamp FROM session_messages "
            "WHERE tenant = ? AND agent_id = ? AND session_id = ? ORDER BY position",
            (*agent, session_id),
        )
    ]


def write_messages(
    conn: apsw.Connection,
    agent: Agent,
    session_id: str,
    refs: Iterable[Ref],
) -> None:
    """Replace the whole list: each message that stays keeps its topic (section 21), one new
    to the list (repair's merge of a same-role run) takes the topic of the message before it,
    and the session's topics follow the new list (one left without messages is removed)."""
    topic_of = {
        str(memory_id): topic_id
        for memory_id, topic_id in conn.execute(
            "DELETE FROM session_messages WHERE tenant = ? AND agent_id = ? AND session_id = ? "
            "RETURNING memory_id, topic_id",
            (*agent, session_id),
        )
        if memory_id is not None
    }
    rows, before = [], None
    for position, (memory_id, role, timestamp) in enumerate(refs, start=1):
        topic_id = topic_of.get(memory_id, before) if memory_id is not None else None
        rows.append((*agent, session_id, position, memory_id, role, timestamp, topic_id))
        before = topic_id
    conn.executemany(
        "INSERT INTO session_messages "
        "(tenant, agent_id, session_id, position, memory_id, role, timestamp, topic_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    refresh_topics(conn, agent, topics_of_session(conn, agent, session_id))


# Without INDEXED BY, SQLite plans this delete on the primary key's agent prefix (a WITHOUT
# ROWID table's rows live in it) and scans every message of the agent for each memory removed.
REMOVE_FROM_SESSIONS = (
    "DELETE FROM session_messages INDEXED BY session_messages_by_memory "
    "WHERE tenant = ? AND agent_id = ? AND memory_id = ? RETURNING topic_id"
)


def remove_memories(conn: apsw.Connection, agent: Agent, memory_ids: Iterable[str]) -> None:
    """Take evicted memories out of every session of their agent, and the topics their
    messages were in follow (section 21)."""
    removed = conn.executemany(
        REMOVE_FROM_SESSIONS,
        [(*agent, memory_id) for memory_id in memory_ids],
    )
    touched = {str(row[0]) for row in removed if row[0] is not None}
    if touched:
        refresh_topics(conn, agent, touched)
