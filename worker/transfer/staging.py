"""Reading an export file into TEMP tables, checking every line, before anything is applied.

Temp tables belong to this connection alone, so reading a long file takes no lock on the
database; worker/transfer/importing.py applies what was staged in one short transaction.
Every staged row carries the tenant it goes to (the record's, or the one `import --tenant`
names): an agent is a (tenant, agentId) pair, so that is the prefix of every key here too.
Each record is checked and staged by its table's registration (handlers/tables/); this module
checks the frame: a header first, an end last announcing the count, every record of the agent
and tenant the header names.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import apsw
import msgspec

from handlers.tables.records import TransferError, at
from handlers.tables.table import Table, Transfer
from worker.transfer.exporting import VERSION, End, Header, transfers


class AgentRecord(Protocol):
    """What every record of agent data says (handlers/tables/records.py)."""

    @property
    def agent_id(self) -> str | None: ...

    @property
    def tenant(self) -> str: ...


def temp_tables(conn: apsw.Connection) -> list[str]:
    """The staging tables of this connection (every Transfer's are named `transfer_*`)."""
    return [
        str(name)
        for (name,) in conn.execute(
            "SELECT name FROM temp.sqlite_master WHERE type = 'table' AND name GLOB 'transfer_*'"
        )
    ]


def create_staging(conn: apsw.Connection, tables: Sequence[Table]) -> None:
    """Drop what an earlier import of this connection left, then create every table's."""
    drop_staging(conn)
    for transfer in transfers(tables):
        conn.execute(transfer.staging)


def drop_staging(conn: apsw.Connection) -> None:
    for name in temp_tables(conn):
        conn.execute(f'DROP TABLE temp."{name}"')


def stage(
    conn: apsw.Connection,
    lines: Iterable[bytes],
    progress: Callable[[int], None] | None,
    into: str | None,
    tables: Sequence[Table],
) -> int:
    """Decode and check every line into the temp tables; returns the count of data records.

    `into` is the tenant of every record (`import --tenant`); None keeps each record's own.
    """
    kinds: dict[type[Any], Transfer[Any]] = {t.record: t for t in transfers(tables)}
    decoder = msgspec.json.Decoder(functools.reduce(operator.or_, (Header, End, *kinds)))
    header: Header | None = None
    end: End | None = None
    count = line = read = 0
    for raw in lines:
        line += 1
        read += len(raw)
        if progress is not None:
            progress(read)
        if not raw.strip():
            continue
        if end is not None:
            raise TransferError(f"line {line}: data after the end record")
        try:
            record = decoder.decode(raw)
        except msgspec.DecodeError as error:
            raise TransferError(f"line {line}: {error}") from None
        if header is None:
            if not isinstance(record, Header):
                raise TransferError(f"line {line}: not a memory-worker export (no header record)")
            if record.version != VERSION:
                raise at(line, f"format version {record.version} is not {VERSION}", "version")
            header = record
            continue
        if isinstance(record, Header):
            raise TransferError(f"line {line}: a second header record")
        if isinstance(record, End):
            if record.records != count:
                raise at(line, f"{record.records} records announced, {count} read", "records")
            end = record
            continue
        data: AgentRecord = record
        if header.agent is not None and data.agent_id != header.agent:
            raise at(
                line, f"agent {data.agent_id!r} in an export of agent {header.agent!r}", "agentId"
            )
        if header.tenant is not None and data.tenant != header.tenant:
            raise at(
                line, f"tenant {data.tenant!r} in an export of tenant {header.tenant!r}", "tenant"
            )
        kinds[type(record)].stage(conn, record, data.tenant if into is None else into, line)
        count += 1
    if header is None:
        raise TransferError("empty file: not a memory-worker export (no header record)")
    if end is None:
        raise TransferError(f"the file ends at line {line} without its end record: truncated")
    return count
