"""Read-only work on a small pool of threads, each with its own connection (WAL readers never
block the writer or each other).

A thread that is free takes the next call of the key whose turn it is (a tenant, worker/turns.py
`TURN`), not the oldest call, and one key has at most `threads` of them at once, one fewer than
there are: a tenant's recall neither waits behind another tenant's queue of long ones (a 16 KiB
query's words are read and ranked here, about 50 ms each) nor for those in progress. The thread
that finishes a call takes the next itself, without a trip through the event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import apsw

from worker.affinity import every_cpu
from worker.db import open_db
from worker.turns import TURN

T = TypeVar("T")
# A call waiting for a thread: the work, and the future its caller awaits.
Call = tuple[Callable[[], Any], "concurrent.futures.Future[Any]"]


class Reads(Protocol):
    """What counts at scrape time read through: one database's readers, or on a shard every
    partition it owns, added up (worker/shards/fanout.py)."""

    async def run(self, fn: Callable[[apsw.Connection], T]) -> T: ...


class Readers:
    def __init__(self, path: str | Path, *, threads: int = 2) -> None:
        self._path = path
        self._local = threading.local()
        self._opened: list[apsw.Connection] = []
        self._guard = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            threads + 1, thread_name_prefix="reader", initializer=every_cpu
        )
        self._per_key = threads
        # Under _guard: calls waiting by key, keys in the order of their next turn; calls
        # running by key.
        self._waiting: dict[str, deque[Call]] = {}
        self._running: Counter[str] = Counter()

    def connection(self) -> apsw.Connection:
        """This thread's connection, opened on first use."""
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = open_db(self._path)
            self._local.conn = conn
            with self._guard:
                self._opened.append(conn)
        return conn

    def fresh(self) -> apsw.Connection:
        """A connection of its own, for a caller that closes it (index loads)."""
        return open_db(self._path)

    def idle(self) -> bool:
        """Whether no call is running or waiting on the threads."""
        with self._guard:
            return not self._waiting and not self._running

    def here(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run fn on the calling thread, on its own connection, inside one read transaction:
        for a short read while the threads are idle (`idle`), which the trip to a thread and
        back would double (worker/triggers/memory.py)."""
        conn = self.connection()
        with conn:
            result = fn(conn)
        return result

    async def run(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run fn on a reader thread inside one read transaction (one consistent snapshot)."""

        def call() -> T:
            conn = self.connection()
            with conn:
                result = fn(conn)
            return result

        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._guard:
            self._waiting.setdefault(TURN.get(), deque()).append((call, done))
        self._pool.submit(self._work)
        return await asyncio.wrap_future(done)

    def _work(self) -> None:
        """On a pool thread: run calls, each of the next key in turn below its bound, until
        none is left that may run (the thread that ends a key's call takes its next)."""
        while True:
            with self._guard:
                taken = self._take()
            if taken is None:
                return
            key, (call, done) = taken
            result: Any = None
            failed: BaseException | None = None
            run = done.set_running_or_notify_cancel()  # not given up while it waited
            try:
                if run:
                    try:
                        result = call()
                    except BaseException as error:
                        failed = error
            finally:
                # Before its caller hears of it: a caller that then asks `idle` gets yes.
                with self._guard:
                    self._running[key] -= 1
                    if not self._running[key]:
                        del self._running[key]
            if failed is not None:
                done.set_exception(failed)
            elif run:
                done.set_result(result)

    def _take(self) -> tuple[str, Call] | None:
        for key in list(self._waiting):
            if self._running[key] >= self._per_key:
                continue
            calls = self._waiting.pop(key)
            taken = calls.popleft()
            if calls:
                self._waiting[key] = calls  # to the back of the line
            self._running[key] += 1
            return key, taken
        return None

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._guard:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
