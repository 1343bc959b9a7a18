"""Snapshots and the trim of the partition logs (SCALE.md "Snapshots and recovery"), with shards
in this process on one JetStream server: an owner's snapshot lets the log be purged below it, and
a shard that has no file, or a file older than the log's first batch, restores the newest
snapshot and replays the tail, ending with the owner's rows exactly."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import nats

from tests.support import Client, wait_until
from tests.test_replay import rows
from tests.test_shards import PARTITIONS, TTL, shard_config, shards
from worker.shards.app import ShardApp
from worker.shards.node import PartitionNode
from worker.shards.snapshot import snapshot_forever


def partition_file(root: Path, shard: str, partition: int) -> Path:
    return root / shard / f"p{partition:04d}.db"


async def owning(app: ShardApp, partition: int = 0, timeout: float = 4 * TTL) -> PartitionNode:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (node := app.owned(partition)) is None:
        assert loop.time() < deadline, f"{app.name} does not own partition {partition}"
        await asyncio.sleep(0.1)
    return node


async def test_a_new_shard_with_an_empty_data_dir_restores_the_snapshot_and_replays_the_tail(
    nats_url: str, tmp_path: Path
) -> None:
    nc = await nats.connect(nats_url)
    client = Client(nc)
    agents = [f"agent-{n}" for n in range(12)]
    ids: dict[str, set[str]] = {agent: set() for agent in agents}
    async with shards(nats_url, tmp_path, "s1") as (first,):
        for agent in agents:
            ids[agent].add((await client.store(agent, f"{agent} before the snapshot"))["id"])
        assert first.snapshots is not None and first.plog is not None
        for partition, node in sorted(first.nodes.items()):
            taken = await first.snapshots.take(node)
            assert taken is not None and taken.applied == node.applied
            bounds = await first.plog.bounds(partition)
            assert bounds == (node.applied + 1, node.applied)  # nothing below it is kept
            assert await first.snapshots.take(node) is None  # nothing new since
        for agent in agents:
            ids[agent].add((await client.store(agent, f"{agent} after the snapshot"))["id"])
        written = [node.applied for _, node in sorted(first.nodes.items())]
    trimmed = [k for k in range(PARTITIONS) if written[k] > 1]
    assert trimmed  # replaying those from sequence 1 alone cannot work: the log starts later
    async with shards(nats_url, tmp_path, "s2") as (second,):
        assert [second.nodes[k].applied for k in range(PARTITIONS)] == written
        for k in range(PARTITIONS):
            assert rows(partition_file(tmp_path, "s2", k)) == rows(
                partition_file(tmp_path, "s1", k)
            ), k
        for agent in agents:
            found = {memory["id"] for memory in await client.recall(agent, agent)}
            assert found == ids[agent] and len(found) == 2, agent
    await nc.close()


async def test_the_owners_task_snapshots_each_changed_partition_every_interval(
    nats_url: str, tmp_path: Path
) -> None:
    nc = await nats.connect(nats_url)
    async with shards(nats_url, tmp_path, "s1") as (app,):
        assert app.snapshots is not None
        await Client(nc).store("agent-0", "a note")
        changed = next(node for node in app.nodes.values() if node.applied > 0)
        rounds = [0]  # the task asks for the partitions it owns at the start of each round

        def owned() -> Any:
            rounds[0] += 1
            return app.nodes.values()

        task = asyncio.create_task(snapshot_forever(app.snapshots, owned, 0.2))
        try:
            await wait_until(
                lambda: app.snapshots.kept(changed.partition),  # type: ignore[union-attr]
                "a snapshot of the changed partition",
                timeout=5,
            )
            kept = await app.snapshots.kept(changed.partition)
            assert [s.applied for s in kept] == [changed.applied]  # one, not one per interval
            seen = rounds[0]  # the round under way, and one whole round after it:
            await wait_until(lambda: rounds[0] >= seen + 2, "a whole round of the task")
            assert await app.snapshots.kept(changed.partition) == kept
        finally:
            task.cancel()
    await nc.close()


async def test_a_shard_whose_file_is_older_than_the_trimmed_log_restores_the_snapshot_first(
    nats_url: str, tmp_path: Path
) -> None:
    nc = await nats.connect(nats_url)
    client = Client(nc)
    first = ShardApp(shard_config(nats_url, tmp_path, "s1", partitions=1))
    await first.start()
    await owning(first)
    ids = {(await client.store("a", "stored before the stale copy"))["id"]}
    await first.stop()
    shutil.copytree(tmp_path / "s1", tmp_path / "s2")  # s2's file has applied only that store
    first = ShardApp(shard_config(nats_url, tmp_path, "s1", partitions=1))
    await first.start()
    node = await owning(first)
    assert first.snapshots is not None and first.plog is not None
    ids.add((await client.store("a", "stored before the first snapshot"))["id"])
    older = await first.snapshots.take(node)
    ids.add((await client.store("a", "stored before the second snapshot"))["id"])
    newer = await first.snapshots.take(node)
    ids.add((await client.store("a", "stored after both"))["id"])
    assert older is not None and newer is not None and older.slot != newer.slot
    assert [s.applied for s in await first.snapshots.kept(0)] == [newer.applied, older.applied]
    log_first, last = await first.plog.bounds(0)
    assert log_first == older.applied + 1 > 2 and last == node.applied  # trimmed below the older
    await first.stop()

    second = ShardApp(shard_config(nats_url, tmp_path, "s2", partitions=1))
    await second.start()
    try:
        restored = await owning(second)
        assert restored.applied == last
        assert rows(partition_file(tmp_path, "s2", 0)) == rows(partition_file(tmp_path, "s1", 0))
        assert {memory["id"] for memory in await client.recall("a", "stored")} == ids
        again = await client.store("a", "stored after both")
        assert again["deduplicated"] and again["id"] in ids
    finally:
        await second.stop()
        await nc.close()


async def test_a_standby_that_fell_behind_the_trim_restores_the_snapshot_and_follows_on(
    nats_url: str, tmp_path: Path
) -> None:
    nc = await nats.connect(nats_url)
    client = Client(nc)
    async with shards(nats_url, tmp_path, "s1", "s2") as apps:
        owner = next(app for app in apps if app.owned(0))
        standby = next(app for app in apps if app is not owner)
        assert standby._balancer is not None and owner.snapshots is not None
        standby._balancer.cancel()  # nothing restarts its follower behind the test's back
        agent = next(f"agent-{n}" for n in range(100) if owner_partition(f"agent-{n}") == 0)
        await client.store(agent, "one")
        behind = standby.nodes[0]
        await wait_until(lambda: behind.applied == owner.nodes[0].applied, "the standby caught up")
        await behind.stop_following()
        stale = behind.applied
        for text in ("two", "three", "four"):
            await client.store(agent, text)
        assert await owner.snapshots.take(owner.nodes[0]) is not None
        behind.follow()
        await client.store(agent, "five")  # the first batch the follower sees is past a gap
        await wait_until(
            lambda: behind.applied == owner.nodes[0].applied, "the standby restored and caught up"
        )
        assert behind.applied > stale + 1
        await wait_until(
            lambda: rows(behind.path) == rows(owner.nodes[0].path), "the standby's rows the owner's"
        )
    await nc.close()


def owner_partition(agent: str) -> int:
    from worker.shards.partition import partition_of

    return partition_of("", agent, PARTITIONS)
