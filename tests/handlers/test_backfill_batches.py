"""The backfill's batch reads only the agent's memories without a vector, not every row of the
agent: at a million memories a batch that visited them all took about a second and a half, one
batch after another while stores outran the embedder, and recalls slowed for as long."""

from __future__ import annotations

import apsw
import numpy as np

from handlers.backfill import vectorless

ROWS = 5000
VECTOR = np.ones(384, dtype=np.float32).tobytes()


def agent_with_three_vectorless(conn: apsw.Connection) -> list[str]:
    """Agent `a` of ROWS memories with a vector of model `m`, one of model `old`, and three
    without a vector (created at 10, 2000 and 4000: the newest last); those three's ids, newest
    first."""
    lacking = {10: "late-10", 2000: "late-2000", 4000: "late-4000"}
    with conn:
        conn.executemany(
            "INSERT INTO memories (id, tenant, agent_id, role, content, hash, importance, "
            "confidence, last_accessed, timestamp, created_at, embedding, embedding_model) "
            "VALUES (?, '', 'a', 'user', ?, ?, 0.5, 1.0, 1, 1, ?, ?, ?)",
            [
                (
                    lacking.get(n, f"m{n}"), f"text {n}", f"hash {n}", n,
                    None if n in lacking else VECTOR,
                    None if n in lacking else ("old" if n == 7 else "m"),
                )
                for n in range(ROWS)
            ],
        )  # fmt: skip
    return ["late-4000", "late-2000", "late-10"]


def steps(conn: apsw.Connection, call: object) -> tuple[object, int]:
    """What `call()` returns, and how many SQLite VM instructions it ran."""
    counted = [0]

    def count() -> bool:
        counted[0] += 1
        return False

    conn.set_progress_handler(count, 1)
    try:
        result = call()  # type: ignore[operator]
    finally:
        conn.set_progress_handler(None)
    return result, counted[0]


def test_a_backfill_batch_reads_only_the_memories_without_a_vector(conn: apsw.Connection) -> None:
    """Three memories of 5000 lack a vector: the batch returns them newest first, in fewer
    SQLite instructions than one per row of the agent (before: a visit of every row, then a
    sort)."""
    wanted = agent_with_three_vectorless(conn)
    found, taken = steps(conn, lambda: vectorless(conn, "", "a", 16))
    assert [memory_id for memory_id, _ in found] == wanted  # type: ignore[attr-defined]
    assert taken < ROWS // 10


def test_with_a_model_the_batch_adds_the_vectors_of_another_model_after_the_missing_ones(
    conn: apsw.Connection,
) -> None:
    wanted = agent_with_three_vectorless(conn)
    found = vectorless(conn, "", "a", 16, "m")
    assert [memory_id for memory_id, _ in found] == [*wanted, "m7"]
    assert [memory_id for memory_id, _ in vectorless(conn, "", "a", 2, "m")] == wanted[:2]
