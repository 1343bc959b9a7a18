"""`memory-worker cluster`: what a sharded deployment looks like from the bus — each
partition's owner and standbys, the log sequence the owner has applied and the log's last, so
the lag — read from the lease bucket and the partition streams, without asking any shard."""

from __future__ import annotations

from typing import Any

import msgspec
import nats.js.errors

from worker.shards.lease import BUCKET, lease_of, live_shards, preference
from worker.shards.log import stream_name


class PartitionStatus(msgspec.Struct, frozen=True, rename="camel"):
    partition: int
    owner: str | None  # null: nobody holds it now (a failover, or no shard ranks for it)
    standbys: list[str]
    applied: int | None  # what the owner had applied at its last renewal
    last: int  # the log's last sequence
    lag: int | None


class ClusterStatus(msgspec.Struct, frozen=True, rename="camel"):
    shards: list[str]
    partitions: list[PartitionStatus]


class NotSharded(RuntimeError):
    """No lease bucket or partition streams on this NATS: not a sharded deployment."""


async def cluster_status(nc: Any, standbys: int) -> ClusterStatus:
    js = nc.jetstream()
    try:
        kv = await js.key_value(BUCKET)
    except nats.js.errors.BucketNotFoundError:
        raise NotSharded(f"no {BUCKET} bucket here: no shard has started on this NATS") from None
    shards = await live_shards(kv)
    found = []
    partition = 0
    while True:
        try:
            info = await js.stream_info(stream_name(partition))
        except nats.js.errors.NotFoundError:
            break
        holder = await lease_of(kv, partition)
        last = int(info.state.last_seq)
        ranked = [name for name in preference(partition, shards) if holder is None or
                  name != holder.shard][:standbys]  # fmt: skip
        found.append(
            PartitionStatus(
                partition=partition,
                owner=None if holder is None else holder.shard,
                standbys=ranked,
                applied=None if holder is None else holder.applied,
                last=last,
                lag=None if holder is None else max(0, last - holder.applied),
            )
        )
        partition += 1
    return ClusterStatus(shards=shards, partitions=found)


def render(status: ClusterStatus) -> str:
    lines = [f"shards alive: {', '.join(status.shards) or '(none)'}", ""]
    lines.append("partition  owner            applied       last    lag  standbys")
    for p in status.partitions:
        owner = p.owner or "(none)"
        applied = "-" if p.applied is None else str(p.applied)
        lag = "-" if p.lag is None else str(p.lag)
        lines.append(
            f"{p.partition:>9}  {owner:<15} {applied:>8} {p.last:>10} {lag:>6}  "
            f"{', '.join(p.standbys)}"
        )
    return "\n".join(lines)
