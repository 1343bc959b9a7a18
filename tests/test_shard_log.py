"""The partition log and the leases of sharded mode (SCALE.md) against real JetStream: appends
that only the shard that applied everything can make, and leases that one shard holds at a time,
survive a bucket leader's death and pass on only when the holder is gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import StreamConfig

from tests.cluster import running_cluster
from tests.support import wait_until
from worker.shards.lease import BUCKET, Leases, open_bucket, preference
from worker.shards.log import PartitionLog, ShardSetupError, Superseded


@pytest.fixture
async def js(nats_url: str) -> AsyncIterator[Any]:
    nc = await nats.connect(nats_url)
    yield nc.jetstream()
    await nc.close()


async def test_only_the_shard_that_applied_everything_can_append(js: Any) -> None:
    log = PartitionLog(js, partitions=2, replicas=1)
    await log.ensure()
    first = await log.append(1, b"a", after=0)
    second = await log.append(1, b"b", after=first)
    with pytest.raises(Superseded):
        await log.append(1, b"stale", after=first)  # a shard that missed "b"
    assert await log.last_seq(1) == second and await log.last_seq(0) == 0
    entries = log.read(1, after=first)
    assert (await anext(entries)).data == b"b"
    third = await log.append(1, b"c", after=second)  # appended while a reader follows
    entry = await asyncio.wait_for(anext(entries), 5)
    assert (entry.seq, entry.data) == (third, b"c")
    await entries.aclose()


async def test_streams_with_fewer_replicas_than_configured_are_refused(js: Any) -> None:
    with pytest.raises(ShardSetupError, match="MEMORY_WORKER_REPLICAS"):
        await PartitionLog(js, partitions=1, replicas=3).ensure()  # one server: no R3
    await js.add_stream(StreamConfig(name="MEMORY_P0", subjects=["memory.log.0.>"]))
    with pytest.raises(ShardSetupError, match="has 1 replicas"):
        await PartitionLog(js, partitions=1, replicas=3).ensure()


async def test_one_shard_holds_a_lease_until_it_stops_renewing_or_releases_it(js: Any) -> None:
    kv = await open_bucket(js, ttl=1.0, replicas=1)
    a, b = Leases(kv, "a", ttl=1.0), Leases(kv, "b", ttl=1.0)
    assert await a.acquire(3) and not await b.acquire(3)
    assert await a.renew(3) == "held" and await b.holder(3) == "a"

    async def aged_out() -> bool:  # as a shard's balance round looks before it acquires
        return await b.holder(3) is None

    # a stops renewing: the bucket forgets its lease within about a TTL, and b takes it.
    await wait_until(aged_out, "a's lease aged out of the bucket", timeout=10)
    assert await b.acquire(3)
    assert await a.renew(3) == "lost" and 3 not in a.held
    await b.release(3)
    assert await b.holder(3) is None and await a.acquire(3)


async def test_live_shards_are_those_that_beat_within_a_ttl(js: Any) -> None:
    kv = await open_bucket(js, ttl=1.0, replicas=1)
    a, b = Leases(kv, "a", ttl=1.0), Leases(kv, "b", ttl=1.0)
    await a.beat()
    await b.beat()
    assert await a.live_shards() == ["a", "b"]

    async def only_a_beating() -> bool:  # b falls silent; the server ages its key out
        await a.beat()
        return await a.live_shards() == ["a"]

    await wait_until(only_a_beating, "b left the live shards while a beats", 10, 0.2)


def test_rendezvous_moves_only_the_partitions_a_new_shard_ranks_first_in() -> None:
    before = {k: preference(k, ["s1", "s2"])[0] for k in range(64)}
    after = {k: preference(k, ["s1", "s2", "s3"])[0] for k in range(64)}
    moved = {k for k in range(64) if before[k] != after[k]}
    assert moved and all(after[k] == "s3" for k in moved)
    assert 10 <= len(moved) <= 35  # about a third
    assert preference(5, ["b", "a"]) == preference(5, ["a", "b"])


@pytest.mark.slow
async def test_an_owner_keeps_its_lease_through_the_death_of_the_buckets_leader(
    tmp_path: Path,
) -> None:
    """Renewing every TTL/3 while the node leading MEMORY_SHARDS is killed: the owner never
    sees its lease lost, and no other shard can take it meanwhile. The TTL is the production
    default's order (10 s and more): longer than the bucket's leader election (up to about 9 s
    in nats-server), during which the key ages on the server too, so that an owner stepping down
    after a TTL without a renewal would be right to."""
    async with running_cluster(tmp_path) as cluster:
        nc = await nats.connect(cluster.urls.split(","))
        js = nc.jetstream()
        ttl = 12.0
        kv = await open_bucket(js, ttl=ttl, replicas=3)
        owner, rival = Leases(kv, "owner", ttl=ttl), Leases(kv, "rival", ttl=ttl)
        assert await owner.acquire(0)
        info = await js.stream_info(f"KV_{BUCKET}")
        assert info.cluster is not None
        cluster.kill(cluster.node(str(info.cluster.leader)))
        verdicts: list[str] = []
        for _ in range(6):  # 24 s: the election and some renewals after it
            await asyncio.sleep(ttl / 3)  # the owner's renewal cadence: the behaviour tested
            verdicts.append(await owner.renew(0))
            assert verdicts[-1] != "lost", verdicts
            if verdicts[-1] == "held":
                assert not await rival.acquire(0)
        assert verdicts[-1] == "held", verdicts
        await nc.close()
