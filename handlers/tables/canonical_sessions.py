"""Canonical sessions (handlers/canonical.py): one row per (tenant, agent, user) saying what
the conversation is about; its messages are ordinary memories in the agent's session
`canonical:<userId>`, and travel and go as those do.

A second import of the same file: a row is written when it is missing or the file's is newer
(`updatedAt`) than the one here.
"""

from __future__ import annotations

from collections.abc import Iterator

import apsw

from handlers.tables.records import Count, Record, at
from handlers.tables.table import Stat, Table, Transfer, counted, delete_rows
from schema.base import DEFAULT_TENANT, Millis, StoredId, Tenant


class CanonicalRecord(Record, frozen=True, tag="canonical"):
    """A canonical session's row (section 14); its messages travel as the memories and the
    session `canonical:<userId>` of the agent."""

    agent_id: StoredId
    user_id: StoredId
    last_channel: StoredId
    message_count: Count
    updated_at: Millis
    summary: str | None = None
    tenant: Tenant = DEFAULT_TENANT


COLUMNS = "tenant, agent_id, user_id, summary, last_channel, message_count, updated_at"


def export_canonical(
    conn: apsw.Connection, tenant: str, agent_id: str
) -> Iterator[CanonicalRecord]:
    for row in conn.execute(
        f"SELECT {COLUMNS} FROM canonical_sessions WHERE tenant = ? AND agent_id = ? "
        "ORDER BY user_id",
        (tenant, agent_id),
    ):
        yield CanonicalRecord(
            tenant=tenant, agent_id=row[1], user_id=row[2], summary=row[3], last_channel=row[4],
            message_count=row[5], updated_at=row[6],
        )  # fmt: skip


def stage_canonical(conn: apsw.Connection, r: CanonicalRecord, tenant: str, line: int) -> None:
    try:
        conn.execute(
            f"INSERT INTO temp.transfer_canonical (seq, {COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (line, tenant, r.agent_id, r.user_id, r.summary, r.last_channel, r.message_count,
             r.updated_at),
        )  # fmt: skip
    except apsw.ConstraintError:
        raise at(line, "a second record of the same user", "userId") from None


def apply_canonical(conn: apsw.Connection, now: int) -> dict[str, int]:
    conn.execute(
        f"INSERT INTO main.canonical_sessions ({COLUMNS}) "
        f"SELECT {COLUMNS} FROM temp.transfer_canonical WHERE true ORDER BY seq "
        "ON CONFLICT (tenant, agent_id, user_id) DO UPDATE SET summary = excluded.summary, "
        "last_channel = excluded.last_channel, message_count = excluded.message_count, "
        "updated_at = excluded.updated_at WHERE excluded.updated_at > canonical_sessions.updated_at"
    )
    return {"canonical_written": int(conn.changes())}


CANONICAL_SESSIONS = Table(
    name="canonical_sessions",
    owner="agent",
    erase=delete_rows,
    transfer=Transfer(
        record=CanonicalRecord,
        export=export_canonical,
        staging="CREATE TEMP TABLE transfer_canonical (seq INTEGER PRIMARY KEY, tenant, "
        "agent_id, user_id, summary, last_channel, message_count, updated_at, "
        "UNIQUE (tenant, agent_id, user_id));",
        stage=stage_canonical,
        apply=apply_canonical,
        summary="canonical sessions {canonical_written} written",
    ),
    stats=(
        Stat(
            key="canonical_sessions",
            count=counted("SELECT count(*) FROM canonical_sessions WHERE {where}"),
            label="canonical sessions",
            metric="Canonical sessions: (agent, user) conversations across channels.",
        ),
    ),
)
