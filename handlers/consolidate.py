"""memory::consolidate: decay the confidence of memories nobody recalled for a week.

Deciding fixes the cutoff and cuts the matching rows into rowid ranges; applying decays one
range. The worker applies the ranges one writer transaction each, so stores and recalls run
between them. A memory stored meanwhile has just been accessed and matches no range.
"""

from __future__ import annotations

import apsw
import msgspec
from msgspec import UNSET

from schema.memory import ConsolidateReply, ConsolidateRequest

WEEK_MS = 604_800_000
FLOOR = 0.1


class DecayPlan(msgspec.Struct, frozen=True):
    """The decision: the rule's constants and the rowid ranges (lo, hi] that hold its rows."""

    cutoff: int
    decay_rate: float
    agent_id: str | None
    ranges: list[tuple[int, int]]


def _rule(plan_or_req: DecayPlan | ConsolidateRequest) -> tuple[str, tuple[object, ...]]:
    agent = plan_or_req.agent_id
    if agent is UNSET or agent is None:
        return "last_accessed < ? AND confidence > ?", ()
    return "last_accessed < ? AND confidence > ? AND agent_id = ?", (agent,)


def plan_decay(
    conn: apsw.Connection, req: ConsolidateRequest, *, now: int, chunk: int
) -> DecayPlan:
    rule, scope = _rule(req)
    cutoff = now - WEEK_MS
    rowids = [
        int(row[0])
        for row in conn.execute(
            f"SELECT rowid FROM memories WHERE {rule} ORDER BY rowid", (cutoff, FLOOR, *scope)
        )
    ]
    ranges = [
        (rowids[start - 1] if start else 0, rowids[min(start + chunk, len(rowids)) - 1])
        for start in range(0, len(rowids), chunk)
    ]
    agent = None if req.agent_id is UNSET else req.agent_id
    return DecayPlan(cutoff=cutoff, decay_rate=req.decay_rate, agent_id=agent, ranges=ranges)


def apply_decay(conn: apsw.Connection, plan: DecayPlan, lo: int, hi: int) -> int:
    """Decay the matching memories with lo < rowid <= hi; how many were decayed."""
    rule, scope = _rule(plan)
    conn.execute(
        "UPDATE memories SET confidence = max(?, confidence * (1.0 - ?)) "
        f"WHERE rowid > ? AND rowid <= ? AND {rule}",
        (FLOOR, plan.decay_rate, lo, hi, plan.cutoff, FLOOR, *scope),
    )
    return conn.changes()


def consolidate(conn: apsw.Connection, req: ConsolidateRequest, *, now: int) -> ConsolidateReply:
    """Decide and apply in one transaction (tests, and callers that want it all at once)."""
    plan = plan_decay(conn, req, now=now, chunk=2**62)
    decayed = sum(apply_decay(conn, plan, lo, hi) for lo, hi in plan.ranges)
    return ConsolidateReply(memories_decayed=decayed, memories_merged=0, duration_ms=0.0)
