"""Read-only work on a small pool of threads, each with its own connection (WAL readers never
block the writer or each other)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import apsw

from worker.db import open_db

T = TypeVar("T")


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
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="reader")

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

    async def run(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run fn on a reader thread inside one read transaction (one consistent snapshot)."""

        def call() -> T:
            conn = self.connection()
            with conn:
                result = fn(conn)
            return result

        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._guard:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
