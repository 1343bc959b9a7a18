"""Usage (handlers/usage.py): one row per record, and the per-day totals kept beside them
(usage_days), which import and erasure keep in step with the records.

A second import of the same file: records are keyed by their ids and added when missing, never
overwritten; a record added counts in the day totals of its agent at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

import apsw
import msgspec

from handlers.tables.records import Count, NonEmpty, Record, at
from handlers.tables.table import Skip, Stat, Table, Transfer, counted, delete_rows
from handlers.usage import ADD_TO_DAYS_SQL, DAY_MS
from schema.base import DEFAULT_TENANT, Millis, StoredId, Tenant


class UsageRecord(Record, frozen=True, tag="usage"):
    agent_id: StoredId
    id: NonEmpty
    model: str
    prompt_tokens: Count
    completion_tokens: Count
    cost_usd: Annotated[float, msgspec.Meta(ge=0.0)]
    timestamp: Millis
    tenant: Tenant = DEFAULT_TENANT


COLUMNS = "tenant, id, agent_id, model, prompt_tokens, completion_tokens, cost_usd, timestamp"


def export_usage(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[UsageRecord]:
    for row in conn.execute(
        f"SELECT {COLUMNS} FROM usage WHERE tenant = ? AND agent_id = ? ORDER BY seq",
        (tenant, agent_id),
    ):
        yield UsageRecord(
            tenant=tenant, id=row[1], agent_id=row[2], model=row[3], prompt_tokens=row[4],
            completion_tokens=row[5], cost_usd=row[6], timestamp=row[7],
        )  # fmt: skip


def stage_usage(conn: apsw.Connection, r: UsageRecord, tenant: str, line: int) -> None:
    try:
        conn.execute(
            f"INSERT INTO temp.transfer_usage (seq, {COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (line, tenant, r.id, r.agent_id, r.model, r.prompt_tokens, r.completion_tokens,
             r.cost_usd, r.timestamp),
        )  # fmt: skip
    except apsw.ConstraintError:
        raise at(line, "a second id", "id") from None


def apply_usage(conn: apsw.Connection, now: int) -> dict[str, int]:
    added = conn.execute(
        f"INSERT OR IGNORE INTO main.usage ({COLUMNS}) "
        f"SELECT {COLUMNS} FROM temp.transfer_usage WHERE true ORDER BY seq "
        "RETURNING tenant, timestamp, agent_id, model, prompt_tokens, completion_tokens, cost_usd"
    ).fetchall()
    conn.executemany(
        ADD_TO_DAYS_SQL,
        [(tenant, int(str(ts)) // DAY_MS, agent, model, p, c, cost)
         for tenant, ts, agent, model, p, c, cost in added],
    )  # fmt: skip
    return {"usage_added": len(added)}


USAGE = Table(
    name="usage",
    owner="agent",
    erase=delete_rows,
    transfer=Transfer(
        record=UsageRecord,
        export=export_usage,
        staging="CREATE TEMP TABLE transfer_usage (seq INTEGER PRIMARY KEY, tenant, id, "
        "agent_id, model, prompt_tokens, completion_tokens, cost_usd, timestamp, "
        "UNIQUE (tenant, id));",
        stage=stage_usage,
        apply=apply_usage,
        summary="usage records {usage_added} added",
    ),
    stats=(
        Stat(
            key="usage_records",  # read from the day totals, which count the records
            count=counted("SELECT sum(events) FROM usage_days WHERE {where}"),
            label="usage records",
            metric="Usage records.",
        ),
    ),
)
USAGE_DAYS = Table(
    name="usage_days",
    owner="agent",
    erase=delete_rows,
    transfer=Skip("the day totals of the usage records: import adds each record to its day"),
)
