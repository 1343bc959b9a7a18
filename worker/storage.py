"""The storage unit: one SQLite file and everything that serves it, opened and closed in one
order. Single mode opens one (worker/app.py); a shard opens one per partition it holds
(worker/shards/node.py).

A unit is the file (WAL, migrated), its readers (a small thread pool, a connection each), the
writer thread (group commit, worker/writer.py), the in-memory recall index following the file's
change log (its snapshots in `<file>.index/`, worker/recall_index/persist.py), the vector
backfill, and the `Services` a trigger is handed. What is per process is built once and handed
to every unit of the process (`Shared`, and the embedder): above all the recall gate
(worker/recalls_first.py). The units of a shard share its cores as single mode's one unit
does, so a recall on any partition holds back the writers of all of them, as it holds back
single mode's writer.

Open: the readers and the index (nothing on disk yet); the file, created if missing, with WAL;
a quick check, so that a damaged file is refused before anything is served from it; the
migrations; what the caller keeps beside them (a partition's applied log sequence); the index
following the change log from its end; the writer thread, which waits for the recalls in
progress before each batch. A failure part-way closes what was opened; a SQLite error becomes
a DatabaseUnusable naming the file.

Close, in reverse, each step even if one before it failed (the failure is logged): the
backfill; the access counts of recalls already answered, on their way to the writer; the
writer, its queued jobs committed; the index's snapshots worth writing; the readers'
connections, then the writer's. The blocking steps run on a thread, never on the event loop: a
partition's writer job may be waiting for the loop to append its batch to the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import structlog

from handlers.recall.vector_index import keeps_codes
from worker.config import Config
from worker.db import DatabaseUnusable, Synchronous, migrate, open_db, quick_check, unusable
from worker.embedders import Embedder
from worker.embedders.configured import replaces_vectors
from worker.readers import Readers
from worker.recall_index.backfill import Backfill
from worker.recall_index.index import MemoryIndex
from worker.recalls_first import RecallsFirst
from worker.services import Services, wall_clock_ms
from worker.telemetry import Telemetry
from worker.tenancy import Grants
from worker.topic_titles import TopicTitler
from worker.writer import Writer

log = structlog.get_logger()
# The longest a stop waits for work in flight: requests, the access counts of recalls answered.
DRAIN_SECONDS = 8.0
BeforeCommit = Callable[[apsw.Connection, list[tuple[bool, Any]]], None]


@dataclass(frozen=True, kw_only=True)
class Shared:
    """What one process hands every storage unit it opens: built once, never per partition.
    It is also what dispatch reads beside the units (a `Context`, worker/services.py). The
    embedder comes to `Storage.serve`: single mode makes it after its file is open."""

    config: Config
    gate: RecallsFirst
    telemetry: Telemetry
    grants: Grants
    nc: Any = None
    clock: Callable[[], int] = wall_clock_ms
    titler: TopicTitler = field(default_factory=TopicTitler)  # one bound for every partition


def index_dir(db_path: Path, config: Config) -> Path | None:
    """Where the recall index persists its agents (worker/recall_index/persist.py): beside the
    database, `<file>.index/`; None when switched off."""
    return Path(f"{db_path}.index") if config.index_persist else None


class Storage:
    def __init__(
        self,
        path: Path,
        shared: Shared,
        *,
        synchronous: Synchronous,
        writer_name: str = "memory-writer",
        before_commit: BeforeCommit | None = None,
        prepare: Callable[[apsw.Connection], None] | None = None,
    ) -> None:
        """`synchronous`: single mode syncs each commit (the file is the durable copy); a
        partition need not (its log is). `before_commit` runs in each batch's transaction (a
        partition appends the batch to its log there, worker/writer.py); `prepare` runs once
        after the migrations, before the index and the writer start."""
        self.path = path
        self.shared = shared
        self._synchronous = synchronous
        self._writer_name = writer_name
        self._before_commit = before_commit
        self._prepare = prepare
        self.readers: Readers | None = None
        self.index: MemoryIndex | None = None
        self.conn: apsw.Connection | None = None
        self.writer: Writer | None = None
        self.services: Services | None = None
        self._stack = contextlib.AsyncExitStack()

    async def open(self) -> None:
        try:
            await self._open()
        except BaseException:
            await self.close()
            raise

    async def _open(self) -> None:
        config, path = self.shared.config, self.path
        self.readers = readers = Readers(path)
        self._on_close("database", self._close_database)
        self.index = index = MemoryIndex(
            readers,
            config.index_memory_mb * 1024 * 1024,
            self.shared.clock,
            cache_dir=index_dir(path, config),
            codes=keeps_codes(config.vector_index, config.recall),
        )
        try:
            self.conn = conn = open_db(path, synchronous=self._synchronous)
            await _quick_check(conn, path)
            migrate(conn)
            if self._prepare is not None:
                self._prepare(conn)
            index.attach(conn)
        except apsw.Error as error:
            raise unusable(path, error) from None
        # After the writer stops, before the file closes: the snapshots worth writing.
        self._on_close("index", index.close)
        self.writer = writer = Writer(
            conn,
            after_commit=index.after_commit,
            before_commit=self._before_commit,
            before_batch=self.shared.gate.wait_in_thread,
            name=self._writer_name,
        )
        writer.start()
        self._on_close("writer", writer.stop)
        # Before the writer stops: the access counts of recalls already answered.
        self._stack.push_async_callback(self._wait_background)

    def serve(self, embedder: Embedder) -> Services:
        """The services a trigger is handed here: this unit's writer, readers and index, with
        what the process shares."""
        assert self.writer is not None and self.readers is not None and self.index is not None
        shared = self.shared
        self.services = Services(
            config=shared.config,
            writer=self.writer,
            readers=self.readers,
            index=self.index,
            embedder=embedder,
            nc=shared.nc,
            keyword_mode=shared.config.keyword,
            clock=shared.clock,
            telemetry=shared.telemetry,
            grants=shared.grants,
            recalls_first=shared.gate,
            titler=shared.titler,
        )
        return self.services

    def start_backfill(self) -> None:
        """Give vectors to the memories stored without one (worker/recall_index/backfill.py);
        single mode from the start, a partition while its shard owns it."""
        services = self.services
        assert services is not None
        if services.backfill is None:
            replace = replaces_vectors(services.config, services.embedder)
            services.backfill = Backfill(
                services.embedder, services.readers, services.writer, replace=replace
            )
            services.backfill.start()

    async def stop_backfill(self) -> None:
        if self.services is not None and self.services.backfill is not None:
            backfill, self.services.backfill = self.services.backfill, None
            await backfill.close()

    async def watch_other_writers(self) -> None:
        """An empty commit each second, so that the index notices another process's write
        (`MemoryIndex.after_commit`) even when this one writes nothing. Single mode runs it:
        another process may write its file. A partition's file has one writer, its owner's."""
        assert self.writer is not None
        writer = self.writer
        while True:
            await asyncio.sleep(1.0)
            await writer.run(lambda conn: None, durable=False)

    async def close(self) -> None:
        """Undo open in reverse (the module's docstring); closing twice does nothing."""
        await self.stop_backfill()
        await self._stack.aclose()

    def _on_close(self, phase: str, step: Callable[[], None]) -> None:
        """Push a blocking close step, run on a thread; one that fails is logged, and the
        steps after it still run (a writer that fails to stop must not keep the file open)."""

        async def close() -> None:
            try:
                await asyncio.to_thread(step)
            except Exception as error:
                log.warning("worker.stop_phase_failed", phase=phase, db=str(self.path),
                            error=type(error).__name__)  # fmt: skip

        self._stack.push_async_callback(close)

    async def _wait_background(self) -> None:
        if self.services is not None:
            self.services.titler.cancel(self.services)  # an LLM's answer is not waited for
            self.services.accesses.hurry()  # the access counts held, written now
        if self.services is not None and self.services.background:
            await asyncio.wait(set(self.services.background), timeout=DRAIN_SECONDS)

    def _close_database(self) -> None:
        """The readers' connections, then the writer's."""
        if self.readers is not None:
            self.readers.close()
        if self.conn is not None:
            self.conn.close()


async def _quick_check(conn: apsw.Connection, path: Path) -> None:
    """Refuse a damaged file before serving from it. The check reads the whole file (measured
    in the README); it runs on a thread, and a signal meanwhile interrupts it."""
    started = time.perf_counter()
    cancelled = threading.Event()
    checking = asyncio.get_running_loop().run_in_executor(None, quick_check, conn, path, cancelled)
    try:
        await asyncio.shield(checking)
    except asyncio.CancelledError:
        cancelled.set()
        conn.interrupt()
        with contextlib.suppress(apsw.InterruptError, DatabaseUnusable):
            await checking
        raise
    duration_ms = round((time.perf_counter() - started) * 1000, 1)
    log.info("database.checked", check="quick_check", duration_ms=duration_ms)
