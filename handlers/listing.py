"""memory::list and memory::session::get: one agent's memories, or one session's transcript,
a page at a time (contract section 12).

Pages are keyset pages: a cursor holds the last (timestamp, id), or the last stored position,
handed out, and the next page starts strictly after it, so a page never repeats or skips a
memory that exists throughout while others are stored or removed meanwhile. Filters other than
metadata run in SQL on the agent's (tenant, agent_id, timestamp, id) index; metadata equality is
checked on the decoded objects, so that key order and number spelling do not matter.
"""

from __future__ import annotations

from typing import Any

import apsw
import msgspec
from msgspec import UNSET

from handlers.cursors import decode_cursor, encode_cursor
from handlers.life import MEMORY_COLUMNS, memory_out
from handlers.paging import fitting_page
from handlers.session_refs import require_session
from handlers.taxonomy import taxonomy_sql
from schema.base import agent_of
from schema.life import (
    Filters,
    ListReply,
    ListRequest,
    MemoryOut,
    SessionGetReply,
    SessionGetRequest,
    SessionMessage,
)

_FILTER_FIELDS = (
    "session_id", "roles", "since", "until", "metadata", "pinned", "category", "tags",
    "max_sensitivity",
)  # fmt: skip


def same_json(left: Any, right: Any) -> bool:
    """Equal as JSON values: objects by keys whatever their order, numbers by value, and
    `true` never equal to `1` (as Python's == would have it)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same_json(v, right[k]) for k, v in left.items())
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(same_json, left, right))
    return type(left) is type(right) and left == right


def metadata_matches(wanted: dict[str, Any], metadata: dict[str, Any] | None) -> bool:
    if metadata is None:
        return False
    return all(key in metadata and same_json(value, metadata[key]) for key, value in wanted.items())


def filter_sql(req: Filters) -> tuple[str, list[Any]]:
    """The SQL part of the filters (` AND ...`) and its parameters."""
    where, params = "", list[Any]()
    if req.session_id is not UNSET:
        where, params = where + " AND session_id = ?", [*params, req.session_id]
    if req.roles is not UNSET:
        where += f" AND role IN ({','.join('?' * len(req.roles))})"
        params += req.roles
    if req.since is not UNSET:
        where, params = where + " AND timestamp >= ?", [*params, req.since]
    if req.until is not UNSET:
        where, params = where + " AND timestamp < ?", [*params, req.until]
    if req.pinned is not UNSET:
        where, params = where + " AND pinned = ?", [*params, int(req.pinned)]
    if req.metadata is not UNSET:
        where += " AND metadata IS NOT NULL"
    taxonomy, taxonomy_params = taxonomy_sql(req)
    return where + taxonomy, params + taxonomy_params


def list_memories(conn: apsw.Connection, req: ListRequest, *, now: int, budget: int) -> ListReply:
    """A read: `now` is the registry's calling convention, unused. The page ends early where
    the next memory would take the reply past `budget` bytes (handlers/paging.py)."""
    agent = agent_of(req)
    filters = {name: getattr(req, name) for name in _FILTER_FIELDS}
    shown = msgspec.json.encode({k: v for k, v in filters.items() if v is not UNSET}).decode()
    scope = ("list", *agent, req.order, shown, req.include_forgotten)
    where, params = filter_sql(req)
    if not req.include_forgotten:
        where += " AND forgotten_at IS NULL"
    newest = req.order == "newest"
    after: list[Any] | None = None
    if req.cursor is not UNSET:
        after = decode_cursor(req.cursor, scope, 2)
    found: list[MemoryOut] = []
    batch = min(1000, 2 * req.limit + 1)
    while len(found) <= req.limit:
        keyset, keyset_params = "", list[Any]()
        if after is not None:
            beyond = "<" if newest else ">"
            keyset = f" AND (timestamp {beyond} ? OR (timestamp = ? AND id > ?))"
            keyset_params = [after[0], after[0], after[1]]
        rows = conn.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND agent_id = ?"
            f"{where}{keyset} ORDER BY timestamp {'DESC' if newest else 'ASC'}, id LIMIT ?",
            (*agent, *params, *keyset_params, batch),
        ).fetchall()
        for row in rows:
            memory = memory_out(row)
            if req.metadata is UNSET or metadata_matches(req.metadata, memory.metadata):
                found.append(memory)
        if len(rows) < batch:
            break
        after = [rows[-1][3], rows[-1][0]]

    def cursor_after(n: int) -> str | None:
        last = found[n]
        return None if n + 1 >= len(found) else encode_cursor(scope, (last.timestamp, last.id))

    def reply(page: list[MemoryOut], cursor: str | None) -> ListReply:
        return ListReply(memories=page, next_cursor=cursor)

    return fitting_page(found, req.limit, budget, reply, cursor_after, "memory")


def session_messages(
    conn: apsw.Connection, req: SessionGetRequest, *, now: int, budget: int
) -> SessionGetReply:
    """The transcript in order, positions counted from 1 (stored positions may have gaps);
    content null where the memory is gone or forgotten; the page within `budget` bytes.
    `now`: unused."""
    agent = agent_of(req)
    require_session(conn, agent, req.session_id)
    scope = ("session", *agent, req.session_id)
    after = -1
    if req.cursor is not UNSET:
        [after] = decode_cursor(req.cursor, scope, 1)
    [(before,)] = conn.execute(
        "SELECT count(*) FROM session_messages WHERE tenant = ? AND agent_id = ? "
        "AND session_id = ? AND position <= ?",
        (*agent, req.session_id, after),
    ).fetchall()
    rows = conn.execute(
        "SELECT m.position, m.memory_id, m.role, m.timestamp, x.content FROM session_messages m "
        "LEFT JOIN memories x ON x.id = m.memory_id AND x.tenant = m.tenant "
        "AND x.agent_id = m.agent_id AND x.forgotten_at IS NULL "
        "WHERE m.tenant = ? AND m.agent_id = ? AND m.session_id = ? AND m.position > ? "
        "ORDER BY m.position LIMIT ?",
        (*agent, req.session_id, after, req.limit + 1),
    ).fetchall()
    messages = [
        SessionMessage(
            position=int(str(before)) + n,
            id=None if row[1] is None else str(row[1]),
            role=str(row[2]),
            timestamp=int(str(row[3])),
            content=None if row[4] is None else str(row[4]),
        )
        for n, row in enumerate(rows[: req.limit], start=1)
    ]

    def cursor_after(n: int) -> str | None:
        return None if n + 1 >= len(rows) else encode_cursor(scope, (int(str(rows[n][0])),))

    def reply(page: list[SessionMessage], cursor: str | None) -> SessionGetReply:
        return SessionGetReply(messages=page, next_cursor=cursor)

    return fitting_page(messages, req.limit, budget, reply, cursor_after, "message")
