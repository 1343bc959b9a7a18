"""The single writer: one connection on one thread, with group commit.

Every write trigger runs here as a job. Jobs that arrive while a commit is in progress are run
together in the next transaction, and all of them are acknowledged only after the shared COMMIT
(and its fsync) returned. That keeps `synchronous=FULL` durability at a fraction of the fsyncs.

One failing job rolls back alone, yet jobs do not run in savepoints of their own at first: a
savepoint makes SQLite copy every page its job changes to a statement journal, which spills to a
temporary file past 64 KiB (issue 33: 15 writes to that file per store at 64 in flight, and as
many per recall for the access counts). A job that fails without having changed anything needs no
undoing; only when one fails after it wrote is the batch rolled back and run again, each job in a
savepoint (`_guarded`). So a job may run twice, its first run rolled back: it keeps its effects
in the connection, and what must follow its commit (a position in memory) follows its `run`.

Neighbouring jobs of a batch that are joinable with the same function run in one call of it
(`Joinable`): a batch of stores writes its memories by one INSERT, not one each. A run that
fails runs again job by job, undone first if it wrote.

Jobs cross between the event loop and the writer thread in bunches, not one by one: the jobs a
loop submits in one of its iterations go to the writer as one list (one wake-up of the thread),
and a batch's results come back to each loop in one callback (one wake-up of the loop).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import apsw

T = TypeVar("T")
MAX_BATCH = 256
_LEVELS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


class Joinable(NamedTuple):
    """A job that may run in one call with the jobs next to it in its batch that have the same
    `run_all`: run_all(connection, their items) returns their results in order, as their own
    functions would have one after the other. A batch of stores writes its memories that way
    by a few statements, not four per store (worker/writes.py `decide_and_apply_all`)."""

    run_all: Callable[[apsw.Connection, list[Any]], list[Any]]
    item: Any


@dataclass
class _Job:
    fn: Callable[[apsw.Connection], Any]
    durable: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    joinable: Joinable | None = None
    result: Any = None
    error: BaseException | None = field(default=None)


def _settle(jobs: list[_Job]) -> None:
    for job in jobs:
        if job.future.done():
            continue
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.result)


class Writer:
    def __init__(
        self,
        conn: apsw.Connection,
        *,
        after_commit: Callable[[apsw.Connection], None] | None = None,
        before_commit: Callable[[apsw.Connection, list[tuple[bool, Any]]], None] | None = None,
        before_batch: Callable[[], None] | None = None,
        name: str = "memory-writer",
    ) -> None:
        """after_commit runs on the writer thread after each successful COMMIT, before any job of
        the batch is acknowledged (the in-memory index catches up there). before_commit gets
        the (durable, result) of each job that succeeded, still inside the transaction: a shard
        appends the batch's decisions to its partition's log there (worker/shards/node.py), and
        if that raises, the whole batch rolls back and fails. before_batch runs on the writer
        thread before each batch is gathered: it may wait (worker/recalls_first.py)."""
        self._conn = conn
        self._after_commit = after_commit
        self._before_commit = before_commit
        self._before_batch = before_batch
        self._level = self._current_level = _LEVELS[int(conn.pragma("synchronous"))]
        self._jobs: queue.SimpleQueue[list[_Job] | None] = queue.SimpleQueue()
        # Per event loop, the jobs it submitted in its current iteration, handed over at its end.
        self._submitted: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        self._handed = self._taken = 0  # jobs handed to the thread, and taken by it
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._started = False

    def start(self) -> None:
        self._started = True
        self._thread.start()

    async def run(
        self,
        fn: Callable[[apsw.Connection], T],
        *,
        durable: bool = True,
        joinable: Joinable | None = None,
    ) -> T:
        """Run fn in a transaction on the writer thread; return once it is committed to disk.

        durable=False is for bookkeeping that may be lost on power loss (recall's access
        counts): a batch of only such jobs commits without an fsync; the next durable commit
        syncs it along with its own. `joinable`: fn's job as one of a run_all's items.
        """
        loop = asyncio.get_running_loop()
        job = _Job(fn, durable, loop, loop.create_future(), joinable)
        submitted = self._submitted.get(loop)
        if submitted is None:
            self._submitted[loop] = [job]
            loop.call_soon(self._hand_over, loop)
        else:
            submitted.append(job)
        result: T = await job.future
        return result

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop, after the callbacks that ran with the first of them: the jobs it
        submitted since, to the writer thread at once."""
        jobs = self._submitted.pop(loop, None)
        if jobs:
            self._handed += len(jobs)
            self._jobs.put(jobs)

    @property
    def native_id(self) -> int | None:
        """The writer thread's id in the kernel, once started."""
        return self._thread.native_id

    @property
    def queued(self) -> int:
        """What the writer thread has been handed and not taken yet: jobs, and a stop."""
        return self._handed - self._taken

    def stop(self) -> None:
        """Finish the queued jobs, then stop the thread (the caller closes the connection)."""
        if self._started:
            for loop in list(self._submitted):  # submitted but not yet handed over
                self._hand_over(loop)
            self._handed += 1
            self._jobs.put(None)
            self._thread.join()
            self._started = False

    def _loop(self) -> None:
        while True:
            first = self._jobs.get()
            if first is None:
                return
            if self._before_batch is not None:
                self._before_batch()
            batch = list(first)
            stop_after = False
            while len(batch) < MAX_BATCH:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop_after = True
                    self._taken += 1
                    break
                batch.extend(more)
            self._taken += len(batch)
            self._commit(batch)
            if stop_after:
                return

    def _commit(self, batch: list[_Job]) -> None:
        conn = self._conn
        level = self._level if any(job.durable for job in batch) else "NORMAL"
        if level != self._current_level:
            conn.pragma("synchronous", level)
            self._current_level = level
        try:
            conn.execute("BEGIN IMMEDIATE")
            if not _bare(conn, batch):
                if not conn.getautocommit():
                    conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                _guarded(conn, batch)
            if self._before_commit is not None:
                done = [(job.durable, job.result) for job in batch if job.error is None]
                self._before_commit(conn, done)
            conn.execute("COMMIT")
        except Exception as error:
            if not conn.getautocommit():
                conn.execute("ROLLBACK")
            for job in batch:
                job.error = job.error or error
        else:
            if self._after_commit is not None:
                self._after_commit(conn)
        by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        for job in batch:
            by_loop.setdefault(job.loop, []).append(job)
        for loop, jobs in by_loop.items():
            loop.call_soon_threadsafe(_settle, jobs)


def _bare(conn: apsw.Connection, batch: list[_Job]) -> bool:
    """Run the jobs one after the other in the open transaction, each run of joinable jobs with
    the same run_all in one call; False as soon as one fails after it changed rows (or its
    failure ended the transaction): then nothing of the batch holds, and every job is to run
    again. A run that fails before it changed anything runs again job by job."""
    start = 0
    while start < len(batch):
        end = _run_end(batch, start)
        if end - start == 1:
            if not _alone(conn, batch, batch[start]):
                return False
            start = end
            continue
        run = batch[start:end]
        before = conn.total_changes()
        try:
            results = _joined(run[0]).run_all(conn, [_joined(job).item for job in run])
            if len(results) != len(run):
                raise RuntimeError(f"run_all gave {len(results)} results for {len(run)} jobs")
        except Exception:
            if conn.total_changes() != before or conn.getautocommit():
                _forget(batch)
                return False
            if not all(_alone(conn, batch, job) for job in run):
                return False
        else:
            for job, result in zip(run, results, strict=True):
                job.result = result
        start = end
    return True


def _run_end(batch: list[_Job], start: int) -> int:
    """Where the run of jobs joinable with batch[start] ends (start + 1 when it is not)."""
    first = batch[start].joinable
    end = start + 1
    if first is None:
        return end
    while end < len(batch):
        joinable = batch[end].joinable
        if joinable is None or joinable.run_all != first.run_all:
            break
        end += 1
    return end


def _joined(job: _Job) -> Joinable:
    assert job.joinable is not None, "a run's jobs are joinable"
    return job.joinable


def _alone(conn: apsw.Connection, batch: list[_Job], job: _Job) -> bool:
    before = conn.total_changes()
    try:
        job.result = job.fn(conn)
    except Exception as error:
        if conn.total_changes() != before or conn.getautocommit():
            _forget(batch)
            return False
        job.error = error
    return True


def _forget(batch: list[_Job]) -> None:
    for job in batch:
        job.result = job.error = None


def _guarded(conn: apsw.Connection, batch: list[_Job]) -> None:
    """Run each job inside a savepoint of its own, which a failure rolls back alone."""
    for job in batch:
        try:
            with conn:  # a savepoint inside the outer transaction
                job.result = job.fn(conn)
        except Exception as error:
            job.error = error
