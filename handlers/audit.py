"""The audit log's rows (contract section 12): what changed, never content.

Writes record their changes in the transaction that makes them (worker/audit.py hands the call's
source and requester); eviction purges rows past the retention; memory::audit pages through them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import apsw
import msgspec
from msgspec import UNSET

from handlers.cursors import decode_cursor, encode_cursor
from handlers.grants import matches_clause
from handlers.ingested import IngestKey
from handlers.paging import fitting_page
from schema.base import Agent
from schema.life import AuditEvent, AuditReply, AuditRequest

# Past this many memories an event keeps only their count.
MAX_IDS = 100


@dataclass(frozen=True)
class Call:
    """Who asked for the change being made, and through what."""

    trigger: str
    source: str  # "bus" | "schedule" | "ingest" | "cli"
    requester: str | None = None  # `account/user` when the bus names the caller
    # The key of the ingested message the call's own write belongs to (durable ingestion only),
    # under the agent whose partition keeps it.
    message: IngestKey | None = None


@dataclass(frozen=True)
class Change:
    """What one write did to one agent: the memories (or entities) it touched, or how many."""

    agent: Agent
    ids: Sequence[str] = ()
    count: int | None = None  # when not len(ids): a count without ids (consolidate, erase)
    trigger: str | None = None  # when not the call's: a store that restored is an unforget
    # What else the row says, never content: the sanitiser's rules, the switch's state.
    detail: dict[str, Any] | None = None


def record(conn: apsw.Connection, call: Call | None, changes: Iterable[Change], now: int) -> None:
    """Append one audit row per change that did something. No call: a write outside any trigger
    (a test, an import), which the audit does not describe."""
    record_all(conn, [(call, changes)], now)


def record_all(
    conn: apsw.Connection, calls: Iterable[tuple[Call | None, Iterable[Change]]], now: int
) -> None:
    """record for each call's changes, in order, by one INSERT statement stepped for each row
    (a batch of stores is audited in one call: issue 33)."""
    rows = []
    for call, changes in calls:
        if call is None:
            continue
        for change in changes:
            count = len(change.ids) if change.count is None else change.count
            if count == 0:
                continue
            ids = None
            if change.ids and len(change.ids) <= MAX_IDS:
                ids = _JSON.encode(list(change.ids)).decode()
            tenant, agent_id = change.agent
            trigger = change.trigger or call.trigger
            detail = None if change.detail is None else _JSON.encode(change.detail).decode()
            rows.append(
                (now, tenant, agent_id, trigger, ids, count, call.source, call.requester, detail)
            )
    if rows:
        conn.executemany(
            "INSERT INTO audit (at, tenant, agent_id, trigger, ids, count, source, requester, "
            "detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


_JSON = msgspec.json.Encoder()


def purge(conn: apsw.Connection, before: int, scope: str, params: tuple[str, ...]) -> int:
    """Remove audit rows older than `before` within an eviction's scope (` AND tenant = ?`
    and so on, as handlers/evict.py's scope_of makes it): the retention. How many."""
    conn.execute(f"DELETE FROM audit WHERE at < ?{scope}", (before, *params))
    return conn.changes()


def audit_events(conn: apsw.Connection, req: AuditRequest, *, now: int, budget: int) -> AuditReply:
    """A read, oldest first, the page within `budget` bytes (handlers/paging.py): `now` is the
    registry's calling convention, unused."""
    where: list[str] = ["1"]
    params: list[str | int] = []
    scope: tuple[Any, ...] = ("audit", req.tenant, req.agent_id, req.since, req.grants)
    scope = tuple(None if part is UNSET else part for part in scope)
    if req.tenant is not UNSET:
        where.append("tenant = ?")
        params.append(req.tenant)
    if req.agent_id is not UNSET:
        where.append("agent_id = ?")
        params.append(req.agent_id)
    if req.grants is not UNSET:  # only the agents the caller's grants match
        granted, patterns = matches_clause(req.grants, "agent_id")
        where.append(granted)
        params.extend(patterns)
    if req.since is not UNSET:
        where.append("at >= ?")
        params.append(req.since)
    if req.cursor is not UNSET:
        [after] = decode_cursor(req.cursor, scope, 1)
        where.append("seq > ?")
        params.append(after)
    rows = conn.execute(
        "SELECT seq, at, trigger, agent_id, source, requester, ids, count, detail FROM audit "
        f"WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?",
        (*params, req.limit + 1),
    ).fetchall()
    events = [_event(row) for row in rows[: req.limit]]

    def cursor_after(n: int) -> str | None:
        return None if n + 1 >= len(rows) else encode_cursor(scope, (events[n].seq,))

    return fitting_page(events, req.limit, budget, audit_reply, cursor_after, "event")


def audit_reply(events: list[AuditEvent], cursor: str | None) -> AuditReply:
    return AuditReply(events=events, next_cursor=cursor)


def _event(row: Any) -> AuditEvent:
    seq, at, trigger, agent_id, source, requester, ids, count, detail = row
    return AuditEvent(
        seq=int(seq),
        at=int(at),
        trigger=str(trigger),
        agent_id=str(agent_id),
        source=str(source),
        requester=None if requester is None else str(requester),
        ids=None if ids is None else msgspec.json.decode(str(ids), type=list[str]),
        count=int(count) if ids is None else None,
        detail=None if detail is None else msgspec.json.decode(str(detail), type=dict[str, Any]),
    )
