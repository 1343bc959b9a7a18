"""Durable ingestion through the MEMORY_INGEST JetStream stream (fire-and-forget publishers)."""

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

from tests.conftest import worker_config
from worker.app import App


def memory_count(db: Path) -> int:
    conn = apsw.Connection(str(db))
    try:
        [(count,)] = conn.execute("SELECT count(*) FROM memories").fetchall()
        return int(str(count))
    finally:
        conn.close()


@contextlib.asynccontextmanager
async def ingesting(nats_url: str, db: Path) -> AsyncIterator[tuple[Any, Any]]:
    """A running worker on db, its JetStream context, and a subscription to the dead letters."""
    app = App(worker_config(nats_url, db))
    await app.start()
    nc = await nats.connect(nats_url)
    dead = await nc.subscribe("memory.deadletter.>")
    try:
        yield nc.jetstream(), dead
    finally:
        await nc.close()
        await app.stop()


async def wait_until(predicate: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached in time")


async def test_messages_published_while_the_worker_is_down_are_stored_once_it_starts(
    nats_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "memory.db"
    first = App(worker_config(nats_url, db))
    await first.start()  # creates the stream and the durable consumer
    await first.stop()
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    for index in range(300):
        body = msgspec.json.encode({"agentId": "a", "content": f"queued {index}"})
        await js.publish("memory.ingest.store", body, headers={"Nats-Msg-Id": f"m{index}"})
    # A redelivered or republished message is harmless: the same id is dropped by the stream,
    # the same content by dedup.
    await js.publish(
        "memory.ingest.store", msgspec.json.encode({"agentId": "a", "content": "queued 0"})
    )
    assert memory_count(db) == 0
    second = App(worker_config(nats_url, db))
    await second.start()
    try:
        await wait_until(lambda: memory_count(db) == 300)
        info = await js.stream_info("MEMORY_INGEST")
        assert str(info.config.retention) in ("workqueue", "RetentionPolicy.WORK_QUEUE")
        await asyncio.sleep(0.3)
        assert (await js.stream_info("MEMORY_INGEST")).state.messages == 0
        assert memory_count(db) == 300
    finally:
        await second.stop()
        await nc.close()


async def test_an_invalid_message_is_dead_lettered_with_its_error_and_not_retried(
    nats_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "memory.db"
    async with ingesting(nats_url, db) as (js, dead):
        await js.publish("memory.ingest.store", b'{"agentId": "a"}')
        await js.publish("memory.ingest.store", b"not json")
        await js.publish("memory.ingest.recall", b'{"agentId": "a"}')
        await js.publish("memory.ingest.store", b'{"agentId": "a", "content": "fine"}')
        letters = [await dead.next_msg(timeout=10) for _ in range(3)]
        headers = [letter.headers or {} for letter in letters]
        errors = sorted(header["Nats-Service-Error"] for header in headers)
        assert all(header["Nats-Service-Error-Code"] == "400" for header in headers)
        assert any("content" in error for error in errors)
        assert any("malformed JSON" in error for error in errors)
        assert {letter.subject for letter in letters} == {
            "memory.deadletter.store",
            "memory.deadletter.recall",
        }
        await wait_until(lambda: memory_count(db) == 1)
        await asyncio.sleep(0.5)
        assert (await js.stream_info("MEMORY_INGEST")).state.messages == 0
        kept = await js.stream_info("MEMORY_DEADLETTER")
        assert kept.state.messages == 3


async def test_refused_input_through_ingestion_is_dead_lettered_and_not_stored(
    nats_url: str, tmp_path: Path
) -> None:
    """A repeated key, a bad id and a lone surrogate are refused on memory.ingest.store as on
    the bus: each goes to the dead-letter stream with its 400 and message; none is stored."""
    db = tmp_path / "memory.db"
    async with ingesting(nats_url, db) as (js, dead):
        for body in (
            b'{"agentId": "B", "agentId": "A", "content": "twice"}',
            b'{"agentId": "a\\u0000", "content": "nul in the id"}',
            b'{"agentId": "a", "content": "x \\ud800"}',
        ):
            await js.publish("memory.ingest.store", body)
        letters = [await dead.next_msg(timeout=10) for _ in range(3)]
        errors = sorted((letter.headers or {})["Nats-Service-Error"] for letter in letters)
        assert all((letter.headers or {})["Nats-Service-Error-Code"] == "400" for letter in letters)
        assert any("duplicate key `agentId` at `$`" in error for error in errors), errors
        assert any("an id:" in error and "$.agentId" in error for error in errors), errors
        assert any("lone surrogate" in error and "$.content" in error for error in errors), errors
        assert memory_count(db) == 0


async def test_every_ingestible_write_is_applied_and_audited_with_source_ingest(
    nats_url: str, tmp_path: Path
) -> None:
    """kg add and delete arrive through ingestion as well as store; each is audited as such."""
    db = tmp_path / "memory.db"
    async with ingesting(nats_url, db) as (js, _):
        entity = {"agentId": "a", "entity": {"id": "alice", "relations": [
            {"target": "bob", "type": "knows"}]}}  # fmt: skip

        def audited() -> list[tuple[Any, ...]]:
            conn = apsw.Connection(str(db))
            try:
                return [tuple(r) for r in conn.execute("SELECT trigger, source FROM audit")]
            finally:
                conn.close()

        await js.publish("memory.ingest.kg.add", msgspec.json.encode(entity))
        await wait_until(lambda: len(audited()) == 1)  # ingestion keeps no order: one at a time
        await js.publish("memory.ingest.kg.delete", b'{"agentId": "a", "relations": '
                         b'[{"source": "alice", "type": "knows", "target": "bob"}]}')  # fmt: skip
        await wait_until(lambda: len(audited()) == 2)
        assert audited() == [("memory::kg::add", "ingest"), ("memory::kg::delete", "ingest")]
