"""memory::consolidate: decay the confidence of memories nobody recalled for a week (and, with
`mergeThreshold`, merge near-duplicates after: handlers/merge.py).

Deciding fixes the cutoff and cuts the matching rows into rowid ranges; applying decays one
range. The worker applies the ranges one writer transaction each, so stores and recalls run
between them. A memory stored meanwhile has just been accessed and matches no range.
"""

from __future__ import annotations

import apsw
import msgspec

from handlers.audit import Change
from handlers.evict import KEPT, scope_of
from handlers.merge import merge_all
from handlers.switch import SWITCHED_ON
from schema.base import Agent
from schema.memory import ConsolidateReply, ConsolidateRequest

WEEK_MS = 604_800_000
FLOOR = 0.1


class DecayPlan(msgspec.Struct, frozen=True):
    """The decision: the rule's constants and the rowid ranges (lo, hi] that hold its rows."""

    cutoff: int
    decay_rate: float
    # What the request covered: ` AND ...` over tenant and agent, and its parameters.
    scope: str
    scope_params: tuple[str, ...]
    ranges: list[tuple[int, int]]


# A pinned memory, or one whose recall policy is `always`, never decays, nor do the memories
# of an agent whose memory is switched off.
RULE = f"last_accessed < ? AND confidence > ? AND {KEPT}" + SWITCHED_ON


def plan_decay(
    conn: apsw.Connection, req: ConsolidateRequest, *, now: int, chunk: int
) -> DecayPlan:
    scope, params = scope_of(req)
    cutoff = now - WEEK_MS
    rowids = [
        int(row[0])
        for row in conn.execute(
            f"SELECT rowid FROM memories WHERE {RULE}{scope} ORDER BY rowid",
            (cutoff, FLOOR, *params),
        )
    ]
    ranges = [
        (rowids[start - 1] if start else 0, rowids[min(start + chunk, len(rowids)) - 1])
        for start in range(0, len(rowids), chunk)
    ]
    return DecayPlan(
        cutoff=cutoff, decay_rate=req.decay_rate, scope=scope, scope_params=params, ranges=ranges
    )


def apply_decay(conn: apsw.Connection, plan: DecayPlan, lo: int, hi: int) -> int:
    """Decay the matching memories with lo < rowid <= hi; how many were decayed."""
    return sum(decay_range(conn, plan, lo, hi).values())


def decay_range(conn: apsw.Connection, plan: DecayPlan, lo: int, hi: int) -> dict[Agent, int]:
    """Decay the matching memories with lo < rowid <= hi; how many, per agent (the audit's
    counts)."""
    decayed: dict[Agent, int] = {}
    for tenant, agent_id in conn.execute(
        "UPDATE memories SET confidence = max(?, confidence * (1.0 - ?)) "
        f"WHERE rowid > ? AND rowid <= ? AND {RULE}{plan.scope} RETURNING tenant, agent_id",
        (FLOOR, plan.decay_rate, lo, hi, plan.cutoff, FLOOR, *plan.scope_params),
    ):
        agent = (str(tenant), str(agent_id))
        decayed[agent] = decayed.get(agent, 0) + 1
    return decayed


def decayed_changes(decayed: dict[Agent, int]) -> list[Change]:
    return [Change(agent, count=count) for agent, count in decayed.items()]


def consolidate(conn: apsw.Connection, req: ConsolidateRequest, *, now: int) -> ConsolidateReply:
    """Decide and apply in one transaction (tests, and callers that want it all at once)."""
    plan = plan_decay(conn, req, now=now, chunk=2**62)
    decayed = sum(apply_decay(conn, plan, lo, hi) for lo, hi in plan.ranges)
    merged = merge_all(conn, req)
    return ConsolidateReply(memories_decayed=decayed, memories_merged=merged, duration_ms=0.0)
