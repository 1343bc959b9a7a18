"""memory::evict: stale and low-confidence memories first, then each agent down to its cap."""

from __future__ import annotations

import apsw
from msgspec import UNSET

from handlers.session_refs import remove_memories
from schema.memory import EvictReply, EvictRequest


def evict(conn: apsw.Connection, req: EvictRequest, *, now: int) -> EvictReply:
    scope, params = ("", ()) if req.agent_id is UNSET else (" AND agent_id = ?", (req.agent_id,))
    stale_rule = "(? - timestamp) > ? AND importance < ?"
    stale = {
        (row[0], row[1])
        for row in conn.execute(
            f"SELECT id, agent_id FROM memories WHERE {stale_rule}{scope}",
            (now, req.max_age, req.min_importance, *params),
        )
    }
    low_confidence = {
        (row[0], row[1])
        for row in conn.execute(
            f"SELECT id, agent_id FROM memories WHERE confidence < ? AND NOT ({stale_rule}){scope}",
            (req.min_confidence, now, req.max_age, req.min_importance, *params),
        )
    }
    doomed = stale | low_confidence
    leaving: dict[str, int] = {}
    for _, agent_id in doomed:
        leaving[agent_id] = leaving.get(agent_id, 0) + 1
    over_cap: set[tuple[str, str]] = set()
    counts = conn.execute(
        f"SELECT agent_id, count(*) FROM memories WHERE 1{scope} GROUP BY agent_id", params
    ).fetchall()
    for agent_id, total in ((str(row[0]), int(str(row[1]))) for row in counts):
        excess = total - leaving.get(agent_id, 0) - req.cap
        if excess <= 0:
            continue
        for row in conn.execute(
            "SELECT id FROM memories WHERE agent_id = ? "
            "ORDER BY importance, confidence, timestamp, id",
            (agent_id,),
        ):
            if (row[0], agent_id) in doomed:
                continue
            over_cap.add((row[0], agent_id))
            excess -= 1
            if excess == 0:
                break
    if not req.dry_run:
        by_agent: dict[str, list[str]] = {}
        for memory_id, agent_id in doomed | over_cap:
            by_agent.setdefault(agent_id, []).append(memory_id)
        for agent_id, memory_ids in by_agent.items():
            remove_memories(conn, agent_id, memory_ids)
            conn.executemany(
                "DELETE FROM memories WHERE id = ? AND agent_id = ?",
                [(memory_id, agent_id) for memory_id in memory_ids],
            )
    return EvictReply(
        evicted=len(stale) + len(low_confidence) + len(over_cap),
        stale=len(stale),
        low_confidence=len(low_confidence),
        over_cap=len(over_cap),
        dry_run=req.dry_run,
        duration_ms=0.0,
    )
