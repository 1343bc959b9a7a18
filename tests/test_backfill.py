"""Vectors that follow their memory: stores past the model's backlog reply without waiting, and
every memory without a vector gets one in the background, at once or at the next start."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import apsw
import msgspec
import nats
import pytest

from tests.conftest import worker_config
from tests.support import Client
from worker.app import App
from worker.recall_index.backfill import Backfill

DELAY_S = 0.2


def vector_of(text: str) -> list[float]:
    """A deterministic stand-in embedding: the text's letters folded into 8 dimensions."""
    values = [0.0] * 8
    for position, char in enumerate(text):
        values[(ord(char) + position) % 8] += 1.0
    return values


@pytest.fixture
async def embedding_service(nats_url: str) -> AsyncIterator[list[str]]:
    """A stub `embedding.generate` on the real bus that answers after 0.2 s."""
    nc = await nats.connect(nats_url)
    asked: list[str] = []
    pending: set[asyncio.Task[None]] = set()

    async def answer(msg: Any) -> None:
        await asyncio.sleep(DELAY_S)  # a model that takes its time: the behaviour tested
        text = msgspec.json.decode(msg.data)["text"]
        await msg.respond(msgspec.json.encode({"embedding": vector_of(text)}))

    async def on_request(msg: Any) -> None:
        asked.append(msgspec.json.decode(msg.data)["text"])
        task = asyncio.create_task(answer(msg))
        pending.add(task)
        task.add_done_callback(pending.discard)

    await nc.subscribe("embedding.generate", cb=on_request)
    await nc.flush()
    yield asked
    for task in list(pending):
        task.cancel()
    await nc.close()


def vector_counts(db: str) -> tuple[int, int]:
    """(memories, memories with a vector), read from the file."""
    conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute(
            "SELECT count(*), count(embedding) FROM memories WHERE embedding IS NULL "
            "OR embedding_model = 'bus'"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])
    finally:
        conn.close()


async def wait_for_vectors(db: str, expected: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while vector_counts(db) != (expected, expected):
        assert time.monotonic() < deadline, f"vectors: {vector_counts(db)} of {expected}"
        await asyncio.sleep(0.1)


async def answer_at_once(msg: Any) -> None:
    """An `embedding.generate` responder that answers at once."""
    text = msgspec.json.decode(msg.data)["text"]
    await msg.respond(msgspec.json.encode({"embedding": vector_of(text)}))


@contextlib.asynccontextmanager
async def bus_worker(nats_url: str, db: Path, **overrides: Any) -> AsyncIterator[tuple[App, Any]]:
    """A worker with the `bus` embedder whose backfill retries after 0.2 s, and a client
    connection; both closed on exit."""
    app = App(worker_config(nats_url, db, embedder="bus", **overrides))
    await app.start()
    assert app.services is not None and isinstance(app.services.backfill, Backfill)
    app.services.backfill.retry_s = 0.2
    nc = await nats.connect(nats_url)
    try:
        yield app, nc
    finally:
        await nc.close()
        await app.stop()


async def test_a_burst_of_stores_replies_before_the_model_catches_up_and_all_get_vectors(
    nats_url: str, tmp_path: Path, embedding_service: list[str]
) -> None:
    """400 stores at once against a model that takes 0.2 s per call: inline, 64 at a time,
    they would take over 1 s; past the backlog they reply without waiting, some memories are
    briefly without a vector, and the backfill gives every one its vector."""
    app = App(worker_config(nats_url, tmp_path / "memory.db", embedder="bus"))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        replies = await asyncio.gather(
            *(client.call("memory::store", {"agentId": "a", "content": f"note {i}"})
              for i in range(400))
        )  # fmt: skip
        assert all(reply.ok and reply.body["stored"] for reply in replies)
        total, with_vector = vector_counts(app.config.db_path)
        assert total == 400 and with_vector < 400
        await wait_for_vectors(app.config.db_path, 400)
        [best] = await client.recall("a", "note 7", limit=1)
        assert best["content"] == "note 7"
    finally:
        await nc.close()
        await app.stop()
    assert sorted(set(embedding_service)) == sorted(f"note {i}" for i in range(400))


async def test_memories_stored_without_vectors_get_them_at_the_next_start(
    nats_url: str, tmp_path: Path, embedding_service: list[str]
) -> None:
    """A crash between a deferred store's reply and its vector, or a database filled with the
    `none` embedder, leaves memories without vectors: the next start embeds them all."""
    db = tmp_path / "memory.db"
    first = App(worker_config(nats_url, db, embedder="none"))
    await first.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        for agent in ("a", "b"):
            for i in range(70):
                await client.store(agent, f"{agent} fact {i}")
    finally:
        await nc.close()
        await first.stop()
    assert vector_counts(str(db)) == (140, 0)
    assert embedding_service == []
    second = App(worker_config(nats_url, db, embedder="bus"))
    await second.start()
    try:
        await wait_for_vectors(str(db), 140)
    finally:
        await second.stop()


async def test_a_store_below_the_backlog_has_its_vector_when_it_replies(
    nats_url: str, tmp_path: Path, embedding_service: list[str]
) -> None:
    """Read-your-writes by meaning: a store that did not meet a backlog commits its vector with
    the memory, before the reply."""
    app = App(worker_config(nats_url, tmp_path / "memory.db", embedder="bus"))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        await Client(nc).store("a", "the only note")
        assert vector_counts(app.config.db_path) == (1, 1)
    finally:
        await nc.close()
        await app.stop()


def model_counts(db: str) -> dict[str | None, int]:
    """Memories by the model of their vector (None: no vector), read from the file."""
    conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute("SELECT embedding_model, count(*) FROM memories GROUP BY 1")
        return {model: int(count) for model, count in rows}
    finally:
        conn.close()


async def test_vectors_of_another_model_are_replaced_by_the_configured_models(
    nats_url: str, tmp_path: Path, embedding_service: list[str]
) -> None:
    """Recall compares only vectors of its own model: after a change of model, the next start
    re-embeds the memories whose vectors the old model made."""
    db = tmp_path / "memory.db"
    first = App(worker_config(nats_url, db, embedder="builtin", builtin_model="hash"))
    await first.start()
    nc = await nats.connect(nats_url)
    try:
        for i in range(20):
            await Client(nc).store("a", f"old fact {i}")
    finally:
        await nc.close()
        await first.stop()
    assert model_counts(str(db)) == {"hash-256-v1": 20}
    second = App(worker_config(nats_url, db, embedder="bus"))
    await second.start()
    try:
        deadline = time.monotonic() + 30
        while model_counts(str(db)) != {"bus": 20}:
            assert time.monotonic() < deadline, model_counts(str(db))
            await asyncio.sleep(0.1)
    finally:
        await second.stop()


async def test_a_store_whose_embedding_failed_gets_its_vector_once_the_service_answers(
    nats_url: str, tmp_path: Path
) -> None:
    """With no embedding service the store still succeeds, without a vector; the backfill
    retries and embeds it when the service comes up, with no restart and no further store."""
    async with bus_worker(nats_url, tmp_path / "memory.db") as (app, nc):
        for i in range(3):
            reply = await Client(nc).call("memory::store", {"agentId": "a", "content": f"n {i}"})
            assert reply.ok and reply.body["stored"]
        assert vector_counts(app.config.db_path) == (3, 0)
        await nc.subscribe("embedding.generate", cb=answer_at_once)
        await nc.flush()
        await wait_for_vectors(app.config.db_path, 3, timeout=10)


async def test_an_embedding_past_float32s_range_is_refused_not_stored_as_infinity(
    nats_url: str, tmp_path: Path
) -> None:
    """An embedding service that answers 1e39 (finite in JSON, infinite as float32) fails
    that embedding: the memory is stored without a vector (the backfill tries again later),
    never with an infinite or NaN one, and recall still ranks it by its words."""

    async def overflowing(msg: Any) -> None:
        await msg.respond(msgspec.json.encode({"embedding": [1e39, 1.0, 0.5, 0.25]}))

    async with bus_worker(nats_url, tmp_path / "memory.db") as (app, nc):
        await nc.subscribe("embedding.generate", cb=overflowing)
        await nc.flush()
        client = Client(nc)
        stored = await client.call("memory::store", {"agentId": "a", "content": "blue heron"})
        assert stored.ok and stored.body["stored"]
        assert vector_counts(app.config.db_path) == (1, 0)
        recalled = await client.call("memory::recall", {"agentId": "a", "query": "heron"})
        assert recalled.ok
        assert [m["content"] for m in recalled.body["memories"]] == ["blue heron"]


async def test_a_compaction_summary_whose_embedding_failed_gets_its_vector_later(
    nats_url: str, tmp_path: Path
) -> None:
    """A summary stored while the embedding service was away is queued for the backfill like a
    store is, and gets its vector when the service is back, with no restart."""
    async with bus_worker(nats_url, tmp_path / "memory.db", llm_timeout=0.5) as (app, nc):
        service = await nc.subscribe("embedding.generate", cb=answer_at_once)
        await nc.flush()
        client = Client(nc)
        for i in range(6):
            message = {"agentId": "a", "content": f"turn {i}", "sessionId": "s"}
            assert (await client.call("memory::store", message)).ok
        assert vector_counts(app.config.db_path) == (6, 6)
        await service.unsubscribe()
        await nc.flush()
        compaction = {"agentId": "a", "sessionId": "s", "threshold": 5, "keepRecent": 2}
        reply = await client.call("memory::session::compact", compaction)
        assert reply.ok and reply.body["compacted"] is True
        assert vector_counts(app.config.db_path) == (7, 6)
        await nc.subscribe("embedding.generate", cb=answer_at_once)
        await nc.flush()
        await wait_for_vectors(app.config.db_path, 7, timeout=10)
