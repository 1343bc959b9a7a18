"""The backfill's reads and writes: memories still without a vector (of the running model), and
filling theirs in. The worker's backfill (worker/recall_index/backfill.py) decides when.

It runs over every tenant's rows, but one agent at a time, and an agent is (tenant, agentId): a
batch of `a1` in one tenant never touches `a1` of another (contract section 15)."""

from __future__ import annotations

from typing import Any

import apsw
import numpy as np


def _lacking(model: str | None) -> tuple[str, tuple[str, ...]]:
    """SQL for a memory lacking a vector; with `model`, one of another model counts as lacking."""
    if model is None:
        return "embedding IS NULL", ()
    return "(embedding IS NULL OR embedding_model IS NOT ?)", (model,)


def vectorless(
    conn: apsw.Connection, tenant: str, agent_id: str, limit: int, model: str | None = None
) -> list[tuple[str, str]]:
    """(id, content) of up to `limit` of the agent's memories without a vector, newest first,
    then (with `model`) of those with a vector of another model.

    Those without one are read through the `memories_vectorless` index, only them; those of
    another model cannot be (the model is a parameter), so their query visits every row of the
    agent: the backfill asks for them only where the start found some (worker/recall_index/
    backfill.py)."""
    found = [
        (row[0], row[1])
        for row in conn.execute(
            "SELECT id, content FROM memories WHERE tenant = ? AND agent_id = ? "
            "AND embedding IS NULL ORDER BY created_at DESC LIMIT ?",
            (tenant, agent_id, limit),
        )
    ]
    if model is None or len(found) >= limit:
        return found
    return found + [
        (row[0], row[1])
        for row in conn.execute(
            "SELECT id, content FROM memories WHERE tenant = ? AND agent_id = ? "
            "AND embedding IS NOT NULL AND embedding_model IS NOT ? "
            "ORDER BY created_at DESC LIMIT ?",
            (tenant, agent_id, model, limit - len(found)),
        )
    ]


def missing_vector_agents(conn: apsw.Connection, model: str | None = None) -> list[tuple[str, str]]:
    """(tenant, agent) of every agent with a memory without a vector (of `model`)."""
    lacking, params = _lacking(model)
    return [
        (str(row[0]), str(row[1]))
        for row in conn.execute(
            f"SELECT DISTINCT tenant, agent_id FROM memories WHERE {lacking}", params
        )
    ]


def set_embeddings(
    conn: apsw.Connection,
    tenant: str,
    agent_id: str,
    model: str,
    vectors: list[tuple[str, np.ndarray[Any, np.dtype[np.float32]]]],
    replace: bool = False,
) -> None:
    """Fill in vectors for memories that still have none (with `replace`, none of `model`)."""
    lacking, params = _lacking(model if replace else None)
    conn.executemany(
        f"UPDATE memories SET embedding = ?, embedding_model = ? "
        f"WHERE id = ? AND tenant = ? AND agent_id = ? AND {lacking}",
        [
            (vector.astype(np.float32).tobytes(), model, memory_id, tenant, agent_id, *params)
            for memory_id, vector in vectors
        ],
    )
