"""`formula` recall is the exact top k at 50 000 vectors and more (where the vector index's
`auto` used to switch to the sign codes), unless the operator names an approximate index.

The agent's vectors are 8-d and made so that the codes misjudge them: 50 000 decoys whose every
component is positive (the codes put them next to the all-positive query) but whose cosine is
low, and ten targets close to the query with two slightly negative components. A shortlist
picked with the codes holds decoys only; the full scan ranks the targets first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import nats
import numpy as np
import numpy.typing as npt
import pytest

from handlers.recall.rank import rank
from handlers.recall.vector_index import AUTO_THRESHOLD, VectorIndexSetting, chosen
from schema.memory import RecallRequest
from tests.conftest import worker_config
from tests.support import Client
from worker.app import App
from worker.config import load_config
from worker.db import migrate, open_db
from worker.recall_index.agent_index import AgentIndex, Row

DIM = 8
DECOYS = AUTO_THRESHOLD
TARGETS = 10
FUTURE = 4_000_000_000_000  # a timestamp after now counts as age 0: recency is exactly 1
QUERY = np.full(DIM, 1 / np.sqrt(DIM), dtype=np.float32)


def agent_vectors() -> tuple[list[str], npt.NDArray[np.float32], npt.NDArray[np.float64]]:
    """Ids, unit vectors and importances of the decoys then the targets."""
    rng = np.random.default_rng(31)
    decoys = rng.uniform(0.01, 0.05, (DECOYS, DIM))
    decoys[np.arange(DECOYS), rng.integers(0, DIM, DECOYS)] = 1.0
    targets = rng.uniform(0.8, 1.0, (TARGETS, DIM))
    targets[:, -2:] = -rng.uniform(0.01, 0.05, (TARGETS, 2))
    vectors = np.concatenate([decoys, targets])
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    ids = [f"d{n:06d}" for n in range(DECOYS)] + [f"t{n:02d}" for n in range(TARGETS)]
    return ids, vectors, rng.random(DECOYS + TARGETS)


def full_scan(limit: int) -> list[tuple[str, float]]:
    """The contract's score of every memory (no keyword matches, recency 1, confidence 1)."""
    ids, vectors, importance = agent_vectors()
    cosine = vectors.astype(np.float64) @ QUERY.astype(np.float64)
    score = 0.50 * cosine + 0.10 + 0.10 * importance + 0.05
    order = np.argsort(-score, kind="stable")[:limit]
    return [(ids[at], float(score[at])) for at in order]


def rows() -> list[Row]:
    ids, vectors, importance = agent_vectors()
    return [
        (memory_id, "user", None, FUTURE, float(importance[n]), 1.0, vectors[n].tobytes(), "bus",
         f"note {n}", 0, None, 0, None, "note", "internal", None)
        for n, memory_id in enumerate(ids)
    ]  # fmt: skip


def fill(path: Path) -> None:
    """The agent's rows written straight into the file (as bench --scale does)."""
    conn = open_db(path, synchronous="normal")
    migrate(conn)
    with conn:
        conn.executemany(
            "INSERT INTO memories (id, tenant, agent_id, role, content, hash, importance, "
            "confidence, last_accessed, timestamp, embedding, embedding_model, created_at) "
            "VALUES (?, '', 'a', 'user', ?, ?, ?, 1.0, 1, ?, ?, 'bus', 1)",
            ((r[0], r[8], f"h{r[0]}", r[4], r[3], r[6]) for r in rows()),
        )
    conn.close()


def ranked(setting: VectorIndexSetting, index: AgentIndex, limit: int) -> list[tuple[str, float]]:
    req = msgspec.convert({"agentId": "a", "query": "zzz", "limit": limit}, RecallRequest)
    return rank(
        index.columns(), req, now=1, query_vector=("bus", QUERY),
        vector_index=chosen(setting, "formula", 1000),
    )  # fmt: skip


def test_formula_with_the_default_vector_index_is_the_full_scan_and_approximate_is_not() -> None:
    """In process, over an index that keeps the codes: the default setting (`auto`) gives the
    full scan's top 10, ids and scores; `approximate` and `codes`, named by the operator, rank
    a shortlist of decoys (so the data tells them apart)."""
    index = AgentIndex(anchor_ms=1, capacity=DECOYS + TARGETS, codes=True)
    index.load(rows())
    exact = full_scan(10)
    assert sorted(memory_id for memory_id, _ in exact) == [f"t{n:02d}" for n in range(TARGETS)]
    found = ranked(load_config({}).vector_index, index, 10)
    assert [m for m, _ in found] == [m for m, _ in exact]
    assert [s for _, s in found] == pytest.approx([s for _, s in exact], abs=1e-6)
    for setting in ("approximate", "codes"):
        assert not any(m.startswith("t") for m, _ in ranked(setting, index, 10))
    assert chosen("auto", "expanded", 1000).applies(AUTO_THRESHOLD)
    assert load_config({"MEMORY_WORKER_VECTOR_INDEX": "approximate"}).vector_index == "approximate"


async def test_formula_recall_over_the_bus_at_50_000_vectors_is_the_full_scans_top_k(
    nats_url: str, tmp_path: Path
) -> None:
    """A worker with MEMORY_WORKER_RECALL=formula and the vector index left at its default
    recalls the full scan's top 20, ids in order and scores, from an agent of 50 010 vectors."""
    path = tmp_path / "memory.db"
    fill(path)
    nc = await nats.connect(nats_url)

    async def embed(msg: Any) -> None:
        await msg.respond(msgspec.json.encode({"embedding": QUERY.tolist()}))

    await nc.subscribe("embedding.generate", cb=embed)
    await nc.flush()
    app = App(worker_config(nats_url, path, embedder="bus", index_persist=False, recall="formula"))
    assert app.config.vector_index == "auto"
    await app.start()
    try:
        # The first recall loads the 50 010 rows: on a loaded machine (the suite on several
        # processes) that took more than the client's default 10 s, which is not what is tested.
        reply = await Client(nc).call(
            "memory::recall", {"agentId": "a", "query": "zzz", "limit": 20}, timeout=60
        )
        assert reply.ok, reply
        found = reply.body["memories"]
    finally:
        await app.stop()
        await nc.close()
    exact = full_scan(20)
    assert [m["id"] for m in found] == [memory_id for memory_id, _ in exact]
    assert [m["score"] for m in found] == pytest.approx([s for _, s in exact], abs=1e-6)
