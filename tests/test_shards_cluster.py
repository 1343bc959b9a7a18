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
import pytest

from tests.cluster import Cluster, running_cluster
from tests.shard_processes import (
    Shard,
    kill_shard,
    pause_shard,
    resume_shard,
    start_shard,
    stop_shard,
)
from tests.support import Client
from worker.shards.lease import BUCKET
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
    while pending:
        assert time.monotonic() - started < timeout, sorted(pending)
        for agent in sorted(pending):
            try:
                reply = await client.call(
                    "memory::recall", {"agentId": agent, "query": "note"}, timeout=2
                )
            except Exception:
                continue
            if reply.ok:
                pending.discard(agent)
        if pending:
            await asyncio.sleep(0.1)
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
        except Exception:
            continue
        if reply.ok:
            acknowledged[agent, content] = reply.body["id"]


async def lease_holder(js: Any, partition: int) -> str | None:
    kv = await js.key_value(BUCKET)
    try:
        entry = await kv.get(f"lease.{partition}")
    except Exception:
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
        await asyncio.sleep(2)
        js = nc.jetstream()
        held = [await lease_holder(js, k) for k in range(PARTITIONS)]
        victim = max(shards, key=lambda shard: held.count(shard.name))
        assert held.count(victim.name) > 0  # it owns partitions: their agents must move
        info = await js.stream_info(f"KV_{BUCKET}")
        assert info.cluster is not None
        cluster.kill(cluster.node(str(info.cluster.leader)))
        kill_shard(victim)
        back = await every_agent_answers(client, timeout=6 * TTL)
        await asyncio.sleep(2)
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
    async with sharded(tmp_path, ("s1", "s2")) as (_, (nc, shards)):
        client = Client(nc)
        js = nc.jetstream()
        agent = AGENTS[0]
        partition = partition_of("", agent, PARTITIONS)
        owner_name = await lease_holder(js, partition)
        owner = next(shard for shard in shards if shard.name == owner_name)
        other = next(shard for shard in shards if shard is not owner)
        assert (await client.call("memory::kg::add", add(agent, "before"))).ok
        pause_shard(owner)
        deadline = time.monotonic() + 6 * TTL
        while await lease_holder(js, partition) != other.name:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
        for n in range(5):  # through the new owner; the paused shard still holds its
            await until_ok(client, add(agent, f"during{n}"))  # subscriptions: retried
        resume_shard(owner)
        for n in range(20):  # some reach the woken shard first: refused there, retried
            await until_ok(client, add(agent, f"after{n}"))
        await asyncio.sleep(2 * TTL)  # the woken shard steps down and follows as standby
        files = [tmp_path / shard.name / f"p{partition:04d}.db" for shard in shards]
        contents = [entities_in(path, agent) for path in files if path.exists()]
        assert len(contents) == 2 and contents[0] == contents[1], contents
        assert {"before", "during0", "after19"} <= set(contents[0])


async def until_ok(client: Client, payload: dict[str, Any], timeout: float = 30.0) -> None:
    """A client that retries what timed out, as a client of a paused shard must."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = await client.call("memory::kg::add", payload, timeout=1.5)
        except Exception:
            reply = None
        if reply is not None and reply.ok:
            return
        assert time.monotonic() < deadline, reply
        await asyncio.sleep(0.1)


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
