"""Snapshots of each partition's file in the JetStream Object Store MEMORY_SNAPSHOTS, and the trim
of the partition's log below them (SCALE.md "Snapshots and recovery").

A partition keeps two snapshots, objects `p0007.a` and `p0007.b`: each a whole SQLite file, with
the log sequence it had applied in header `Memory-Applied`; a new one replaces the older of the
two. The log is purged below the older one's sequence + 1, so either snapshot plus the log's tail
rebuilds the partition: a snapshot that cannot be read falls back to the other, and a standby or
a restarted shard less than one interval behind still finds its next batch in the log. Two
copies cost twice the bucket's space; one would leave no way back from a bad upload.

The copy is SQLite's online backup (worker/backup.py), so the owner keeps writing meanwhile, and
its applied sequence is read from the copy itself: the two come from one read snapshot.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw
import nats.js.errors
import structlog
from nats.js.api import ObjectMeta, ObjectStoreConfig, StorageType

from worker.backup import backup_database
from worker.shards.log import ShardSetupError, stream_name

if TYPE_CHECKING:
    from worker.shards.node import PartitionNode

log = structlog.get_logger()
BUCKET = "MEMORY_SNAPSHOTS"
SLOTS = ("a", "b")
APPLIED = "Memory-Applied"
PARTITIONS = "Memory-Partitions"
DOWNLOAD_TIMEOUT_S = 600.0


class SnapshotError(RuntimeError):
    """No usable snapshot of a partition; the message says which object and why."""


@dataclass(frozen=True)
class Snapshot:
    partition: int
    slot: str
    applied: int
    size: int
    partitions: int | None  # the partition count it was made for

    @property
    def name(self) -> str:
        return object_name(self.partition, self.slot)


def object_name(partition: int, slot: str) -> str:
    return f"p{partition:04d}.{slot}"


async def open_store(js: Any, replicas: int) -> Any:
    """The snapshot bucket, created with MEMORY_WORKER_REPLICAS copies or checked to have them."""
    try:
        store = await js.object_store(BUCKET)
    except nats.js.errors.BucketNotFoundError:
        config = ObjectStoreConfig(
            description="memory-worker partition snapshots (SCALE.md)",
            storage=StorageType.FILE,
            replicas=replicas,
        )
        try:
            return await js.create_object_store(BUCKET, config=config)
        except nats.js.errors.APIError as error:
            raise ShardSetupError(
                f"cannot create object store {BUCKET} with {replicas} replicas "
                f"(MEMORY_WORKER_REPLICAS): {error.description}"
            ) from None
    status = await store.status()
    if (status.replicas or 1) < replicas:
        raise ShardSetupError(
            f"object store {BUCKET} has {status.replicas} replicas, fewer than "
            f"MEMORY_WORKER_REPLICAS={replicas}; raise its replicas or lower the setting"
        )
    return store


def _header(info: Any, name: str) -> str | None:
    values = (info.headers or {}).get(name)
    if isinstance(values, list):
        return str(values[0]) if values else None
    return None if values is None else str(values)


def _snapshot(partition: int, slot: str, info: Any) -> Snapshot:
    partitions = _header(info, PARTITIONS)
    return Snapshot(
        partition=partition,
        slot=slot,
        applied=int(_header(info, APPLIED) or 0),
        size=int(info.size or 0),
        partitions=None if partitions is None else int(partitions),
    )


def applied_in(path: Path, partition: int) -> int:
    """The log sequence a partition file has applied (its shard_log row); refuses a file that is
    not a sound copy of this partition."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        verdict = conn.execute("PRAGMA quick_check").fetchall()
        if verdict != [("ok",)]:
            raise SnapshotError(f"{path.name} fails SQLite's quick_check: {verdict[:3]}")
        row = conn.execute(
            "SELECT applied FROM shard_log WHERE partition = ?", (partition,)
        ).fetchone()
    except apsw.Error as error:
        raise SnapshotError(f"{path.name} is not a partition file: {error}") from None
    finally:
        conn.close()
    if row is None:
        raise SnapshotError(f"{path.name} holds no shard_log row for partition {partition}")
    return int(row[0])


def install(download: Path, path: Path) -> None:
    """Put a downloaded file in place of a partition's file. The old file's WAL and shared
    memory go first: SQLite would replay a leftover WAL into the new file; so does the old file's
    persisted recall index (`<file>.index/`, worker/recall_index/persist.py), a cache of the
    old file's rows that the new file's change log cannot be trusted to correct."""
    for suffix in ("-wal", "-shm", "-journal"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    shutil.rmtree(path.with_name(path.name + ".index"), ignore_errors=True)
    os.replace(download, path)


class Snapshots:
    def __init__(self, js: Any, store: Any, partitions: int) -> None:
        self.js = js
        self.store = store
        self.partitions = partitions

    async def kept(self, partition: int) -> list[Snapshot]:
        """The partition's snapshots, newest first."""
        found = []
        for slot in SLOTS:
            try:
                info = await self.store.get_info(object_name(partition, slot))
            except nats.js.errors.ObjectNotFoundError:
                continue
            found.append(_snapshot(partition, slot, info))
        return sorted(found, key=lambda snapshot: snapshot.applied, reverse=True)

    async def upload(self, partition: int, path: Path, applied: int, slot: str) -> Snapshot:
        name = object_name(partition, slot)
        headers = {APPLIED: [str(applied)], PARTITIONS: [str(self.partitions)]}
        meta = ObjectMeta(name=name, description=f"partition {partition}", headers=headers)
        with path.open("rb") as file:
            info = await self.store.put(name, file, meta=meta)
        return _snapshot(partition, slot, info)

    async def take(self, node: PartitionNode) -> Snapshot | None:
        """Back up an owned partition, upload it over its older snapshot and trim the log below
        the snapshots kept; None when nothing was applied since the newest one."""
        partition = node.partition
        kept = await self.kept(partition)
        if not node.owner or (kept and kept[0].applied == node.applied):
            return None
        copy = node.path.with_name(node.path.name + ".snapshot")
        try:
            await asyncio.to_thread(backup_database, node.path, copy)
            applied = await asyncio.to_thread(applied_in, copy, partition)
            free = [slot for slot in SLOTS if slot not in {s.slot for s in kept}]
            slot = free[0] if free else kept[-1].slot
            taken = await self.upload(partition, copy, applied, slot)
        finally:
            copy.unlink(missing_ok=True)
        others = [snapshot for snapshot in kept if snapshot.slot != slot]
        await self.trim(partition, [taken, *others])
        log.info("shard.snapshot", partition=partition, applied=applied, bytes=taken.size)
        return taken

    async def trim(self, partition: int, kept: Iterable[Snapshot]) -> None:
        """Purge the log below the oldest snapshot kept: every message it holds stays."""
        oldest = min(snapshot.applied for snapshot in kept)
        if oldest > 0:
            await self.js.purge_stream(stream_name(partition), seq=oldest + 1)

    async def restore(self, partition: int, path: Path) -> int | None:
        """Replace the partition's file with its newest readable snapshot; the sequence it
        applied, or None when the bucket holds none. Only while no connection has the file open."""
        kept = await self.kept(partition)
        problems = []
        for snapshot in kept:
            if snapshot.partitions not in (None, self.partitions):
                raise SnapshotError(
                    f"snapshot {snapshot.name} was made for {snapshot.partitions} partitions, "
                    f"not MEMORY_WORKER_PARTITIONS={self.partitions}"
                )
            download = path.with_name(path.name + ".restore")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with download.open("wb") as file:
                    get = self.store.get(snapshot.name, writeinto=file)
                    await asyncio.wait_for(get, DOWNLOAD_TIMEOUT_S)
                applied = await asyncio.to_thread(applied_in, download, partition)
                await asyncio.to_thread(install, download, path)
            except (SnapshotError, nats.errors.Error, TimeoutError, OSError) as error:
                problems.append(f"{snapshot.name}: {error!r}")
                log.warning("shard.snapshot_unusable", snapshot=snapshot.name, error=repr(error))
                continue
            finally:
                download.unlink(missing_ok=True)
            log.info("shard.restored", partition=partition, snapshot=snapshot.name,
                     applied=applied)  # fmt: skip
            return applied
        if problems:
            found = "; ".join(problems)
            raise SnapshotError(f"partition {partition}: no usable snapshot ({found})")
        return None


async def snapshot_forever(
    snapshots: Snapshots, owned: Callable[[], Iterable[PartitionNode]], interval: float
) -> None:
    """The owner's task: every interval, a snapshot of each partition it owns that changed."""
    while True:
        await asyncio.sleep(interval)
        for node in list(owned()):
            try:
                await snapshots.take(node)
            except Exception as error:  # a node down, the bucket electing a leader: next round
                log.warning("shard.snapshot_failed", partition=node.partition, error=repr(error))
