"""What every record of an export file shares (the file's framing, header and end, is in
worker/transfer/exporting.py; each table's record is declared beside its registration).

Every record of agent data names its agent (`agentId`) and its tenant (`tenant`, left out for
the default tenant ''), declared last by each record so that files keep their field order.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import apsw
import msgspec

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
Count = Annotated[int, msgspec.Meta(ge=0)]


class TransferError(ValueError):
    """A file or database that cannot be moved as asked; the message names the line and field."""


class Record(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    rename="camel",
    tag_field="kind",
    omit_defaults=True,
):
    pass


def at(line: int, message: str, field: str) -> TransferError:
    """A refusal of line `line`, naming the record's field (`$.field`)."""
    return TransferError(f"line {line}: {message} - at `$.{field}`")


def json_object(text: str | None, what: str, kind: Any = dict[str, Any]) -> Any:
    """A JSON column as a record carries it: re-encoded rather than copied verbatim, so that a
    stray newline cannot split a JSONL line; `kind`: an object (metadata, properties) or a list
    of strings (tags, flags)."""
    if text is None:
        return None
    try:
        return msgspec.json.decode(text, type=kind)
    except msgspec.DecodeError as error:
        raise TransferError(f"{what} is not valid JSON in the database: {error}") from None


def json_value(text: str | None) -> object:
    """A JSON column holding any value (a key's value, a task's result)."""
    return None if text is None else msgspec.json.decode(text)


def json_text(value: object) -> str:
    return msgspec.json.encode(value).decode()


def interned(text: Any) -> Any:
    """`omit_defaults` leaves a default out only when it is that very string object."""
    return sys.intern(str(text))


def insert_once(
    conn: apsw.Connection, table: str, what: str, line: int, agent: tuple[str, str], *rest: object
) -> None:
    """Stage a record keyed by (tenant, agent, id), the first of `rest`; a second record with
    the same key is refused, naming the line of the first."""
    row = (line, *agent, *rest)
    try:
        conn.execute(f"INSERT INTO temp.{table} VALUES ({', '.join('?' * len(row))})", row)
    except apsw.ConstraintError:
        first = conn.execute(
            f"SELECT seq FROM temp.{table} WHERE tenant = ? AND agent_id = ? AND id = ?",
            (*agent, rest[0]),
        ).fetchone()
        assert first is not None
        raise at(line, f"the same {what} is on line {first[0]}", "id") from None


def staged(conn: apsw.Connection, table: str) -> int:
    """How many rows wait in a staging table."""
    return int(conn.execute(f"SELECT count(*) FROM temp.{table}").get)
