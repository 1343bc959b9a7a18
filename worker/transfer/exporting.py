"""Moving agents between databases as JSON Lines: the file's framing and the export.

A file is a header, then per agent its records, table after table as the tables are registered
(handlers/tables/registered.py: its switch, memories, sessions, entities and relations, its
keys, posted tasks, usage records and canonical sessions; the tenant's `shared` keys as agent
''), then an `end` record carrying the count of records between the two, so that a file cut
short by a full disk or a killed pipe is refused on import instead of half-applied. Each table's
record and how its rows become records are declared beside its registration.

An agent is a (tenant, agentId) pair: every agent-level record names its tenant, and the default
tenant '' is left out, so that a file written before tenants existed is a default-tenant export
and a default-tenant export is byte for byte what this format always was.
Import lives in worker/transfer/importing.py, the two commands in worker/transfer/commands.py.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any, BinaryIO, Literal, TextIO

import apsw
import msgspec

from handlers.tables.records import Record, TransferError
from handlers.tables.registered import TABLES
from handlers.tables.table import Table, Transfer
from schema.base import Millis, StoredId, Tenant

__all__ = ["TransferError", "export_jsonl"]

FORMAT: Literal["memory-worker-export"] = "memory-worker-export"
VERSION = 1
FLUSH_BYTES = 1 << 16


class Header(Record, frozen=True, tag="header"):
    format: Literal["memory-worker-export"]
    version: int
    schema_version: int
    exported_at: Millis
    agent: StoredId | None
    # The tenant the export was limited to; absent (None) when it holds every tenant.
    tenant: Tenant | None = None


class End(Record, frozen=True, tag="end"):
    records: Annotated[int, msgspec.Meta(ge=0)]


def transfers(tables: Sequence[Table]) -> list[Transfer[Any]]:
    """The tables that export files carry, in file order."""
    return [table.transfer for table in tables if isinstance(table.transfer, Transfer)]


def agents_sql(
    tenant: str | None, agent_id: str | None, tables: Sequence[Table] = TABLES
) -> tuple[str, tuple[str | None, ...]]:
    """The (tenant, agent) pairs to export, in file order, limited as the command was asked:
    those with a row in any table export files carry (the agent '' of `kv` is the namespace
    `shared`: a whole-tenant export carries it)."""
    given = {
        column: value
        for column, value in (("tenant", tenant), ("agent_id", agent_id))
        if value is not None
    }
    condition = " WHERE " + " AND ".join(f"{column} = ?" for column in given) if given else ""
    names = [table.name for table in tables if isinstance(table.transfer, Transfer)]
    selects = [f'SELECT tenant, agent_id FROM "{name}"{condition}' for name in names]
    return " UNION ".join(selects) + " ORDER BY 1, 2", tuple(given.values()) * len(names)


def check_tenant(name: str, where: str) -> str:
    """A tenant named on the command line or in a file must be one a caller could have: the
    NATS account rule of schema/base.py. `where` names the flag or field in the error."""
    try:
        return msgspec.convert(name, Tenant)
    except msgspec.ValidationError as error:
        raise TransferError(f"{where}: {name!r} is not a tenant name: {error}") from None


def _agent_records(
    conn: apsw.Connection, tenant: str, agent_id: str, tables: Sequence[Table]
) -> Iterator[Record]:
    for transfer in transfers(tables):
        yield from transfer.export(conn, tenant, agent_id)


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
    tables: Sequence[Table] = TABLES,
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
        sql, params = agents_sql(tenant, agent_id, tables)
        for agent_tenant, agent in conn.execute(sql, params).fetchall():
            for record in _agent_records(conn, str(agent_tenant), str(agent), tables):
                emit(record)
                count += 1
    emit(End(records=count))
    write(bytes(buffer))
    return count
