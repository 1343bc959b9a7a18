"""Maintenance decided once and applied in chunks: removing a memory from its sessions is an
index lookup, a decision stays exact when applied later, and an interrupted job can finish."""

from __future__ import annotations

import apsw

from handlers.consolidate import apply_decay, plan_decay
from handlers.evict import apply_eviction, evict, plan_eviction
from handlers.session_refs import REMOVE_FROM_SESSIONS
from schema.memory import ConsolidateRequest, EvictRequest
from tests.handlers.support import DAY, NOW


def seed(conn: apsw.Connection, count: int, *, agent: str = "a", session: bool = True) -> None:
    """`count` memories, a week old and unimportant, spread over ten sessions."""
    with conn:
        conn.executemany(
            "INSERT INTO memories (id, agent_id, role, content, hash, session_id, importance, "
            "confidence, last_accessed, timestamp, created_at) "
            "VALUES (?, ?, 'user', ?, ?, ?, 0.1, 0.5, ?, ?, ?)",
            [
                (f"m{n:06d}", agent, f"text {n}", f"h{n}", f"s{n % 10}" if session else None,
                 NOW - 8 * DAY, NOW - 40 * DAY, NOW - 40 * DAY)
                for n in range(count)
            ],
        )  # fmt: skip
        if session:
            conn.executemany(
                "INSERT INTO sessions (agent_id, id, created_at, updated_at) VALUES (?, ?, 0, 0)",
                [(agent, f"s{n}") for n in range(10)],
            )
            conn.executemany(
                "INSERT INTO session_messages (agent_id, session_id, position, memory_id, role, "
                "timestamp) VALUES (?, ?, ?, ?, 'user', 0)",
                [(agent, f"s{n % 10}", n // 10 + 1, f"m{n:06d}") for n in range(count)],
            )


def test_removing_memories_from_sessions_looks_them_up_by_memory_not_by_scanning_the_agent(
    conn: apsw.Connection,
) -> None:
    """The cause of evictions that grew quadratically with session size: SQLite planned the
    delete on the primary key's agent prefix, scanning all of an agent's messages per memory."""
    seed(conn, 100)
    plan = " ".join(
        str(row[3])
        for row in conn.execute("EXPLAIN QUERY PLAN " + REMOVE_FROM_SESSIONS, ("", "a", "m000001"))
    )
    assert "session_messages_by_memory" in plan, plan


def test_a_memory_rescored_after_the_decision_is_not_evicted_and_not_counted(
    conn: apsw.Connection,
) -> None:
    """apply deletes a doomed memory only while it still has the scores it was chosen by."""
    seed(conn, 3)
    plan = plan_eviction(conn, EvictRequest(agent_id="a"), now=NOW)
    assert plan.counts()["stale"] == 3
    with conn:
        conn.execute("UPDATE memories SET importance = 0.9 WHERE id = 'm000001'")
        counts = apply_eviction(conn, plan.doomed)
    assert counts == {"purged": 0, "stale": 2, "low_confidence": 0, "over_cap": 0}
    remaining = conn.execute("SELECT id FROM memories").fetchall()
    assert remaining == [("m000001",)]
    assert conn.execute("SELECT memory_id FROM session_messages").fetchall() == [("m000001",)]


def test_an_eviction_interrupted_after_one_chunk_is_finished_by_evicting_again(
    conn: apsw.Connection,
) -> None:
    """Chunks commit one by one; evicting again removes exactly what the first run left."""
    seed(conn, 30)
    request = EvictRequest(agent_id="a", cap=5, max_age=50 * DAY)
    plan = plan_eviction(conn, request, now=NOW)
    assert plan.counts() == {"purged": 0, "stale": 0, "low_confidence": 0, "over_cap": 25}
    with conn:
        apply_eviction(conn, plan.doomed[:10])  # then the worker died
    with conn:
        reply = evict(conn, request, now=NOW)
    assert reply.over_cap == 15
    assert conn.execute("SELECT count(*) FROM memories").fetchall() == [(5,)]
    assert conn.execute("SELECT count(*) FROM session_messages").fetchall() == [(5,)]


def test_decay_in_ranges_decays_every_matching_memory_once_and_none_stored_after(
    conn: apsw.Connection,
) -> None:
    seed(conn, 25, session=False)
    plan = plan_decay(conn, ConsolidateRequest(decay_rate=0.5), now=NOW, chunk=4)
    assert len(plan.ranges) == 7
    with conn:  # a memory stored between the decision and the last range: just accessed
        conn.execute(
            "INSERT INTO memories (id, agent_id, role, content, hash, importance, confidence, "
            "last_accessed, timestamp, created_at) "
            "VALUES ('late', 'a', 'user', 'late', 'hl', 0.5, 0.5, ?, ?, ?)",
            (NOW, NOW, NOW),
        )
    decayed = 0
    for lo, hi in plan.ranges:
        with conn:
            decayed += apply_decay(conn, plan, lo, hi)
    assert decayed == 25
    confidences = {
        str(row[0]): row[1] for row in conn.execute("SELECT id, confidence FROM memories")
    }
    assert confidences.pop("late") == 0.5
    assert set(confidences.values()) == {0.25}
