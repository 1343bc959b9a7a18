"""A shard: one worker process of sharded mode (MEMORY_WORKER_MODE=sharded, SCALE.md).

It serves the plain subjects like a single-mode worker and routes each request to its agent's
partition (worker/shards/router.py); it holds the partitions the lease bucket gives it, one
SQLite file each (worker/shards/node.py), and follows as standby those it ranks next for.

Every TTL/3 it says it is alive, renews what it holds and looks at every partition: it takes a
free partition it ranks first for (or any free one it is a standby of, once it has been free for
a whole TTL), hands back one that a higher-ranked live shard should hold, and steps down from
one whose lease it lost. Before it serves a partition it replays the log beyond its file.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import nats.errors
import structlog

from scheduler.jobs import Schedule, default_jobs
from worker.bus import MemoryService
from worker.config import Config
from worker.connection import connect
from worker.dispatch import Dispatcher
from worker.embedders.configured import make_embedder
from worker.ingest import Ingest
from worker.metrics import MetricsServer
from worker.readers import Readers
from worker.recalls_first import RecallsFirst
from worker.registry import ROUTES, all_writes
from worker.route import Route
from worker.shards.cron import partition_scheduler
from worker.shards.fanout import OwnedReads
from worker.shards.lease import Leases, open_bucket, preference
from worker.shards.log import PartitionLog, ShardSetupError
from worker.shards.node import PartitionNode
from worker.shards.router import Router, by_verb, serve_partition
from worker.shards.snapshot import Snapshots, open_store, snapshot_forever
from worker.storage import DRAIN_SECONDS, Shared
from worker.telemetry import Telemetry
from worker.tenancy import load_grants
from worker.writes import Replayer

log = structlog.get_logger()


T = TypeVar("T")
SETUP_PATIENCE_S = 60.0


async def _patiently(step: Callable[[], Awaitable[T]]) -> T:
    """A setup step retried while the cluster is busy (shards starting together create the
    same streams; a new stream elects its leader): a timeout or "no response" is passing; a
    ShardSetupError (too few replicas, no JetStream) is not."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETUP_PATIENCE_S
    while True:
        try:
            return await step()
        except ShardSetupError:
            raise
        except (nats.errors.Error, TimeoutError) as error:
            if loop.time() > deadline:
                raise
            log.info("shard.setup_retry", error=repr(error))
            await asyncio.sleep(0.5)


class ShardApp:
    def __init__(self, config: Config, routes: tuple[Route[Any, Any], ...] = ROUTES) -> None:
        """`routes`: the trigger table it serves and replays (worker/registry.py)."""
        self.config = config
        self.routes = routes
        self.name = config.shard_name or socket.gethostname()
        self.telemetry = Telemetry()
        self.nodes: dict[int, PartitionNode] = {}
        self.nc: Any = None
        self.leases: Leases | None = None
        self.plog: PartitionLog | None = None
        self.connection_lost = asyncio.Event()
        self.lost_reason = ""
        self._subscriptions: dict[int, Any] = {}
        self._free_since: dict[int, float] = {}
        self._service: MemoryService | None = None
        self._balancer: asyncio.Task[None] | None = None
        self.snapshots: Snapshots | None = None
        self._snapshotter: asyncio.Task[None] | None = None
        self._embedder: Any = None
        self.shared: Shared | None = None
        self._replayer = Replayer(all_writes(routes))
        self._by_verb = by_verb(routes)
        self._serving: set[asyncio.Task[None]] = set()
        self._crons: dict[int, asyncio.Task[None]] = {}
        self.schedule = Schedule(
            tuple(default_jobs(config.consolidate_cron, config.evict_cron, config.merge_threshold)),
            ZoneInfo(config.cron_tz),
        )
        self._ingest: Ingest | None = None
        self.dispatcher: Dispatcher | None = None
        self._metrics: MetricsServer | None = None

    def _owned_readers(self) -> list[Readers]:
        return [n.services.readers for n in self.nodes.values() if n.owner and n.services]

    def owned(self, partition: int) -> PartitionNode | None:
        node = self.nodes.get(partition)
        return node if node is not None and node.owner else None

    def _nats_closed(self, reason: str) -> None:
        self.lost_reason = reason
        self.connection_lost.set()

    async def start(self) -> None:
        config = self.config
        self.nc = nc = await connect(config.nats_url, config, on_closed=self._nats_closed)
        js = nc.jetstream()
        try:
            await js.account_info()
        except Exception as error:
            raise ShardSetupError(
                f"sharded mode needs JetStream on the NATS servers ({type(error).__name__}: "
                f"{error})"
            ) from None
        self.plog = plog = PartitionLog(js, config.partitions, config.replicas)
        await _patiently(plog.ensure)
        kv = await _patiently(lambda: open_bucket(js, config.lease_ttl, config.replicas))
        self.leases = Leases(kv, self.name, config.lease_ttl)
        store = await _patiently(lambda: open_store(js, config.replicas))
        self.snapshots = Snapshots(js, store, config.partitions)
        # What every partition's storage is handed, and what dispatch reads beside them. One
        # recall gate for the process, its budget of the shard's seconds: a recall on any
        # partition holds back every partition's writer, as it holds back single mode's
        # (worker/recalls_first.py).
        self.shared = shared = Shared(
            config=config, gate=RecallsFirst(config.recalls_first_ms), telemetry=self.telemetry,
            grants=load_grants(config), nc=nc,
        )  # fmt: skip
        self._embedder = make_embedder(config, nc, shared.gate)
        router = Router(
            nc,
            config.partitions,
            self.owned,
            self._superseded,
            wait_for_owner=2 * config.lease_ttl,
        )
        self.dispatcher = dispatcher = Dispatcher(
            shared, self.routes, self.telemetry, executor=router
        )
        self._service = MemoryService(nc, dispatcher, "")
        await self._service.start(self.routes, self.telemetry.health.metadata)
        if config.ingest:  # durable ingestion, routed like a request
            self._ingest = Ingest(nc, dispatcher, tenancy=config.tenancy, replicas=config.replicas)
            await _patiently(self._ingest.start)
        if config.metrics_port:  # counts add up over the partitions this shard owns
            self._metrics = MetricsServer(
                self.telemetry, OwnedReads(self._owned_readers), config.metrics_host,
                config.metrics_port,
            )  # fmt: skip
            await self._metrics.start()
        await self._balance_once()
        self._balancer = asyncio.create_task(self._balance_forever())
        owned = lambda: [node for node in self.nodes.values() if node.owner]  # noqa: E731
        self._snapshotter = asyncio.create_task(
            snapshot_forever(self.snapshots, owned, config.snapshot_interval)
        )
        log.info("shard.started", shard=self.name, partitions=config.partitions)

    async def _balance_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.lease_ttl / 3)
            await self._balance_once()

    async def _balance_once(self) -> None:
        try:
            await self._balance()
        except Exception as error:  # the bucket electing a leader, a node down: next round
            log.warning("shard.balance_failed", shard=self.name, error=repr(error))

    async def _balance(self) -> None:
        assert self.leases is not None
        leases = self.leases
        await leases.beat()
        live = await leases.live_shards() or [self.name]
        loop = asyncio.get_running_loop()
        for partition in range(self.config.partitions):
            ranked = preference(partition, live)
            if partition in leases.held:
                node = self.nodes.get(partition)
                verdict = await leases.renew(partition, 0 if node is None else node.applied)
                if verdict == "lost":
                    await self._demote(partition, "lease lost")
                elif verdict == "held" and ranked[0] != self.name:
                    await self._demote(partition, f"handed back to {ranked[0]}")
                    await leases.release(partition)
                continue
            keepers = ranked[: 1 + self.config.standbys]
            if self.name not in keepers:
                await self._drop(partition)
                continue
            holder = await leases.holder(partition)
            if holder is None:
                since = self._free_since.setdefault(partition, loop.time())
                waited = loop.time() - since >= self.config.lease_ttl
                if (ranked[0] == self.name or waited) and await leases.acquire(partition):
                    await self._promote(partition)
                continue
            self._free_since.pop(partition, None)
            if holder != self.name:
                await self._standby(partition)

    async def _node(self, partition: int) -> PartitionNode:
        node = self.nodes.get(partition)
        if node is None:
            assert self.plog is not None and self.snapshots is not None
            assert self.shared is not None
            node = PartitionNode(
                partition,
                self.shared,
                self._embedder,
                self.plog,
                self._replayer,
                lease_fresh=lambda: self._lease_fresh(partition),
                restore=self.snapshots.restore,
            )
            await node.open()
            self.nodes[partition] = node
        return node

    def _lease_fresh(self, partition: int) -> bool:
        assert self.leases is not None
        held = self.leases.held.get(partition)
        return held is not None and self.leases.clock() - held.sent_at < self.config.lease_ttl

    async def _standby(self, partition: int) -> None:
        node = await self._node(partition)
        if not node.owner:
            node.follow()

    async def _promote(self, partition: int) -> None:
        self._free_since.pop(partition, None)
        node = await self._node(partition)
        await node.stop_following()
        replayed = await node.catch_up()
        node.owner = True
        # The owner gives vectors to memories stored without one (logged like any write).
        assert node.storage is not None
        node.storage.start_backfill()

        async def accept(msg: Any) -> None:
            task = asyncio.create_task(
                serve_partition(
                    self.nc, node, msg, lambda: self._superseded(partition), self._by_verb
                )
            )
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)

        self._subscriptions[partition] = await self.nc.subscribe(
            f"memory.p.{partition}.>", queue=f"memory-p{partition}", cb=accept
        )
        if self.schedule.jobs:
            assert node.services is not None
            scheduler = partition_scheduler(node.services, self.schedule, self.telemetry.jobs)
            self._crons[partition] = asyncio.create_task(scheduler.run())
        log.info("shard.owns", shard=self.name, partition=partition, replayed=replayed,
                 applied=node.applied)  # fmt: skip

    def _superseded(self, partition: int) -> asyncio.Task[None]:
        """Another shard wrote to the partition: stop serving it at once. The router awaits the
        returned step-down before it forwards the refused request, so that the request cannot
        reach this shard's own subscription while it drains (where it would be dropped, and its
        caller wait out the forward timeout)."""
        demote = self._demote(partition, "superseded")
        stepping_down = asyncio.get_running_loop().create_task(demote)
        if self.leases is not None:
            self.leases.held.pop(partition, None)
        return stepping_down

    async def _demote(self, partition: int, why: str) -> None:
        cron = self._crons.pop(partition, None)
        if cron is not None:
            cron.cancel()
        node = self.nodes.get(partition)
        subscription = self._subscriptions.pop(partition, None)
        if subscription is not None:
            # Drained, not dropped: a request already delivered (one this shard forwarded to
            # itself on stepping down, say) is answered 503 and retried, where an unsubscribe
            # discarded it and its caller waited out the 30 s forward timeout.
            with contextlib.suppress(Exception):
                await subscription.drain()
        if node is not None and node.storage is not None:
            await node.storage.stop_backfill()
        if node is not None and node.owner:
            node.owner = False
            log.info("shard.steps_down", shard=self.name, partition=partition, why=why)

    async def _drop(self, partition: int) -> None:
        node = self.nodes.pop(partition, None)
        if node is not None:
            await self._demote(partition, "not a keeper")
            await node.close()

    async def stop(self) -> None:
        for task in (self._balancer, self._snapshotter):
            if task is not None:
                await cancelled(task)
        if self._metrics is not None:
            await self._metrics.stop()
        if self._ingest is not None:
            await self._ingest.stop(timeout=DRAIN_SECONDS)
        if self._service is not None:
            await self._service.stop(timeout=DRAIN_SECONDS)
        for partition in list(self._subscriptions):
            await self._demote(partition, "stopping")
        if self._serving:
            await asyncio.wait(set(self._serving), timeout=DRAIN_SECONDS)
        if self.leases is not None:
            for partition in list(self.leases.held):
                await self.leases.release(partition)
        for node in list(self.nodes.values()):
            await node.close()
        self.nodes.clear()
        if self._embedder is not None:
            await self._embedder.close()
        if self.nc is not None and not self.nc.is_closed:
            await self.nc.drain()
        log.info("shard.stopped", shard=self.name)


async def cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel the task and wait for its end. A cancellation can be lost on its way (nats-py
    swallows CancelledError in a flush; Python 3.11's wait_for returns a result that arrived
    with the cancellation), which left a shard's stop waiting forever on its balancer: so the
    task is cancelled again until it ends."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)
    with contextlib.suppress(asyncio.CancelledError):
        await task
