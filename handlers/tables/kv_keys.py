"""The key-value table (handlers/kv.py): an agent's keys, and the tenant's `shared` namespace
stored under agent '' (a whole-tenant export carries it; no agent's erasure removes it).

A second import of the same file: a key is written when the file's version is newer than the
one here, so the same file changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import apsw
import msgspec

from handlers.tables.records import NonEmpty, Record, at, json_text, json_value
from handlers.tables.table import Stat, Table, Transfer, counted, delete_rows
from schema.base import DEFAULT_TENANT, Millis, StoredId, Tenant


class KvRecord(Record, frozen=True, tag="kv"):
    """A key of an agent, or of the tenant's `shared` namespace when `agentId` is left out."""

    key: NonEmpty
    value: Any
    version: Annotated[int, msgspec.Meta(ge=1)]
    updated_at: Millis
    agent_id: StoredId | None = None
    tenant: Tenant = DEFAULT_TENANT


def export_keys(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[KvRecord]:
    for name, value, version, updated_at in conn.execute(
        "SELECT key, value, version, updated_at FROM kv WHERE tenant = ? AND agent_id = ? "
        "ORDER BY key",
        (tenant, agent_id),
    ):
        yield KvRecord(
            tenant=tenant, agent_id=agent_id or None, key=name, value=json_value(value),
            version=version, updated_at=updated_at,
        )  # fmt: skip


def stage_key(conn: apsw.Connection, r: KvRecord, tenant: str, line: int) -> None:
    try:
        conn.execute(
            "INSERT INTO temp.transfer_kv VALUES (?, ?, ?, ?, ?, ?, ?)",
            (line, tenant, r.agent_id or "", r.key, json_text(r.value), r.version, r.updated_at),
        )
    except apsw.ConstraintError:
        raise at(line, "a second record of the same key", "key") from None


def apply_keys(conn: apsw.Connection, now: int) -> dict[str, int]:
    conn.execute(
        "INSERT INTO main.kv (tenant, agent_id, key, value, version, updated_at) "
        "SELECT tenant, agent_id, key, value, version, updated_at FROM temp.transfer_kv "
        "WHERE true ORDER BY seq ON CONFLICT (tenant, agent_id, key) DO UPDATE SET "
        "value = excluded.value, version = excluded.version, updated_at = excluded.updated_at "
        "WHERE excluded.version > kv.version"
    )
    return {"kv_written": int(conn.changes())}


KV = Table(
    name="kv",
    owner="agent",
    erase=delete_rows,
    erased_as="kv_keys",
    transfer=Transfer(
        record=KvRecord,
        export=export_keys,
        staging="CREATE TEMP TABLE transfer_kv (seq INTEGER PRIMARY KEY, tenant, agent_id, key, "
        "value, version, updated_at, UNIQUE (tenant, agent_id, key));",
        stage=stage_key,
        apply=apply_keys,
        summary="keys {kv_written} written",
    ),
    stats=(
        Stat(
            key="kv_keys",
            count=counted("SELECT count(*) FROM kv WHERE {where}"),
            label="kv keys",
            metric="Keys in the key-value store, the shared namespace included.",
        ),
    ),
)
