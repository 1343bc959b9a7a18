"""memory::canonical::*: one conversation per (agent, user) across channels (section 14).

A message appended is stored as a memory of the agent in the session `canonical:<userId>`
(worker/triggers/canonical.py passes it through the store's preparation and apply), and counted
in the row of `canonical_sessions`, which also keeps the channel of the last message and, once
the session was compacted, the summary of its older part. These are the row's reads and writes."""

from __future__ import annotations

import apsw

from schema.base import Agent, agent_of
from schema.canonical import SESSION_PREFIX, CanonicalGetRequest, CanonicalSession
from schema.errors import NotFound

COLUMNS = "summary, last_channel, message_count, updated_at"


def session_of(user_id: str) -> str:
    return SESSION_PREFIX + user_id


def user_of(session_id: str) -> str:
    return session_id.removeprefix(SESSION_PREFIX)


def read_canonical(conn: apsw.Connection, agent: Agent, user_id: str) -> CanonicalSession | None:
    row = conn.execute(
        f"SELECT {COLUMNS} FROM canonical_sessions WHERE tenant = ? AND agent_id = ? "
        "AND user_id = ?",
        (*agent, user_id),
    ).fetchone()
    if row is None:
        return None
    summary, last_channel, message_count, updated_at = row
    return CanonicalSession(
        summary=summary,
        last_channel=last_channel,
        message_count=message_count,
        updated_at=updated_at,
    )


def canonical_get(conn: apsw.Connection, req: CanonicalGetRequest, *, now: int) -> CanonicalSession:
    """A read: `now` is the registry's calling convention, unused."""
    found = read_canonical(conn, agent_of(req), req.user_id)
    if found is None:
        raise NotFound(
            f"userId: agent `{req.agent_id}` has no canonical session with this user - "
            "at `$.userId`"
        )
    return found


def count_message(conn: apsw.Connection, agent: Agent, user_id: str, channel: str, at: int) -> int:
    """One more message from `channel`: the row is created with the first. The new count."""
    return int(
        conn.execute(
            "INSERT INTO canonical_sessions (tenant, agent_id, user_id, last_channel, "
            "message_count, updated_at) VALUES (?, ?, ?, ?, 1, ?) "
            "ON CONFLICT (tenant, agent_id, user_id) DO UPDATE SET "
            "message_count = message_count + 1, last_channel = excluded.last_channel, "
            "updated_at = excluded.updated_at RETURNING message_count",
            (*agent, user_id, channel, at),
        ).get
    )


def message_count(conn: apsw.Connection, agent: Agent, user_id: str) -> int:
    found = read_canonical(conn, agent, user_id)
    return 0 if found is None else found.message_count


def session_length(conn: apsw.Connection, agent: Agent, user_id: str) -> int:
    """How many references the session's list holds now: what compaction's threshold counts."""
    return int(
        conn.execute(
            "SELECT count(*) FROM session_messages WHERE tenant = ? AND agent_id = ? "
            "AND session_id = ?",
            (*agent, session_of(user_id)),
        ).get
    )


def set_summary(conn: apsw.Connection, agent: Agent, user_id: str, summary: str, at: int) -> None:
    conn.execute(
        "UPDATE canonical_sessions SET summary = ?, updated_at = ? "
        "WHERE tenant = ? AND agent_id = ? AND user_id = ?",
        (summary, at, *agent, user_id),
    )
