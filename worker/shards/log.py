"""Each partition's writes as a replicated JetStream stream: the durable record of sharded mode.

Stream `MEMORY_P<k>` holds subject `memory.log.<k>.<kind>`; its messages are batches of events
(worker/shards/events.py) in the order they were applied. A shard appends with
`Nats-Expected-Last-Sequence` = the last sequence it applied, so only the shard that has seen
every earlier batch can add one: a paused owner that another shard replaced gets "wrong last
sequence" and steps down, and nothing diverges. The check is on the stream's sequence rather than
per agent (SCALE.md's first sketch) because trimming after a snapshot removes old messages but
never lowers the stream's last sequence, and because one expected sequence per partition lets
concurrent writes share one append, as they share one SQLite transaction in single mode.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from nats.js.api import ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

WRONG_LAST_SEQUENCE = (10071, 10164)
APPEND_ATTEMPTS = 5


def stream_name(partition: int) -> str:
    return f"MEMORY_P{partition}"


def log_subject(partition: int, kind: str = "batch") -> str:
    return f"memory.log.{partition}.{kind}"


class ShardSetupError(RuntimeError):
    """The cluster cannot hold what sharded mode needs; the message names the setting."""


class Superseded(RuntimeError):
    """Another shard appended to the partition since this one last applied: it is not the owner
    any more (or never was), and must catch up before it writes again."""


@dataclass(frozen=True)
class Entry:
    seq: int
    data: bytes


class PartitionLog:
    def __init__(self, js: Any, partitions: int, replicas: int) -> None:
        self.js = js
        self.partitions = partitions
        self.replicas = replicas

    async def ensure(self) -> None:
        """Create the partition streams, or check that existing ones have the replicas asked
        for: a stream with fewer copies than MEMORY_WORKER_REPLICAS is refused, never used."""
        for partition in range(self.partitions):
            await self._ensure_stream(partition)

    async def _ensure_stream(self, partition: int) -> None:
        name = stream_name(partition)
        try:
            info = await self.js.stream_info(name)
        except nats.js.errors.NotFoundError:
            config = StreamConfig(
                name=name,
                subjects=[f"memory.log.{partition}.>"],
                num_replicas=self.replicas,
                storage=StorageType.FILE,
                allow_direct=True,
                duplicate_window=120.0,
            )
            try:
                await self.js.add_stream(config)
            except nats.js.errors.APIError as error:
                raise ShardSetupError(
                    f"cannot create stream {name} with {self.replicas} replicas "
                    f"(MEMORY_WORKER_REPLICAS): {error.description}; does the cluster have "
                    f"{self.replicas} JetStream servers?"
                ) from None
            return
        replicas = info.config.num_replicas or 1
        if replicas < self.replicas:
            raise ShardSetupError(
                f"stream {name} has {replicas} replicas, fewer than MEMORY_WORKER_REPLICAS="
                f"{self.replicas}; raise the stream's replicas or lower the setting"
            )

    async def last_seq(self, partition: int) -> int:
        info = await self.js.stream_info(stream_name(partition))
        return int(info.state.last_seq)

    async def bounds(self, partition: int) -> tuple[int, int]:
        """The first sequence the log still holds (above the last once all is trimmed) and its
        last."""
        info = await self.js.stream_info(stream_name(partition))
        return int(info.state.first_seq), int(info.state.last_seq)

    async def append(self, partition: int, data: bytes, *, after: int) -> int:
        """Add one batch after sequence `after` (the last this shard applied); its sequence.

        A publish whose acknowledgement was lost is sent again with the same message id, which
        the stream recognises (its duplicate window) instead of adding the batch twice."""
        headers = {
            "Nats-Expected-Last-Sequence": str(after),
            "Nats-Msg-Id": uuid.uuid4().hex,
        }
        for attempt in range(APPEND_ATTEMPTS):
            try:
                ack = await self.js.publish(log_subject(partition), data, headers=headers)
                return int(ack.seq)
            except nats.js.errors.APIError as error:
                if error.err_code in WRONG_LAST_SEQUENCE:
                    raise Superseded(
                        f"partition {partition}: another shard appended after {after}"
                    ) from None
                if attempt == APPEND_ATTEMPTS - 1:
                    raise
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                if attempt == APPEND_ATTEMPTS - 1:
                    raise
            await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    async def read(self, partition: int, after: int) -> AsyncGenerator[Entry, None]:
        """Every batch after sequence `after`, in order, then the ones appended later, for as
        long as the caller iterates. An ordered consumer: the server re-creates it after a
        failover, and a gap (trimmed below `after`) shows as a first sequence above after+1."""
        sub = await self.js.subscribe(
            f"memory.log.{partition}.>",
            ordered_consumer=True,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1
            ),
        )
        try:
            while True:
                msg = await sub.next_msg(timeout=None)
                yield Entry(int(msg.metadata.sequence.stream), msg.data)
        finally:
            await sub.unsubscribe()
