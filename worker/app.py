"""Start in order: telemetry, embedded NATS server, the NATS connection, the storage unit
(database, index, writer: worker/storage.py), embedder, backfill, service, ingest, metrics,
scheduler; stop in the reverse order (an exit stack), except that the connection is drained
before the writer stops.

The connection comes before the database so that a worker that cannot reach NATS creates
nothing (no file, no folder) before it gives up (worker/reachability.py).

Shutdown stops the scheduler and the service's subscriptions first, lets requests in flight
finish, and only then closes the writer and the file, so nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import inspect
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import apsw
import structlog

from scheduler.jobs import Schedule, default_jobs
from scheduler.runner import Scheduler
from worker.affinity import every_cpu, pin_to_one_cpu
from worker.bus import MemoryService
from worker.config import Config
from worker.connection import connect
from worker.dispatch import Dispatcher
from worker.embedded import EmbeddedServer
from worker.embedders.configured import make_embedder
from worker.event_loop import running_loop_kind
from worker.ingest import Ingest
from worker.metrics import MetricsServer
from worker.recall_index.release import keep_freed_blocks
from worker.recalls_first import RecallsFirst
from worker.redact import redact
from worker.registry import ROUTES
from worker.route import Route
from worker.services import Services
from worker.shards.app import ShardApp
from worker.storage import DRAIN_SECONDS, Shared, Storage
from worker.telemetry import JobRecord, Telemetry
from worker.tenancy import load_grants
from worker.writer import Writer

log = structlog.get_logger()
SWITCH_INTERVAL_S = 0.0005


class App:
    def __init__(self, config: Config, routes: tuple[Route[Any, Any], ...] = ROUTES) -> None:
        """`routes`: the trigger table it serves (worker/registry.py; a test may add a row)."""
        self.config = config
        self.routes = routes
        self.embedded: EmbeddedServer | None = None
        self.nc: Any = None
        self.services: Services | None = None
        self.dispatcher: Dispatcher | None = None
        self.service: MemoryService | None = None
        self.scheduler: Scheduler | None = None
        self.ingest: Ingest | None = None
        self.metrics: MetricsServer | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._stack = contextlib.AsyncExitStack()
        # Known from the configuration before anything starts: what memory::stats, metrics,
        # dispatch, the scheduler and the maintenance report read and write.
        self.schedule = Schedule(
            tuple(default_jobs(config.consolidate_cron, config.evict_cron, config.merge_threshold)),
            ZoneInfo(config.cron_tz),
        )
        self.telemetry = Telemetry(
            next_fires=self.schedule.next_fires,
            jobs={job.name: JobRecord(cron=job.expression) for job in self.schedule.jobs},
        )
        self.storage: Storage | None = None
        self.connection_lost = asyncio.Event()
        self.lost_reason = ""
        self._started = False

    @property
    def _writer(self) -> Writer | None:
        return None if self.storage is None else self.storage.writer

    @property
    def _conn(self) -> apsw.Connection | None:
        """The writer's connection to the file (None before it is opened)."""
        return None if self.storage is None else self.storage.conn

    def _nats_closed(self, reason: str) -> None:
        self.lost_reason = reason
        self.connection_lost.set()

    @property
    def nats_url(self) -> str:
        return self.config.nats_url or (self.embedded.url if self.embedded else "")

    async def start(self) -> None:
        """Each step that starts something pushes its stop onto the exit stack, so stop() undoes
        them in the reverse order by construction; a start that fails part-way (a damaged file,
        NATS refusing, a signal) stops at once what it had started."""
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            raise

    async def _start(self) -> None:
        config = self.config
        # The event loop, the writer and the reader threads hand the GIL to each other on every
        # request; Python's default 5 ms switch interval would add up to that to a recall.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        db_path = Path(config.db_path)
        telemetry = self.telemetry
        if not config.nats_url:
            # Started first so that it stops last, after the database is closed.
            self.embedded = embedded = EmbeddedServer(
                port=config.embedded_port, store_dir=db_path.parent / "nats"
            )
            self._on_stop("embedded", embedded.stop)
            await embedded.start()
        if config.pin_threads:  # the loop is pinned once started (below): threads it makes
            asyncio.get_running_loop().set_default_executor(
                concurrent.futures.ThreadPoolExecutor(initializer=every_cpu)
            )
        self.nc = nc = await connect(self.nats_url, config, on_closed=self._nats_closed)
        # Closes it if the start fails before the drain below is pushed (skipped once drained).
        self._on_stop("nats", nc.close, needs_nats=True)
        shared = Shared(
            config=config,
            gate=RecallsFirst(config.recalls_first_ms),
            telemetry=telemetry,
            grants=load_grants(config),
            nc=nc,
        )
        self.storage = storage = Storage(db_path, shared, synchronous=config.synchronous)
        # Its stops run after the NATS connection is drained (below): the access counts of
        # recalls already answered, the writer, the index's snapshots, the readers, the file.
        self._on_stop("storage", storage.close)
        await storage.open()
        self._on_stop("nats", nc.drain, needs_nats=True)
        self.services = services = storage.serve(make_embedder(config, nc, shared.gate))
        self._on_stop("embedder", services.embedder.close)
        storage.start_backfill()
        self._on_stop("backfill", storage.stop_backfill)
        self.dispatcher = Dispatcher(services, self.routes, telemetry)
        self.service = service = MemoryService(nc, self.dispatcher, config.subject_prefix)
        # Stopping takes no more requests, then waits for those in flight (up to DRAIN_SECONDS).
        self._on_stop("service", lambda: service.stop(timeout=DRAIN_SECONDS), needs_nats=True)
        await service.start(self.routes, telemetry.health.metadata)
        if config.ingest:
            await self._start_ingest()
        if config.metrics_port:
            self.metrics = metrics = MetricsServer(
                telemetry, services.readers, config.metrics_host, config.metrics_port
            )
            await metrics.start()
            self._on_stop("metrics", metrics.stop)
        self.scheduler = Scheduler(
            list(self.schedule.jobs),
            tz=self.schedule.tz,
            writer=services.writer,
            fire=self._fire,
            clock=services.clock,
            records=telemetry.jobs,
        )
        self._tasks.append(asyncio.create_task(self.scheduler.run()))
        self._tasks.append(asyncio.create_task(storage.watch_other_writers()))
        self._on_stop("tasks", self._cancel_tasks)
        if config.pin_threads:  # last: what started so far (a model's threads) keeps every CPU
            pin_to_one_cpu(also=[services.writer.native_id])
        self._started = True
        log.info(
            "worker.started",
            nats=redact(self.nats_url),
            db=str(db_path),
            embedder=config.embedder,
            loop=running_loop_kind(),
        )

    def _on_stop(self, phase: str, step: Callable[[], Any], *, needs_nats: bool = False) -> None:
        """Push a stop phase. It runs even if an earlier one failed (a connection the server
        closed must not keep the database open); a failure is logged, not raised. Phases that
        talk to NATS are skipped once the connection is closed for good."""

        async def stop() -> None:
            if needs_nats and (self.nc is None or self.nc.is_closed):
                return
            try:
                result = step()
                if inspect.isawaitable(result):
                    await result
            except Exception as error:
                log.warning("worker.stop_phase_failed", phase=phase, error=type(error).__name__)

        self._stack.push_async_callback(stop)

    async def _start_ingest(self) -> None:
        assert self.dispatcher is not None
        ingest = Ingest(
            self.nc, self.dispatcher, self.config.subject_prefix, tenancy=self.config.tenancy
        )
        try:
            await ingest.start()
        except Exception as error:
            log.error(
                "ingest.unavailable",
                error=f"{type(error).__name__}: {error}",
                hint="durable ingestion needs JetStream on the NATS server",
            )
            return
        self.ingest = ingest
        self._on_stop("ingest", lambda: ingest.stop(timeout=DRAIN_SECONDS), needs_nats=True)

    async def _fire(self, trigger: str, request: bytes) -> object:
        assert self.dispatcher is not None
        return await self.dispatcher.handle(trigger, request, source="schedule")

    async def _cancel_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def stop(self) -> None:
        """Undo start in reverse: the scheduler's tasks, metrics, ingest and the service stop
        first (in-flight requests finish), then the backfill, the embedder, the NATS connection
        (drained), the writer, the database and the readers, and the embedded server last. A
        start that failed has undone itself and logs nothing more: its one line says why."""
        await self._stack.aclose()
        if self._started:
            log.info("worker.stopped")


# The collector's youngest generation, in objects (Python's default is 700). A request holds a
# few dozen tracked objects while it runs, so at 64 stores in flight the default collected
# almost every batch: over 10 000 stores 600 young collections and 5 full ones (each walking
# every object start-up made, ~20 ms), 0.15 s in all, about 12 us of each store's CPU; with
# this and start-up frozen, a few ms (issue 33).
GC_YOUNGEST = 10_000


def settle_collector() -> None:
    """Once the worker has started: what start-up made (modules, the table, the index) is moved
    out of the collector's way for good (gc.freeze), and the youngest generation made large
    enough for the requests in flight. Only the daemon does it: it owns its process."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNGEST, middle, oldest)


async def run(config: Config) -> None:
    """The daemon: run until SIGTERM or SIGINT, then shut down cleanly."""
    keep_freed_blocks()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    app: App | ShardApp = ShardApp(config) if config.mode == "sharded" else App(config)
    stopped = asyncio.create_task(stop.wait())
    try:
        # Start-up waits for a NATS server that is not up yet (up to the reconnect budget); a
        # signal meanwhile must end that wait, not queue behind it.
        starting = asyncio.create_task(app.start())
        await asyncio.wait([starting, stopped], return_when="FIRST_COMPLETED")
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            log.info("worker.stopping", during="start")
            return
        starting.result()
        settle_collector()
        lost = asyncio.create_task(app.connection_lost.wait())
        await asyncio.wait([lost, stopped], return_when="FIRST_COMPLETED")
        if app.connection_lost.is_set():
            raise ConnectionError(app.lost_reason)
        log.info("worker.stopping")
    finally:
        stopped.cancel()
        await app.stop()
