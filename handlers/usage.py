"""memory::usage::*: token and cost accounting by model, agent or day.

Each record is a row of `usage`, and the same transaction adds it to the running totals of its
(tenant, UTC day, agent, model) in `usage_days`. A query over a range reads the whole days it
covers from those totals and scans raw rows (through a covering index) only for the partial
days at its two ends, so its cost follows the days and models in range, not the records.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import apsw
from msgspec import UNSET

from handlers.audit import Change
from handlers.grants import matches_clause
from schema.base import Agent, agent_of, tenant_of
from schema.usage import (
    UsageGroup,
    UsageQueryReply,
    UsageQueryRequest,
    UsageRecordReply,
    UsageRecordRequest,
    UsageTotals,
)

DAY_MS = 86_400_000
END_OF_TIME = 253_402_300_800_000  # the first millisecond of year 10000: after every Millis


@dataclass(frozen=True)
class Recorded:
    """The decision: the record's id and its timestamp (the request's, or now)."""

    agent: Agent
    record_id: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    timestamp: int


def decide_record(req: UsageRecordRequest, *, now: int, record_id: str | None = None) -> Recorded:
    """`record_id`: the id a write's decision chose (worker/triggers/usage.py), else a fresh one."""
    timestamp = now if req.timestamp is UNSET else req.timestamp
    return Recorded(
        agent_of(req), record_id or uuid.uuid4().hex, req.model, req.prompt_tokens,
        req.completion_tokens, req.cost_usd, timestamp,
    )  # fmt: skip


ADD_TO_DAYS_SQL = (
    "INSERT INTO usage_days (tenant, day, agent_id, model, prompt_tokens, completion_tokens, "
    "cost_usd, events) VALUES (?, ?, ?, ?, ?, ?, ?, 1) "
    "ON CONFLICT (tenant, day, agent_id, model) DO UPDATE SET "
    "prompt_tokens = prompt_tokens + excluded.prompt_tokens, "
    "completion_tokens = completion_tokens + excluded.completion_tokens, "
    "cost_usd = cost_usd + excluded.cost_usd, events = events + 1"
)


def apply_record(conn: apsw.Connection, event: Recorded) -> UsageRecordReply:
    """A replay of a record already applied adds nothing (the id is taken)."""
    tenant, agent_id = event.agent
    conn.execute(
        "INSERT OR IGNORE INTO usage (tenant, id, agent_id, model, prompt_tokens, "
        "completion_tokens, cost_usd, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (tenant, event.record_id, agent_id, event.model, event.prompt_tokens,
         event.completion_tokens, event.cost_usd, event.timestamp),
    )  # fmt: skip
    if conn.changes():
        conn.execute(
            ADD_TO_DAYS_SQL,
            (tenant, event.timestamp // DAY_MS, agent_id, event.model, event.prompt_tokens,
             event.completion_tokens, event.cost_usd),
        )  # fmt: skip
    return UsageRecordReply(recorded=True)


def usage_record(conn: apsw.Connection, req: UsageRecordRequest, *, now: int) -> UsageRecordReply:
    return apply_record(conn, decide_record(req, now=now))


def usage_record_changes(req: UsageRecordRequest, reply: UsageRecordReply) -> list[Change]:
    return [Change(agent_of(req), count=1)]


def rebuild_days(conn: apsw.Connection, agents: Iterable[Agent]) -> None:
    """Recompute the day totals of these agents from their records (after an import, or rows
    written around the triggers, as the bench does)."""
    for tenant, agent_id in agents:
        conn.execute("DELETE FROM usage_days WHERE tenant = ? AND agent_id = ?", (tenant, agent_id))
        conn.execute(
            "INSERT INTO usage_days (tenant, day, agent_id, model, prompt_tokens, "
            "completion_tokens, cost_usd, events) SELECT tenant, timestamp / 86400000, agent_id, "
            "model, sum(prompt_tokens), sum(completion_tokens), sum(cost_usd), count(*) "
            "FROM usage WHERE tenant = ? AND agent_id = ? GROUP BY 2, 4",
            (tenant, agent_id),
        )


RAW_KEYS = {"model": "model", "agent": "agent_id", "day": "timestamp / 86400000"}
DAY_KEYS = {"model": "model", "agent": "agent_id", "day": "day"}
SUMS = "sum(prompt_tokens), sum(completion_tokens), sum(cost_usd)"


def _key(group_by: str, value: Any) -> str:
    if group_by != "day":
        return str(value)
    return datetime.datetime.fromtimestamp(int(value) * 86_400, datetime.UTC).date().isoformat()


def usage_query(conn: apsw.Connection, req: UsageQueryRequest, *, now: int) -> UsageQueryReply:
    """The tenant's records (one agent's, with `agentId`) with since <= timestamp < until."""
    where: list[str] = ["tenant = ?"]
    params: list[Any] = [tenant_of(req)]
    if req.agent_id is not UNSET:
        where.append("agent_id = ?")
        params.append(req.agent_id)
    if req.grants is not UNSET:  # only the agents the caller's grants match
        granted, patterns = matches_clause(req.grants, "agent_id")
        where.append(granted)
        params.extend(patterns)
    scope = " AND ".join(where)
    since = 0 if req.since is UNSET else req.since
    until = END_OF_TIME if req.until is UNSET else req.until
    first_day, end_day = -(-since // DAY_MS), until // DAY_MS  # whole days: [first, end)
    parts: list[tuple[str, tuple[Any, ...]]] = []
    raw = (
        f"SELECT {RAW_KEYS[req.group_by]}, {SUMS}, count(*) FROM usage "
        f"WHERE {scope} AND timestamp >= ? AND timestamp < ? GROUP BY 1"
    )
    if first_day < end_day:
        parts.append(
            (
                f"SELECT {DAY_KEYS[req.group_by]}, {SUMS}, sum(events) FROM usage_days "
                f"WHERE {scope} AND day >= ? AND day < ? GROUP BY 1",
                (*params, first_day, end_day),
            )
        )
        edges = [(since, first_day * DAY_MS), (end_day * DAY_MS, until)]
    else:
        edges = [(since, until)]
    parts.extend((raw, (*params, low, high)) for low, high in edges if low < high)
    sums: dict[str, list[Any]] = {}
    for sql, values in parts:
        for key, prompt, completion, cost, events in conn.execute(sql, values):
            into = sums.setdefault(_key(req.group_by, key), [0, 0, 0.0, 0])
            for index, amount in enumerate((prompt, completion, cost, events)):
                into[index] += amount
    groups = [
        UsageGroup(
            key=key, prompt_tokens=int(s[0]), completion_tokens=int(s[1]),
            cost_usd=round(float(s[2]), 9), events=int(s[3]),
        )
        for key, s in sorted(sums.items())
    ]  # fmt: skip
    return UsageQueryReply(
        groups=groups,
        total=UsageTotals(
            prompt_tokens=sum(g.prompt_tokens for g in groups),
            completion_tokens=sum(g.completion_tokens for g in groups),
            cost_usd=round(sum(float(s[2]) for s in sums.values()), 9),
            events=sum(g.events for g in groups),
        ),
    )
