"""memory::evict: stale and low-confidence memories first, then each agent down to its cap.

Deciding reads every candidate; applying deletes them. The two are split so that the worker can
decide on a reader and apply in small chunks on the writer, letting stores and recalls run
between chunks. Each doomed memory carries the scores it was chosen by, and a chunk deletes it
only if they are unchanged: a memory re-scored after the decision (by consolidation, say) is
left alone rather than deleted on stale grounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import apsw
import msgspec
from msgspec import UNSET

from handlers.audit import Change
from handlers.facts.beliefs import memories_gone
from handlers.grants import grants_clause
from handlers.session_refs import remove_memories
from handlers.switch import SWITCHED_ON
from schema.base import Agent
from schema.memory import ConsolidateRequest, EvictReply, EvictRequest

Reason = Literal["purged", "stale", "low_confidence", "over_cap"]


class Doomed(msgspec.Struct, frozen=True, array_like=True):
    """One memory to evict, why, and the scores it was chosen by."""

    reason: Reason
    tenant: str
    agent_id: str
    memory_id: str
    importance: float
    confidence: float
    timestamp: int


class EvictionPlan(msgspec.Struct, frozen=True):
    """The decision: everything apply needs, so a replay deletes exactly these memories."""

    doomed: list[Doomed]

    def counts(self) -> dict[Reason, int]:
        return count_reasons(self.doomed)


def count_reasons(doomed: Sequence[Doomed]) -> dict[Reason, int]:
    counts: dict[Reason, int] = {"purged": 0, "stale": 0, "low_confidence": 0, "over_cap": 0}
    for memory in doomed:
        counts[memory.reason] += 1
    return counts


_COLUMNS = "tenant, agent_id, id, importance, confidence, timestamp"
# What maintenance may touch: neither pinned nor `always` (the agent's core memory).
KEPT = "pinned = 0 AND recall_policy != 'always'"


def scope_of(req: EvictRequest | ConsolidateRequest) -> tuple[str, tuple[str, ...]]:
    """The SQL condition (` AND ...`) and parameters for what a maintenance request covers: its
    tenant, or all of them when it names none; within that, its agent, or all of them that
    its caller's grants match."""
    scope, params = "", tuple[str, ...]()
    if req.tenant is not UNSET:
        scope, params = " AND tenant = ?", (req.tenant,)
    if req.agent_id is not UNSET:
        scope, params = scope + " AND agent_id = ?", (*params, req.agent_id)
    granted, patterns = grants_clause(req.grants)
    return scope + granted, (*params, *patterns)


def plan_eviction(conn: apsw.Connection, req: EvictRequest, *, now: int) -> EvictionPlan:
    # A pinned memory, or one whose recall policy is `always`, is never evicted, by any rule,
    # and does not count toward the cap; an agent whose memory is switched off is left alone.
    scope, params = scope_of(req)
    scope += f" AND {KEPT}" + SWITCHED_ON
    doomed = [
        Doomed("purged", *row)
        for row in conn.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE forgotten_at < ?{scope}",
            (now - req.forgotten_retention, *params),
        )
    ]
    purged = {memory.memory_id for memory in doomed}
    stale_rule = "(? - timestamp) > ? AND importance < ?"
    stale_params = (now, req.max_age, req.min_importance)
    doomed += [
        Doomed("stale", *row)
        for row in conn.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE {stale_rule}{scope}", (*stale_params, *params)
        )
        if row[2] not in purged
    ]
    doomed += [
        Doomed("low_confidence", *row)
        for row in conn.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE confidence < ? AND NOT ({stale_rule}){scope}",
            (req.min_confidence, *stale_params, *params),
        )
        if row[2] not in purged
    ]
    leaving: dict[Agent, set[str]] = {}
    for memory in doomed:
        leaving.setdefault((memory.tenant, memory.agent_id), set()).add(memory.memory_id)
    counts = conn.execute(
        f"SELECT tenant, agent_id, count(*) FROM memories WHERE 1{scope} GROUP BY tenant, agent_id",
        params,
    ).fetchall()
    for agent, total in (((str(row[0]), str(row[1])), int(str(row[2]))) for row in counts):
        gone = leaving.get(agent, set())
        excess = total - len(gone) - req.cap
        if excess <= 0:
            continue
        for row in conn.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE tenant = ? AND agent_id = ? AND {KEPT} "
            "ORDER BY importance, confidence, timestamp, id",
            agent,
        ):
            if row[2] in gone:
                continue
            doomed.append(Doomed("over_cap", *row))
            excess -= 1
            if excess == 0:
                break
    return EvictionPlan(doomed)


def apply_eviction(conn: apsw.Connection, doomed: Sequence[Doomed]) -> dict[Reason, int]:
    """Delete the memories of one chunk that still have the scores they were chosen by; the
    counts by reason of those deleted."""
    return count_reasons(delete_doomed(conn, doomed))


def evicted_changes(deleted: Sequence[Doomed]) -> list[Change]:
    """What the audit records of a chunk: the memories deleted, per agent."""
    by_agent: dict[Agent, list[str]] = {}
    for memory in deleted:
        by_agent.setdefault((memory.tenant, memory.agent_id), []).append(memory.memory_id)
    return [Change(agent, ids) for agent, ids in by_agent.items()]


def delete_doomed(conn: apsw.Connection, doomed: Sequence[Doomed]) -> list[Doomed]:
    """Delete the memories of one chunk that still have the scores they were chosen by, of agents
    whose memory is still on (with their session references); those deleted."""
    chosen = {memory.memory_id: memory for memory in doomed}
    deleted = [
        chosen[str(row[0])]
        for row in conn.executemany(
            "DELETE FROM memories WHERE id = ? AND tenant = ? AND agent_id = ? AND importance = ? "
            f"AND confidence = ? AND timestamp = ?{SWITCHED_ON} RETURNING id",
            [
                (m.memory_id, m.tenant, m.agent_id, m.importance, m.confidence, m.timestamp)
                for m in doomed
            ],
        )
    ]
    by_agent: dict[Agent, list[str]] = {}
    for memory in deleted:
        by_agent.setdefault((memory.tenant, memory.agent_id), []).append(memory.memory_id)
    for agent, memory_ids in by_agent.items():
        remove_memories(conn, agent, memory_ids)
        memories_gone(conn, agent, memory_ids)
    return deleted


def evict_reply(counts: dict[Reason, int], *, dry_run: bool) -> EvictReply:
    return EvictReply(
        evicted=sum(counts.values()),
        purged=counts["purged"],
        stale=counts["stale"],
        low_confidence=counts["low_confidence"],
        over_cap=counts["over_cap"],
        dry_run=dry_run,
        duration_ms=0.0,
    )


def evict(conn: apsw.Connection, req: EvictRequest, *, now: int) -> EvictReply:
    """Decide and apply in one transaction (tests, and callers that want it all at once)."""
    plan = plan_eviction(conn, req, now=now)
    if req.dry_run:
        return evict_reply(plan.counts(), dry_run=True)
    return evict_reply(apply_eviction(conn, plan.doomed), dry_run=False)
