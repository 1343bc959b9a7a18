"""Durable ingestion through the MEMORY_INGEST JetStream stream (fire-and-forget publishers),
exactly once for every ingestible write."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import apsw
import msgspec
import nats
import pytest

from handlers.ingested import Delivery
from tests.conftest import worker_config
from tests.support import Client, wait_until
from worker import ingest_streams
from worker.app import App
from worker.registry import INGESTED


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


async def ingest_empty(js: Any) -> bool:
    """Whether MEMORY_INGEST holds no message: a work queue drops each one the worker acked."""
    return bool((await js.stream_info("MEMORY_INGEST")).state.messages == 0)


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
        await wait_until(lambda: memory_count(db) == 300, "the 300 queued stores")
        info = await js.stream_info("MEMORY_INGEST")
        assert str(info.config.retention) in ("workqueue", "RetentionPolicy.WORK_QUEUE")
        await wait_until(lambda: ingest_empty(js), "every message acked (the republished too)")
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
        await wait_until(lambda: memory_count(db) == 1, "the valid store")
        await wait_until(lambda: ingest_empty(js), "every message acked, none redelivered")
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
        # Ingestion keeps no order: one at a time.
        await wait_until(lambda: len(audited()) == 1, "the add")
        await js.publish("memory.ingest.kg.delete", b'{"agentId": "a", "relations": '
                         b'[{"source": "alice", "type": "knows", "target": "bob"}]}')  # fmt: skip
        await wait_until(lambda: len(audited()) == 2, "the delete")
        assert audited() == [("memory::kg::add", "ingest"), ("memory::kg::delete", "ingest")]


def tables(db: Path, leave_out: frozenset[str] = frozenset()) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but those left out, in a stable order."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = [str(name) for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]  # fmt: skip
        return {
            name: sorted((tuple(row) for row in conn.execute(f'SELECT * FROM "{name}"')), key=repr)
            for name in names
            if name not in leave_out
        }
    finally:
        conn.close()


def one(db: Path, sql: str) -> Any:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute(sql).fetchall()[0][0]
    finally:
        conn.close()


async def test_a_redelivered_message_changes_nothing_for_every_ingestible_write(
    nats_url: str, tmp_path: Path
) -> None:
    """Each ingestible trigger, handled as an ingested message and then as the same message
    redelivered: the second is `already_applied` and every table stays as the first left it."""
    db = tmp_path / "memory.db"
    app = App(worker_config(nats_url, db))
    await app.start()
    nc = await nats.connect(nats_url)
    client = Client(nc)
    assert app.dispatcher is not None
    dispatcher = app.dispatcher
    driven: set[str] = set()

    async def twice(verb: str, body: dict[str, Any]) -> None:
        trigger = INGESTED[verb]
        delivery = Delivery("MEMORY_INGEST@1", len(driven) + 1, 0)
        data = msgspec.json.encode(body)
        before = tables(db, frozenset({"ingested"}))
        first = await dispatcher.handle(trigger, data, source="ingest", message=delivery)
        assert first.error is None, (verb, first)
        assert tables(db, frozenset({"ingested"})) != before, f"{verb} changed nothing"
        applied = tables(db)
        again = await dispatcher.handle(trigger, data, source="ingest", message=delivery)
        assert again.error is not None and again.error.code == "already_applied", (verb, again)
        assert tables(db) == applied, f"{verb} applied twice"
        driven.add(trigger)

    try:
        await twice("store", {"agentId": "a", "content": "the first note"})
        memory_id = one(db, "SELECT id FROM memories")
        entity = {"id": "alice", "relations": [{"target": "bob", "type": "knows"}]}
        await twice("kg.add", {"agentId": "a", "entity": entity})
        relation = {"source": "alice", "type": "knows", "target": "bob"}
        await twice("kg.delete", {"agentId": "a", "relations": [relation]})
        await twice("forget", {"agentId": "a", "ids": [memory_id]})
        await twice("unforget", {"agentId": "a", "ids": [memory_id]})
        await twice("update", {"agentId": "a", "id": memory_id, "content": "the changed note"})
        await twice("toggle", {"agentId": "b", "enabled": False})
        await twice("kv.set", {"agentId": "a", "key": "k", "value": 1})
        await twice("kv.delete", {"agentId": "a", "key": "k"})
        await twice("task.post", {"title": "a task", "createdBy": "a"})
        task = await client.ok("memory::task::claim", {"agentId": "a"})
        done = {"agentId": "a", "taskId": task["task"]["taskId"], "result": "done"}
        await twice("task.complete", done)
        usage = {"agentId": "a", "model": "m", "promptTokens": 3, "completionTokens": 4}
        await twice("usage.record", usage)
        said = {"agentId": "a", "userId": "u", "channel": "web", "role": "user", "content": "hi"}
        await twice("canonical.append", said)
        await twice("delete", {"agentId": "a", "ids": [memory_id]})
        fact = {"agentId": "a", "subject": "user", "predicate": "speaks", "object": "Welsh"}
        await twice("fact.assert", fact | {"validFrom": 1})
        await twice("fact.end", {"agentId": "a", "subject": "user", "predicate": "speaks"})
        fact_id = one(db, "SELECT id FROM facts")
        await twice("fact.retract", {"agentId": "a", "ids": [fact_id]})
        await client.store("c", "to be erased")
        await twice("erase", {"agentId": "c", "confirm": "c"})
        assert driven == set(INGESTED.values()), "an ingestible write is not driven here"
    finally:
        await nc.close()
        await app.stop()


# The worker as a process with a short ack wait, so that what a killed worker had delivered
# comes again within seconds rather than a minute.
WORKER = (
    "import runpy, sys; import worker.ingest_streams as s; s.ACK_WAIT_S = {ack_wait}; "
    "sys.argv = ['worker', 'run']; runpy.run_module('worker', run_name='__main__')"
)
ACK_WAIT_S = 3.0
USAGE, TASKS, APPENDS, KEY_SETS = 600, 400, 600, 300


def worker_process(nats_url: str, db: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "MEMORY_WORKER_NATS_URL": nats_url,
        "MEMORY_WORKER_DB_PATH": str(db),
        "MEMORY_WORKER_EMBEDDER": "none",
        "MEMORY_WORKER_LOG_LEVEL": "error",
    }
    return subprocess.Popen([sys.executable, "-c", WORKER.format(ack_wait=ACK_WAIT_S)], env=env)


def applied_so_far(db: Path) -> int:
    return int(one(db, "SELECT (SELECT count(*) FROM usage) + (SELECT count(*) FROM tasks)"))


async def kill_right_after_a_commit(process: subprocess.Popen[bytes], db: Path, past: int) -> None:
    """SIGKILL the worker the moment it has committed a transaction that takes what it applied
    past `past`: then the messages of that transaction are the likeliest not acknowledged yet.
    (`data_version` changes when another connection commits.)"""
    deadline = time.monotonic() + 120
    while not db.exists() or applied_so_far_or_none(db) is None:
        assert time.monotonic() < deadline and process.poll() is None, "the worker never began"
        await asyncio.sleep(0.01)
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        seen = conn.pragma("data_version")
        while True:
            assert time.monotonic() < deadline and process.poll() is None, "no progress"
            version = conn.pragma("data_version")
            if version != seen:
                seen = version
                if applied_so_far(db) >= past:
                    process.send_signal(signal.SIGKILL)
                    process.wait(timeout=10)
                    return
            await asyncio.sleep(0.001)
    finally:
        conn.close()


def applied_so_far_or_none(db: Path) -> int | None:
    try:
        return applied_so_far(db)
    except apsw.Error:  # not migrated yet
        return None


async def test_a_backlog_drained_across_a_kill_9_applies_every_message_exactly_once(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Usage records, task posts, canonical appends and key sets published while no worker
    runs; the worker is killed with SIGKILL right after a commit, a third and two thirds of
    the way through, and started again each time. Every
    count is exact: what was committed and not yet acknowledged when it died came again and
    changed nothing."""
    db = tmp_path / "memory.db"
    monkeypatch.setattr(ingest_streams, "ACK_WAIT_S", ACK_WAIT_S)
    first = App(worker_config(nats_url, db))
    await first.start()  # the stream and its consumer
    await first.stop()
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    bodies = (
        [("usage.record", {"agentId": "u", "model": "m", "promptTokens": 1,
                           "completionTokens": 2}) for _ in range(USAGE)]
        + [("task.post", {"title": f"task {n}", "createdBy": "t"}) for n in range(TASKS)]
        + [("canonical.append", {"agentId": "c", "userId": "u", "channel": "web",
                                 "role": "user", "content": f"turn {n}"}) for n in range(APPENDS)]
        + [("kv.set", {"agentId": "k", "key": "count", "value": n}) for n in range(KEY_SETS)]
    )  # fmt: skip
    order = sorted(range(len(bodies)), key=lambda n: (n * 7919) % len(bodies))  # interleaved
    for n in order:
        verb, body = bodies[n]
        await js.publish(f"memory.ingest.{verb}", msgspec.json.encode(body))
    process = worker_process(nats_url, db)
    try:
        for third in (1, 2):  # killed twice: a third and two thirds of the way
            await kill_right_after_a_commit(process, db, (USAGE + TASKS) * third // 3)
            assert applied_so_far(db) < USAGE + TASKS, "the kill came after the drain"
            process = worker_process(nats_url, db)
        deadline = time.monotonic() + 180
        while True:
            info = await js.consumer_info("MEMORY_INGEST", "memory-worker")
            if info.num_pending == 0 and info.num_ack_pending == 0:
                break
            assert time.monotonic() < deadline and process.poll() is None, "the drain stalled"
            await asyncio.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        await nc.close()
    assert one(db, "SELECT count(*) FROM usage") == USAGE
    assert one(db, "SELECT sum(events) FROM usage_days") == USAGE
    assert one(db, "SELECT sum(prompt_tokens) FROM usage") == USAGE
    assert one(db, "SELECT count(*) FROM tasks") == TASKS
    assert one(db, "SELECT message_count FROM canonical_sessions") == APPENDS
    assert one(db, "SELECT version FROM kv WHERE agent_id = 'k'") == KEY_SETS
    assert one(db, "SELECT count(*) FROM audit WHERE trigger = 'memory::usage::record'") == USAGE


async def test_a_redelivered_message_forwarded_to_another_shards_partition_changes_nothing(
    nats_url: str, tmp_path: Path
) -> None:
    """Sharded, the message's key travels with the request to the partition's owner on another
    shard: the redelivery comes back `already_applied` and the record is there once."""
    from tests.test_shards import PARTITIONS, shards
    from worker.shards.partition import partition_of

    async with shards(nats_url, tmp_path, "s1", "s2") as (s1, s2):
        agent = next(
            f"agent-{n}"
            for n in range(1000)
            if s2.owned(partition_of("", f"agent-{n}", PARTITIONS)) is not None
        )
        assert s1.dispatcher is not None
        usage = {"agentId": agent, "model": "m", "promptTokens": 1, "completionTokens": 1}
        data = msgspec.json.encode(usage)
        delivery = Delivery("MEMORY_INGEST@1", 7, 0)
        trigger = "memory::usage::record"
        first = await s1.dispatcher.handle(trigger, data, source="ingest", message=delivery)
        assert first.error is None, first
        again = await s1.dispatcher.handle(trigger, data, source="ingest", message=delivery)
        assert again.error is not None and again.error.code == "already_applied", again
        nc = await nats.connect(nats_url)
        try:
            query = {"agentId": agent, "groupBy": "model"}
            totals = await Client(nc).ok("memory::usage::query", query)
        finally:
            await nc.close()
        assert totals["total"]["events"] == 1


async def test_the_keys_of_messages_below_the_ack_floor_go_with_the_next_write(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table of applied messages stays small: once every message up to a sequence is
    acknowledged (the consumer's ack floor), the next write of that stream removes their keys."""
    monkeypatch.setattr(ingest_streams, "FLOOR_S", 0.0)  # the floor read for every batch
    db = tmp_path / "memory.db"
    async with ingesting(nats_url, db) as (js, _):
        usage = {"agentId": "a", "model": "m", "promptTokens": 1, "completionTokens": 1}
        for _ in range(50):
            await js.publish("memory.ingest.usage.record", msgspec.json.encode(usage))
        deadline = time.monotonic() + 20
        while (await js.consumer_info("MEMORY_INGEST", "memory-worker")).ack_floor.stream_seq < 50:
            assert time.monotonic() < deadline, "the 50 were never all acknowledged"
            await asyncio.sleep(0.05)
        assert 0 < one(db, "SELECT count(*) FROM ingested") <= 50
        await js.publish("memory.ingest.usage.record", msgspec.json.encode(usage))
        await wait_until(lambda: one(db, "SELECT count(*) FROM usage") == 51, "the 51st record")
        assert one(db, "SELECT seq FROM ingested") == 51
