"""memory::kv::*: small JSON values by key, per agent or in the tenant's `shared` namespace.

A set is a decide step (the version the key gets, checked against `ifVersion`, and the time) and
an apply step (the row), run together in one writer transaction. Every worker sharing the file
takes SQLite's write lock for that transaction (BEGIN IMMEDIATE), so a compare-and-set reads and
writes the version with nobody in between: concurrent sets with the same `ifVersion` give one
success and conflicts, and each success is a distinct version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw
import msgspec
from msgspec import UNSET

from handlers.audit import Change
from handlers.cursors import decode_cursor, encode_cursor
from handlers.paging import fitting_page
from schema.base import Agent, tenant_of
from schema.errors import Conflict, NotFound, PayloadTooLarge
from schema.kv import (
    MAX_VALUE_BYTES,
    KvDeleteReply,
    KvDeleteRequest,
    KvGetRequest,
    KvItem,
    KvListReply,
    KvListRequest,
    KvSetReply,
    KvSetRequest,
    Namespaced,
)
from schema.limits import check_nesting

SHARED = ""  # the `agent_id` of the namespace `shared`


def owner_of(req: Namespaced) -> Agent:
    """(tenant, agent) the keys live under; the agent is '' for `shared`."""
    return (tenant_of(req), req.owner())


def check_json(value: Any, field: str) -> str:
    """The value as stored: JSON text of at most 64 KiB (413 past it), nesting as metadata's."""
    check_nesting(value, f"$.{field}")
    text = msgspec.json.encode(value)
    if len(text) > MAX_VALUE_BYTES:
        raise PayloadTooLarge(
            f"{field}: {len(text)} bytes of JSON, more than {MAX_VALUE_BYTES} - at `$.{field}`"
        )
    return text.decode()


@dataclass(frozen=True)
class KvSet:
    """The decision: whose key, the JSON it holds now, the version it gets, and when."""

    owner: Agent
    key: str
    value: str
    version: int
    at: int


def current_version(conn: apsw.Connection, owner: Agent, key: str) -> int:
    """0 when the key is absent."""
    row = conn.execute(
        "SELECT version FROM kv WHERE tenant = ? AND agent_id = ? AND key = ?", (*owner, key)
    ).fetchone()
    return 0 if row is None else int(row[0])


def decide_set(conn: apsw.Connection, req: KvSetRequest, *, now: int) -> KvSet:
    owner = owner_of(req)
    value = check_json(req.value, "value")
    version = current_version(conn, owner, req.key)
    if req.if_version is not UNSET and req.if_version != version:
        held = "is absent" if version == 0 else f"is at version {version}"
        raise Conflict(f"ifVersion: the key {held}, not {req.if_version} - at `$.ifVersion`")
    return KvSet(owner, req.key, value, version + 1, now)


def apply_set(conn: apsw.Connection, event: KvSet) -> KvSetReply:
    """A replay of a set already applied changes nothing: the row only moves forward."""
    conn.execute(
        "INSERT INTO kv (tenant, agent_id, key, value, version, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, agent_id, key) DO UPDATE SET "
        "value = excluded.value, version = excluded.version, updated_at = excluded.updated_at "
        "WHERE kv.version < excluded.version",
        (*event.owner, event.key, event.value, event.version, event.at),
    )
    return KvSetReply(version=event.version)


def kv_set(conn: apsw.Connection, req: KvSetRequest, *, now: int) -> KvSetReply:
    return apply_set(conn, decide_set(conn, req, now=now))


def changed(owner: Agent, detail: dict[str, Any]) -> list[Change]:
    """One audit row, never the key nor the value (keys may be as telling as values): a count,
    and for `shared` the namespace (its rows have no agent)."""
    if owner[1] == SHARED:
        detail = {"namespace": "shared", **detail}
    return [Change(owner, count=1, detail=detail or None)]


def kv_set_changes(req: KvSetRequest, reply: KvSetReply) -> list[Change]:
    return changed(owner_of(req), {"version": reply.version})


@dataclass(frozen=True)
class KvDeletion:
    owner: Agent
    key: str
    present: bool


def decide_delete(conn: apsw.Connection, req: KvDeleteRequest) -> KvDeletion:
    owner = owner_of(req)
    return KvDeletion(owner, req.key, current_version(conn, owner, req.key) > 0)


def apply_delete(conn: apsw.Connection, event: KvDeletion) -> KvDeleteReply:
    conn.execute(
        "DELETE FROM kv WHERE tenant = ? AND agent_id = ? AND key = ?", (*event.owner, event.key)
    )
    return KvDeleteReply(deleted=event.present)


def kv_delete(conn: apsw.Connection, req: KvDeleteRequest, *, now: int) -> KvDeleteReply:
    """Deleting an absent key is not an error: `deleted: false`, nothing written or audited."""
    return apply_delete(conn, decide_delete(conn, req))


def kv_delete_changes(req: KvDeleteRequest, reply: KvDeleteReply) -> list[Change]:
    return changed(owner_of(req), {}) if reply.deleted else []


def _item(row: Any) -> KvItem:
    key, value, version, updated_at = row
    return KvItem(
        key=str(key), value=msgspec.json.decode(str(value)), version=int(version),
        updated_at=int(updated_at),
    )  # fmt: skip


def kv_get(conn: apsw.Connection, req: KvGetRequest, *, now: int) -> KvItem:
    row = conn.execute(
        "SELECT key, value, version, updated_at FROM kv "
        "WHERE tenant = ? AND agent_id = ? AND key = ?",
        (*owner_of(req), req.key),
    ).fetchone()
    if row is None:
        raise NotFound("key: no such key - at `$.key`")
    return _item(row)


def _after(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix`, if one exists."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        code = 0xE000 if 0xD800 <= code <= 0xDFFF else code  # no surrogates in UTF-8
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None


def kv_list(conn: apsw.Connection, req: KvListRequest, *, now: int, budget: int) -> KvListReply:
    """Keys in order (SQLite's binary order of UTF-8: code point order), from a prefix; the
    page within `budget` bytes (handlers/paging.py)."""
    owner = owner_of(req)
    prefix = req.prefix if isinstance(req.prefix, str) else ""
    scope = ("kv", *owner, prefix)
    where = ["tenant = ? AND agent_id = ?", "key >= ?"]
    params: list[Any] = [*owner, prefix]
    if prefix:
        upper = _after(prefix)
        if upper is not None:
            where.append("key < ?")
            params.append(upper)
        where.append("substr(key, 1, ?) = ?")
        params.extend((len(prefix), prefix))
    if req.cursor is not UNSET:
        [last] = decode_cursor(req.cursor, scope, 1)
        where.append("key > ?")
        params.append(str(last))
    rows = conn.execute(
        f"SELECT key, value, version, updated_at FROM kv WHERE {' AND '.join(where)} "
        "ORDER BY key LIMIT ?",
        (*params, req.limit + 1),
    ).fetchall()
    items = [_item(row) for row in rows[: req.limit]]

    def cursor_after(n: int) -> str | None:
        return None if n + 1 >= len(rows) else encode_cursor(scope, (items[n].key,))

    def reply(page: list[KvItem], cursor: str | None) -> KvListReply:
        return KvListReply(items=page, next_cursor=cursor)

    return fitting_page(items, req.limit, budget, reply, cursor_after, "item")
