"""What handler tests share: a fixed `now`, and writes made the way the writer makes them (one
transaction per call)."""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import apsw

from handlers.store import store as store_handler
from schema.memory import StoreRequest

NOW = 1_700_000_000_000
DAY = 86_400_000
WEEK = 7 * DAY
MAX_CONTENT_BYTES = 524_288  # the worker's default


class Stored(NamedTuple):
    """A store's reply as the handler gives it: it always has an id (only the worker's flow
    answers a switched-off agent, with none)."""

    id: str
    stored: bool
    deduplicated: bool


def store(
    conn: apsw.Connection, agent: str, content: str, *, now: int = NOW, **fields: Any
) -> Stored:
    """memory::store's handler in its own transaction; fields are StoreRequest's (snake_case)."""
    with conn:
        reply = store_handler(
            conn,
            StoreRequest(agent_id=agent, content=content, **fields),
            now=now,
            max_content_bytes=MAX_CONTENT_BYTES,
        )
    assert reply.id is not None
    return Stored(reply.id, reply.stored, reply.deduplicated)


def rows(conn: apsw.Connection, sql: str, *params: object) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in conn.execute(sql, params)]


def insert_in_tenant(conn: apsw.Connection, tenant: str, agent_id: str, content: str) -> str:
    """One memory of a tenant's agent written with plain SQL (migration 0002's columns), for
    tests that must not depend on the store handler's tenancy; its id."""
    memory_id = str(uuid.uuid4())
    conn.execute(
        "INSERT INTO memories (id, tenant, agent_id, role, content, hash, importance, "
        "confidence, last_accessed, timestamp, created_at) "
        "VALUES (?, ?, ?, 'user', ?, ?, 0.5, 1.0, 1, 1, 1)",
        (memory_id, tenant, agent_id, content, f"{tenant}/{content}"),
    )
    return memory_id
