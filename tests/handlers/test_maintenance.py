"""memory::evict and memory::consolidate's handlers (contract sections 4 and 5) with a fixed
now, on a plain connection where a test may set scores directly."""

from __future__ import annotations

from typing import Any

import apsw

from handlers.consolidate import consolidate
from handlers.evict import evict
from schema.memory import ConsolidateRequest, EvictReply, EvictRequest
from tests.handlers.support import DAY, NOW, rows, store


def run_evict(conn: apsw.Connection, **fields: Any) -> EvictReply:
    with conn:
        reply = evict(conn, EvictRequest(**fields), now=NOW)
    return reply


def run_consolidate(conn: apsw.Connection, **fields: Any) -> int:
    with conn:
        reply = consolidate(conn, ConsolidateRequest(**fields), now=NOW)
    assert reply.memories_merged == 0
    return reply.memories_decayed


def contents(conn: apsw.Connection, agent: str = "a") -> set[str]:
    return {
        str(row[0]) for row in rows(conn, "SELECT content FROM memories WHERE agent_id = ?", agent)
    }


def test_evict_counts_stale_low_confidence_and_both_once(conn: apsw.Connection) -> None:
    """Stale (older than maxAge and below minImportance) wins over low confidence; a memory
    that is both counts once."""
    old = NOW - 31 * DAY
    store(conn, "a", "stale", importance=0.1, timestamp=old)
    store(conn, "a", "both", importance=0.1, timestamp=old)
    store(conn, "a", "low", importance=0.9)
    store(conn, "a", "old but important", importance=0.5, timestamp=old)
    store(conn, "a", "not yet stale", importance=0.1, timestamp=NOW - 29 * DAY)
    with conn:
        conn.execute("UPDATE memories SET confidence = 0.05 WHERE content IN ('both', 'low')")
    reply = run_evict(conn, agent_id="a")
    assert (reply.evicted, reply.stale, reply.low_confidence, reply.over_cap) == (3, 2, 1, 0)
    assert reply.dry_run is False
    assert contents(conn) == {"old but important", "not yet stale"}


def test_dry_run_counts_and_deletes_nothing(conn: apsw.Connection) -> None:
    store(conn, "a", "stale", importance=0.1, timestamp=NOW - 40 * DAY)
    reply = run_evict(conn, dry_run=True)
    assert (reply.evicted, reply.stale, reply.dry_run) == (1, 1, True)
    assert contents(conn) == {"stale"}


def test_default_min_confidence_never_evicts_the_consolidation_floor(
    conn: apsw.Connection,
) -> None:
    store(conn, "a", "floored")
    with conn:
        conn.execute("UPDATE memories SET confidence = 0.1")
    assert run_evict(conn).evicted == 0
    assert run_evict(conn, min_confidence=0.2).low_confidence == 1


def test_cap_evicts_lowest_importance_then_confidence_then_older_then_id(
    conn: apsw.Connection,
) -> None:
    for name, importance, timestamp in [
        ("i1-old", 0.1, 1_000), ("i1-new", 0.1, 2_000), ("i3", 0.3, 1_000),
        ("i5", 0.5, 1_000), ("i9", 0.9, 1_000), ("i5-unsure", 0.5, 3_000),
    ]:  # fmt: skip
        store(conn, "a", name, importance=importance, timestamp=timestamp)
    with conn:
        conn.execute("UPDATE memories SET confidence = 0.5 WHERE content = 'i5-unsure'")
    reply = run_evict(conn, agent_id="a", cap=2, max_age=10**14)
    assert (reply.over_cap, reply.evicted) == (4, 4)
    assert contents(conn) == {"i5", "i9"}


def test_cap_applies_per_agent_and_zero_empties(conn: apsw.Connection) -> None:
    for agent in ("a", "b", "c"):
        for index in range(3 if agent != "c" else 1):
            store(conn, agent, f"{agent}{index}")
    assert run_evict(conn, cap=1).over_cap == 2 * 2  # c holds one memory: not over
    assert run_evict(conn, cap=0, agent_id="a").over_cap == 1
    assert [len(contents(conn, agent)) for agent in ("a", "b", "c")] == [0, 1, 1]


def test_evicted_memories_leave_their_sessions_and_dedup(conn: apsw.Connection) -> None:
    first = store(conn, "a", "gone soon", session_id="s", importance=0.0, timestamp=1)
    kept = store(conn, "a", "stays", session_id="s")
    run_evict(conn, agent_id="a")
    assert rows(conn, "SELECT memory_id FROM session_messages") == [(kept.id,)]
    again = store(conn, "a", "gone soon")
    assert again.stored is True and again.id != first.id


def test_consolidate_decays_only_unaccessed_for_a_week_and_floors(conn: apsw.Connection) -> None:
    store(conn, "a", "idle", timestamp=NOW - 8 * DAY)
    store(conn, "a", "recent", timestamp=NOW - 6 * DAY)
    store(conn, "a", "floored", timestamp=NOW - 8 * DAY)
    store(conn, "b", "other agent idle", timestamp=NOW - 8 * DAY)
    with conn:
        conn.execute("UPDATE memories SET confidence = 0.1 WHERE content = 'floored'")
    assert run_consolidate(conn, decay_rate=0.5, agent_id="a") == 1
    confidence = dict(rows(conn, "SELECT content, confidence FROM memories"))
    assert confidence == {"idle": 0.5, "recent": 1.0, "floored": 0.1, "other agent idle": 1.0}
    assert run_consolidate(conn, decay_rate=0.95) == 2
    confidence = dict(rows(conn, "SELECT content, confidence FROM memories"))
    assert confidence["idle"] == 0.1 and confidence["other agent idle"] == 0.1  # not 0.05


def test_consolidate_default_rate_is_five_percent(conn: apsw.Connection) -> None:
    store(conn, "a", "idle", timestamp=NOW - 30 * DAY)
    assert run_consolidate(conn) == 1
    assert rows(conn, "SELECT confidence FROM memories") == [(0.95,)]
