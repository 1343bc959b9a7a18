"""One partition on this shard: its own storage unit (worker/storage.py: its SQLite file,
writer, readers and recall index, opened like single mode's), kept in step with the partition's
log.

As owner, a partition's writer runs each write's decide and apply steps as in single mode, and
before the batch commits appends the batch's decisions to the log (expected sequence: the last
one applied), recording the new sequence in the same transaction. The reply goes out after the
COMMIT, so a success means the write is in the replicated stream. A crash after the append and
before the COMMIT loses nothing: the next catch-up applies the batch from the log.

As standby, or before serving, it replays the log from the sequence it applied last, with the
same apply (worker/writes.py Replayer). Everything that writes is logged, recall's access
counts and the backfill's vectors included, so a standby's copy is the owner's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import apsw
import msgspec
import structlog

from worker.embedders import Embedder
from worker.services import Services
from worker.shards.log import PartitionLog
from worker.storage import Shared, Storage
from worker.writes import LogEntry, Logged, Replayer

log = structlog.get_logger()
APPEND_TIMEOUT_S = 30.0
# Which log sequence this file has applied, per partition it holds (one row).
SHARD_LOG_SQL = (
    "CREATE TABLE IF NOT EXISTS shard_log "
    "(partition INTEGER PRIMARY KEY, applied INTEGER NOT NULL) STRICT"
)
_BATCH = msgspec.msgpack.Decoder(list[LogEntry])
_ENCODE = msgspec.msgpack.Encoder()


class NotOwner(RuntimeError):
    """A write reached a partition this shard does not own (any more)."""


class LogGap(RuntimeError):
    """The log no longer holds the batches after what this file applied (trimmed after a
    snapshot): the partition must be restored from a snapshot first."""


class _Replayed:
    """What a replay job returns: not a new write, nothing to append."""


REPLAYED = _Replayed()
# Puts the newest snapshot of a partition at a path; the sequence it applied, None if none.
Restore = Callable[[int, Path], Awaitable[int | None]]


class PartitionNode:
    def __init__(
        self,
        partition: int,
        shared: Shared,
        embedder: Embedder,
        plog: PartitionLog,
        replayer: Replayer,
        lease_fresh: Callable[[], bool] = lambda: True,
        restore: Restore | None = None,
    ) -> None:
        """`shared` and `embedder` are the shard's, the same for each of its partitions (the
        recall gate above all). `lease_fresh` says whether this shard's lease on the partition
        was renewed within a TTL by its own clock: a shard that was paused longer than that
        writes nothing before it has looked again. `restore` fetches a snapshot
        (worker/shards/snapshot.py) when the file is missing or the log no longer reaches back
        to it."""
        self.partition = partition
        self.lease_fresh = lease_fresh
        self.restore = restore
        self.shared = shared
        self.embedder = embedder
        self.config = shared.config
        self.plog = plog
        self.replayer = replayer
        self.loop = asyncio.get_running_loop()
        self.path = Path(self.config.data_dir) / f"p{partition:04d}.db"
        self.owner = False
        self.applied = 0
        self.storage: Storage | None = None
        self._follower: asyncio.Task[None] | None = None

    @property
    def services(self) -> Services | None:
        """What a flow is handed on this partition; None while its file is closed."""
        return None if self.storage is None else self.storage.services

    async def open(self) -> None:
        if self.restore is not None and not self.path.exists():
            # Only a log that was trimmed, or holds nothing yet (a cluster started from
            # shard-split's snapshots), needs the bucket: a whole log is replayed from 1.
            first, last = await self.plog.bounds(self.partition)
            if last == 0 or first > 1:
                await self.restore(self.partition, self.path)
        storage = Storage(
            self.path,
            self.shared,
            # The log is the durable copy: the file need not sync every commit.
            synchronous="normal",
            writer_name=f"memory-writer-p{self.partition}",
            before_commit=self._append,
            prepare=self._read_applied,
        )
        await storage.open()
        storage.serve(self.embedder)
        self.storage = storage

    def _read_applied(self, conn: apsw.Connection) -> None:
        """After the migrations: the log sequence this file applied (0 for a new file)."""
        conn.execute(SHARD_LOG_SQL)
        conn.execute(
            "INSERT OR IGNORE INTO shard_log (partition, applied) VALUES (?, 0)", (self.partition,)
        )
        self.applied = int(
            conn.execute("SELECT applied FROM shard_log WHERE partition = ?", (self.partition,)).get
        )

    def _append(self, conn: apsw.Connection, done: list[tuple[bool, Any]]) -> None:
        """On the writer thread, inside the batch's transaction: log its decisions first."""
        entries = [result.entry for _, result in done if isinstance(result, Logged)]
        if any(durable and not isinstance(r, Logged | _Replayed) for durable, r in done):
            raise RuntimeError("a write without decide and apply steps cannot run sharded")
        if not entries:
            return
        if not self.owner or not self.lease_fresh():
            raise NotOwner(f"partition {self.partition} is not owned by this shard")
        append = self.plog.append(self.partition, _ENCODE.encode(entries), after=self.applied)
        seq = asyncio.run_coroutine_threadsafe(append, self.loop).result(APPEND_TIMEOUT_S)
        self._set_applied(conn, seq)

    def _set_applied(self, conn: apsw.Connection, seq: int) -> None:
        self._record_applied(conn, seq)
        self.applied = seq

    def _record_applied(self, conn: apsw.Connection, seq: int) -> None:
        """The file's own record of the log sequence it applied (moves with its transaction)."""
        conn.execute("UPDATE shard_log SET applied = ? WHERE partition = ?", (seq, self.partition))

    def _replay(self, conn: apsw.Connection, seq: int, data: bytes) -> _Replayed:
        """A writer job: the batch applied and the file's position moved, in the transaction.
        The position in memory moves once that is committed (`_replayed`): the writer may run a
        job again after rolling it back (worker/writer.py), which must then apply it again."""
        if seq <= self.applied:
            return REPLAYED  # delivered again: applied already
        if seq != self.applied + 1:
            raise LogGap(
                f"partition {self.partition}: the log starts after {seq - 1}, this file "
                f"applied {self.applied}"
            )
        for entry in _BATCH.decode(data):
            self.replayer.replay(conn, entry)
        self._record_applied(conn, seq)
        return REPLAYED

    async def _replayed(self, seq: int, data: bytes) -> None:
        """Replay one logged batch; committed, it is the position this file applied."""
        assert self.services is not None
        await self.services.writer.run(lambda conn: self._replay(conn, seq, data))
        self.applied = max(self.applied, seq)

    async def catch_up(self) -> int:
        """Apply every batch the log holds beyond this file, from a snapshot first if the log
        was trimmed past it; how many batches."""
        try:
            return await self._catch_up()
        except LogGap as gap:
            await self._restore_after(gap)
            return await self._catch_up()

    async def _restore_after(self, gap: LogGap) -> None:
        """Reopen the partition from its newest snapshot, or raise the gap if there is none."""
        if self.restore is None:
            raise gap
        log.info("shard.log_gap", partition=self.partition, applied=self.applied, gap=str(gap))
        await self._shut()
        restored = await self.restore(self.partition, self.path)
        await self.open()
        if restored is None:
            raise gap

    async def _catch_up(self) -> int:
        if self.services is None:  # a restore was cut short: the file is the old or the new one
            await self.open()
        assert self.services is not None
        first, last = await self.plog.bounds(self.partition)
        applied = 0
        if last <= self.applied:
            return 0
        if first > self.applied + 1:
            raise LogGap(
                f"partition {self.partition}: the log starts at {first}, this file applied "
                f"{self.applied}"
            )
        entries = self.plog.read(self.partition, self.applied)
        try:
            async for entry in entries:
                await self._replayed(entry.seq, entry.data)
                applied += 1
                if entry.seq >= last:
                    break
        finally:
            await entries.aclose()
        return applied

    def follow(self) -> None:
        """As standby: apply each batch as it is appended, until promoted or closed."""
        if self._follower is None or self._follower.done():
            self._follower = self.loop.create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            try:
                return await self._follow_log()
            except LogGap as gap:  # a standby that fell behind the trim
                try:
                    await self._restore_after(gap)
                except Exception as error:
                    log.error("shard.restore_failed", partition=self.partition, error=str(error))
                    return

    async def _follow_log(self) -> None:
        assert self.services is not None
        entries = self.plog.read(self.partition, self.applied)
        try:
            async for entry in entries:
                await self._replayed(entry.seq, entry.data)
        except (asyncio.CancelledError, LogGap):
            raise
        except Exception as error:
            log.error("shard.follow_failed", partition=self.partition, error=str(error))
        finally:
            await entries.aclose()

    async def stop_following(self) -> None:
        """Cancel the follower and wait for it to end. Waited for with asyncio.wait, not awaited
        under a suppress(CancelledError): that also swallowed the cancellation of the caller
        (ShardApp.stop cancelling a balance round that was handing a partition over), which
        then ran on and stop waited for it forever."""
        if self._follower is not None:
            follower, self._follower = self._follower, None
            follower.cancel()
            await asyncio.wait([follower])
            if not follower.cancelled() and follower.exception() is not None:
                log.error("shard.follow_ended", partition=self.partition,
                          error=repr(follower.exception()))  # fmt: skip

    async def close(self) -> None:
        self.owner = False
        await self.stop_following()
        await self._shut()

    async def _shut(self) -> None:
        """Close the partition's storage (its blocking steps on a thread, worker/storage.py:
        a writer job may be waiting for the loop to append its batch to the log)."""
        if self.storage is not None:
            storage, self.storage = self.storage, None
            await storage.close()
