"""memory::consolidate: decay the confidence of memories nobody recalled for a week."""

from __future__ import annotations

import apsw
from msgspec import UNSET

from schema.memory import ConsolidateReply, ConsolidateRequest

WEEK_MS = 604_800_000
FLOOR = 0.1


def consolidate(conn: apsw.Connection, req: ConsolidateRequest, *, now: int) -> ConsolidateReply:
    scope, params = ("", ()) if req.agent_id is UNSET else (" AND agent_id = ?", (req.agent_id,))
    conn.execute(
        "UPDATE memories SET confidence = max(?, confidence * (1.0 - ?)) "
        f"WHERE last_accessed < ? AND confidence > ?{scope}",
        (FLOOR, req.decay_rate, now - WEEK_MS, FLOOR, *params),
    )
    return ConsolidateReply(memories_decayed=conn.changes(), memories_merged=0, duration_ms=0.0)
