"""Who owns each partition: leases in the JetStream key-value bucket MEMORY_SHARDS (replicated).

`lease.<k>` names the shard that owns partition k; `shard.<name>` says a shard is alive. The
bucket's age limit is the lease TTL, so an owner that stops renewing loses its lease one TTL
after its last renewal, and a shard that stops beating leaves the list of live shards.

Stepping down: an owner gives up a partition when the bucket says another shard holds it, or
when a whole TTL passed since it sent its last renewal that succeeded. A failed renewal alone is
no reason: while the bucket elects a new leader every update fails for a few seconds, and owners
that stepped down on the first failure would all stop at once (SCALE.md). The renewal's send
time, not its acknowledgement, starts the TTL: the server ages the key from a moment after the
send, so the owner stops believing in its lease no later than the bucket forgets it. Writes stay
safe in any case through the log's expected sequence (worker/shards/log.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import nats.errors
import nats.js.errors
from nats.js.api import KeyValueConfig, StorageType

BUCKET = "MEMORY_SHARDS"
Verdict = Literal["held", "lost", "unsure"]


class Holder(msgspec.Struct, frozen=True):
    """A lease's value: who holds it, and the log sequence it had applied when it last renewed
    (what `memory-worker cluster` shows, with the lag behind the log)."""

    shard: str
    applied: int = 0


@dataclass
class Held:
    revision: int
    sent_at: float  # monotonic time the last successful renewal (or the acquisition) was sent


def preference(partition: int, shards: Iterable[str]) -> list[str]:
    """Rendezvous hashing: the shards in the order they should hold the partition (owner first,
    then standbys). A shard that joins or leaves moves only the partitions it ranks first in."""
    return sorted(
        shards,
        key=lambda name: hashlib.sha256(f"{partition}/{name}".encode()).digest(),
        reverse=True,
    )


async def open_bucket(js: Any, ttl: float, replicas: int) -> Any:
    try:
        return await js.key_value(BUCKET)
    except nats.js.errors.BucketNotFoundError:
        config = KeyValueConfig(
            bucket=BUCKET, history=1, ttl=ttl, replicas=replicas, storage=StorageType.FILE
        )
        return await js.create_key_value(config)


async def lease_of(kv: Any, partition: int) -> Holder | None:
    """Who holds the partition's lease, or None when nobody does."""
    try:
        entry = await kv.get(f"lease.{partition}")
    except nats.js.errors.KeyNotFoundError:
        return None
    return msgspec.json.decode(entry.value, type=Holder) if entry.value else None


async def live_shards(kv: Any) -> list[str]:
    try:
        keys = await kv.keys()
    except nats.js.errors.NoKeysError:
        return []
    return sorted(key.removeprefix("shard.") for key in keys if key.startswith("shard."))


class Leases:
    def __init__(
        self, kv: Any, shard: str, ttl: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kv = kv
        self.shard = shard
        self.ttl = ttl
        self.clock = clock
        self.held: dict[int, Held] = {}
        self._value = msgspec.json.encode(Holder(shard))

    async def beat(self) -> None:
        """Say this shard is alive (a key that ages out one TTL after the last beat)."""
        await self.kv.put(f"shard.{self.shard}", self._value)

    async def live_shards(self) -> list[str]:
        return await live_shards(self.kv)

    async def holder(self, partition: int) -> str | None:
        found = await lease_of(self.kv, partition)
        return None if found is None else found.shard

    def _holding(self, applied: int) -> bytes:
        return msgspec.json.encode(Holder(self.shard, applied))

    async def acquire(self, partition: int, applied: int = 0) -> bool:
        """Take the lease if nobody holds it."""
        sent = self.clock()
        try:
            revision = await self.kv.create(f"lease.{partition}", self._holding(applied))
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        self.held[partition] = Held(revision, sent)
        return True

    async def renew(self, partition: int, applied: int = 0) -> Verdict:
        held = self.held[partition]
        sent = self.clock()
        try:
            held.revision = await self.kv.update(
                f"lease.{partition}", self._holding(applied), last=held.revision
            )
            held.sent_at = sent
            return "held"
        except nats.js.errors.KeyWrongLastSequenceError:
            return await self._after_conflict(partition, held)
        except (nats.errors.Error, TimeoutError, OSError):
            pass  # the bucket may be electing a leader: keep the lease while it is valid
        if self.clock() - held.sent_at >= self.ttl:
            self.held.pop(partition, None)
            return "lost"
        return "unsure"

    async def _after_conflict(self, partition: int, held: Held) -> Verdict:
        """The revision moved: another shard took the lease (it had expired), or a renewal of
        ours landed without its acknowledgement reaching us."""
        try:
            entry = await self.kv.get(f"lease.{partition}")
        except (nats.errors.Error, TimeoutError, OSError):
            entry = None
        if entry is not None and entry.value and self._mine(entry.value):
            held.revision = int(entry.revision)
            return "held"
        self.held.pop(partition, None)
        return "lost"

    async def release(self, partition: int) -> None:
        """Hand the partition back (a shard that ranks higher joined, or this one stops)."""
        held = self.held.pop(partition, None)
        if held is None:
            return
        with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):  # else it ages out
            await self.kv.delete(f"lease.{partition}", last=held.revision)

    def _mine(self, value: bytes) -> bool:
        return msgspec.json.decode(value, type=Holder).shard == self.shard
