"""Sharded mode on a loopback 3-node cluster with shard processes (contract section 16): kill -9
of the node leading the lease bucket and of one shard under load loses no acknowledged write and
the dead shard's agents answer again within two lease TTLs; a paused owner that another shard
replaced has its writes refused when it wakes, and nothing diverges."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import apsw
import nats
import nats.errors
import nats.js.errors
import pytest

from tests.cluster import Cluster, running_cluster
from tests.shard_processes import (
    Shard,
    kill_shard,
    logged,
    pause_shard,
    resume_shard,
    start_shard,
    stop_shard,
)
from tests.support import Client, wait_until
from worker.shards.lease import BUCKET
from worker.shards.log import stream_name
from worker.shards.partition import partition_of

pytestmark = pytest.mark.slow
PARTITIONS = 8
TTL = 10.0
AGENTS = [f"agent-{n}" for n in range(24)]


@asynccontextmanager
async def sharded(tmp_path: Path, names: tuple[str, ...]) -> AsyncIterator[tuple[Cluster, Any]]:
    async with running_cluster(tmp_path, PARTITIONS) as cluster:
        shards = [Shard(name, tmp_path) for name in names]
        for shard in shards:
            start_shard(cluster, shard, TTL)
        nc = await nats.connect(
            cluster.urls.split(","), max_reconnect_attempts=-1, reconnect_time_wait=0.2
        )
        try:
            await every_agent_answers(Client(nc), timeout=60)
            yield cluster, (nc, shards)
        finally:
            await nc.close()
            for shard in shards:
                stop_shard(shard)


def add(agent: str, entity: str) -> dict[str, Any]:
    return {"agentId": agent, "entity": {"id": entity, "type": "note"}}


async def every_agent_answers(client: Client, timeout: float) -> float:
    """Seconds until a recall of every agent succeeds."""
    started = time.monotonic()
    pending = set(AGENTS)

    async def all_answered() -> bool:
        for agent in sorted(pending):
            try:
                reply = await client.call(
                    "memory::recall", {"agentId": agent, "query": "note"}, timeout=2
                )
            except (nats.errors.Error, TimeoutError):  # its partition is moving: again
                continue
            if reply.ok:
                pending.discard(agent)
        return not pending

    await wait_until(all_answered, f"a recall of every agent answered ({pending} not)", timeout)
    return time.monotonic() - started


async def load(
    client: Client, acknowledged: dict[tuple[str, str], str], stop: asyncio.Event
) -> None:
    """Stores, one after another: (agent, content) -> the id each acknowledged store got."""
    n = 0
    while not stop.is_set():
        agent = AGENTS[n % len(AGENTS)]
        content = f"note {n}"
        n += 1
        try:
            reply = await client.call(
                "memory::store", {"agentId": agent, "content": content}, timeout=5
            )
        except (nats.errors.Error, TimeoutError):  # not acknowledged: nothing to check
            continue
        if reply.ok:
            acknowledged[agent, content] = reply.body["id"]


async def lease_holder(js: Any, partition: int) -> str | None:
    kv = await js.key_value(BUCKET)
    try:
        entry = await kv.get(f"lease.{partition}")
    except nats.js.errors.KeyNotFoundError:
        return None
    return None if not entry.value else str(entry.value.decode().split('"')[3])


async def test_kill_9_of_the_lease_leader_and_a_shard_under_load_loses_no_acknowledged_store(
    tmp_path: Path,
) -> None:
    async with sharded(tmp_path, ("s1", "s2", "s3")) as (cluster, (nc, shards)):
        client = Client(nc)
        acknowledged: dict[tuple[str, str], str] = {}
        stop = asyncio.Event()
        writer = asyncio.create_task(load(client, acknowledged, stop))
        await wait_until(lambda: len(acknowledged) >= 30, "30 stores before the kills")
        js = nc.jetstream()
        held = [await lease_holder(js, k) for k in range(PARTITIONS)]
        victim = max(shards, key=lambda shard: held.count(shard.name))
        assert held.count(victim.name) > 0  # it owns partitions: their agents must move
        info = await js.stream_info(f"KV_{BUCKET}")
        assert info.cluster is not None
        cluster.kill(cluster.node(str(info.cluster.leader)))
        kill_shard(victim)
        back = await every_agent_answers(client, timeout=6 * TTL)
        after = len(acknowledged)
        await wait_until(lambda: len(acknowledged) >= after + 30, "30 stores after the failover")
        stop.set()
        await writer
        assert len(acknowledged) > 50
        missing = []
        for (agent, content), memory_id in acknowledged.items():  # re-stored: the same id
            reply = await client.call("memory::store", {"agentId": agent, "content": content})
            if not (reply.ok and reply.body["id"] == memory_id and reply.body["deduplicated"]):
                missing.append((agent, content))
        assert missing == [], f"{len(missing)} of {len(acknowledged)} lost or changed"
        assert back <= 2 * TTL, back


async def test_a_paused_owner_replaced_by_another_shard_has_its_writes_refused_and_steps_down(
    tmp_path: Path,
) -> None:
    """SIGSTOP of a partition's owner: another shard takes the lease over and serves. Writes
    sent meanwhile that the queue group gave the paused shard wait in its subscription; when it
    wakes it still believes it owns the partition and runs them, and they are refused (its lease
    is stale, and the log moved on past the sequence it expects): it steps down, the new owner
    never has a write refused, and both copies end the same."""
    async with sharded(tmp_path, ("s1", "s2")) as (_, (nc, shards)):
        client = Client(nc)
        js = nc.jetstream()
        # The partition a woken shard's renewal round reaches last: the held writes meet an
        # owner that has not yet learnt from the bucket that its lease is gone.
        agent = max(AGENTS, key=lambda name: partition_of("", name, PARTITIONS))
        partition = partition_of("", agent, PARTITIONS)
        owner_name = await lease_holder(js, partition)
        owner = next(shard for shard in shards if shard.name == owner_name)
        other = next(shard for shard in shards if shard is not owner)
        assert (await client.call("memory::kg::add", add(agent, "before"))).ok
        pause_shard(owner)

        async def taken_over() -> bool:
            return bool(await lease_holder(js, partition) == other.name)

        await wait_until(taken_over, f"{other.name} holding the lease", 6 * TTL, 0.2)
        await writes_left_with_the_paused_shard(client, agent, count=3)
        for n in range(5):  # through the new owner; the paused shard still holds its
            await until_ok(client, add(agent, f"during{n}"))  # subscriptions: retried
        resume_shard(owner)

        def refused(shard: Shard) -> list[dict[str, Any]]:
            return [e for e in logged(shard, "shard.write_refused") if e["partition"] == partition]

        await wait_until(
            lambda: refused(owner), f"the woken {owner.name} refusing the writes it held", 2 * TTL
        )
        for n in range(20):  # some reach the woken shard first: forwarded or retried
            await until_ok(client, add(agent, f"after{n}"))
        files = [tmp_path / shard.name / f"p{partition:04d}.db" for shard in shards]

        async def same_copies() -> bool:  # the woken shard follows the log again
            last = int((await js.stream_info(stream_name(partition))).state.last_seq)
            return all(path.exists() and applied_in(path, partition) == last for path in files)

        await wait_until(same_copies, "both copies applied the partition's whole log", 4 * TTL)
        contents = [entities_in(path, agent) for path in files]
        assert contents[0] == contents[1], contents
        assert {"before", "during0", "after19"} <= set(contents[0])
        assert refused(other) == []  # no write of the paused shard got into the log
        stepped_down = [e for e in logged(owner, "shard.steps_down") if e["partition"] == partition]
        assert stepped_down, f"{owner.name} never stepped down from partition {partition}"


async def writes_left_with_the_paused_shard(client: Client, agent: str, count: int) -> None:
    """Send writes until `count` of them got no answer: the queue group gave those to the
    paused shard, whose subscription holds them until it wakes."""
    unanswered = sent = 0
    while unanswered < count:
        assert sent < 10 * count, f"only {unanswered} of {sent} writes were left unanswered"
        sent += 1
        try:
            await client.call("memory::kg::add", add(agent, f"held{sent}"), timeout=1.0)
        except nats.errors.TimeoutError:
            unanswered += 1


async def until_ok(client: Client, payload: dict[str, Any], timeout: float = 30.0) -> None:
    """A client that retries what timed out, as a client of a paused shard must."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = await client.call("memory::kg::add", payload, timeout=1.5)
        except nats.errors.TimeoutError:  # it went to the paused shard
            reply = None
        if reply is not None and reply.ok:
            return
        assert time.monotonic() < deadline, reply
        await asyncio.sleep(0.1)


def applied_in(path: Path, partition: int) -> int:
    """The log sequence a partition's file has committed (its shard_log row)."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute("SELECT applied FROM shard_log WHERE partition = ?", (partition,))
        return int(rows.get or 0)
    finally:
        conn.close()


def entities_in(path: Path, agent: str) -> list[str]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [
            str(row[0])
            for row in conn.execute(
                "SELECT id FROM kg_entities WHERE agent_id = ? ORDER BY id", (agent,)
            )
        ]
    finally:
        conn.close()
