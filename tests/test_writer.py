"""The single writer on a real SQLite file, without a bus: a failing job rolling back alone,
group commit, the sync level per batch, replies only after COMMIT, and a clean stop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from tests.support import wait_until
from worker.db import migrate, open_db
from worker.writer import Writer

Job = Callable[[apsw.Connection], Any]
SYNC_NORMAL, SYNC_FULL = 1, 2


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    conn = open_db(path)
    migrate(conn)
    conn.close()
    return path


@pytest.fixture
def commits() -> list[float]:
    """When each successful COMMIT's after_commit hook ran."""
    return []


@pytest.fixture
def writer(db_path: Path, commits: list[float]) -> Iterator[Writer]:
    conn = open_db(db_path, synchronous="full")
    writer = Writer(conn, after_commit=lambda _: commits.append(time.monotonic()))
    writer.start()
    yield writer
    writer.stop()
    conn.close()


def stored_ids(db_path: Path) -> set[str]:
    """The memory ids another connection sees, i.e. what is committed."""
    conn = open_db(db_path)
    try:
        return {str(row[0]) for row in conn.execute("SELECT id FROM memories")}
    finally:
        conn.close()


def put(memory_id: str, role: str = "user") -> Job:
    """A job that inserts one memory and returns its id."""

    def job(conn: apsw.Connection) -> str:
        conn.execute(
            "INSERT INTO memories (id, agent_id, role, content, hash, importance, confidence, "
            "last_accessed, timestamp, created_at) VALUES (?, 'a', ?, ?, ?, 0.5, 1.0, 0, 0, 0)",
            (memory_id, role, memory_id, memory_id),
        )
        return memory_id

    return job


def put_then_fail(memory_id: str) -> Job:
    def job(conn: apsw.Connection) -> None:
        put(memory_id)(conn)
        raise ValueError(f"job {memory_id} failed after writing")

    return job


def read_sync(conn: apsw.Connection) -> int:
    return int(conn.pragma("synchronous"))


async def one_batch(
    writer: Writer, jobs: list[tuple[Job, bool]]
) -> tuple[list[asyncio.Task[Any]], threading.Event]:
    """Queue the jobs while the writer is held inside a job of its own, so that they all wait in
    the queue and run as the next batch once the returned gate is set."""
    entered, gate = threading.Event(), threading.Event()

    def hold(_: apsw.Connection) -> None:
        entered.set()
        gate.wait(10)

    held = asyncio.create_task(writer.run(hold))
    assert await asyncio.to_thread(entered.wait, 10)
    tasks = [asyncio.create_task(writer.run(job, durable=durable)) for job, durable in jobs]
    await queued(writer, len(jobs))
    assert not any(task.done() for task in tasks)
    return [held, *tasks], gate


async def queued(writer: Writer, count: int) -> None:
    """Until `count` jobs wait in the writer's queue (behind one it is held in)."""
    await wait_until(lambda: writer.queued == count, f"{count} jobs queued", timeout=10)


async def settle(tasks: list[asyncio.Task[Any]]) -> list[Any]:
    return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)


async def test_a_failing_job_rolls_back_alone_and_its_batch_mates_commit(
    writer: Writer, db_path: Path, commits: list[float]
) -> None:
    """Within one batch (one COMMIT), a job that raised after writing, and one that broke a CHECK
    constraint, leave nothing behind; the jobs before and after them are committed."""
    tasks, gate = await one_batch(
        writer,
        [
            (put("before"), True),
            (put_then_fail("raised"), True),
            (put("bad-role", role="robot"), True),
            (put("after"), True),
        ],
    )
    gate.set()
    await settle(tasks)
    assert len(commits) == 2  # the holding job's batch, then all four in one
    assert stored_ids(db_path) == {"before", "after"}


async def test_a_failing_job_does_not_fail_its_batch_mates(writer: Writer) -> None:
    """Each job's await gets its own outcome: the batch-mates' results, the failing jobs' own
    errors (a Python exception, an SQLite constraint error)."""
    tasks, gate = await one_batch(
        writer,
        [
            (put("first"), True),
            (put_then_fail("raised"), True),
            (put("bad-role", role="robot"), True),
            (put("last"), True),
        ],
    )
    gate.set()
    _, first, raised, bad_role, last = await settle(tasks)
    assert (first, last) == ("first", "last")
    assert isinstance(raised, ValueError) and "raised" in str(raised)
    assert isinstance(bad_role, apsw.ConstraintError) and "CHECK" in str(bad_role)


def counted(job: Job, calls: list[str], name: str) -> Job:
    def run(conn: apsw.Connection) -> Any:
        calls.append(name)
        return job(conn)

    return run


def fail_before_writing(conn: apsw.Connection) -> None:
    raise LookupError("no such memory")


async def test_a_job_that_fails_before_writing_runs_its_batch_once(writer: Writer) -> None:
    """A job that raises without having changed a row needs no undoing: its batch-mates run
    once, commit, and the failing job gets its own error."""
    calls: list[str] = []
    tasks, gate = await one_batch(
        writer,
        [
            (counted(put("first"), calls, "first"), True),
            (counted(fail_before_writing, calls, "failing"), True),
            (counted(put("last"), calls, "last"), True),
        ],
    )
    gate.set()
    _, first, failing, last = await settle(tasks)
    assert (first, last) == ("first", "last") and isinstance(failing, LookupError)
    assert calls == ["first", "failing", "last"]


async def test_a_job_that_fails_after_writing_runs_its_batch_again_in_savepoints(
    writer: Writer, db_path: Path
) -> None:
    """A job that raises after it wrote makes the batch roll back and run again, each job in a
    savepoint: every job runs twice, and only the failing job's row is missing."""
    calls: list[str] = []
    tasks, gate = await one_batch(
        writer,
        [
            (counted(put("first"), calls, "first"), True),
            (counted(put_then_fail("raised"), calls, "raised"), True),
            (counted(put("last"), calls, "last"), True),
        ],
    )
    gate.set()
    _, first, raised, last = await settle(tasks)
    assert (first, last) == ("first", "last") and isinstance(raised, ValueError)
    assert calls == ["first", "raised", "first", "raised", "last"]
    assert stored_ids(db_path) == {"first", "last"}


class SubjournalFiles(apsw.VFS):
    """The default VFS, counting the bytes SQLite writes to statement journal files."""

    def __init__(self, name: str) -> None:
        self.name, self.written = name, 0
        super().__init__(name, "")

    def xOpen(self, name: Any, flags: list[int]) -> apsw.VFSFile:
        if flags[0] & apsw.SQLITE_OPEN_SUBJOURNAL:
            return _Counted(self, name, flags)
        return apsw.VFSFile("", name, flags)


class _Counted(apsw.VFSFile):
    def __init__(self, vfs: SubjournalFiles, name: Any, flags: list[int]) -> None:
        self._vfs = vfs
        super().__init__("", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        self._vfs.written += len(data)
        super().xWrite(data, offset)


async def test_a_batch_of_large_jobs_writes_no_statement_journal_file(db_path: Path) -> None:
    """Jobs that each change more than 64 KiB of pages commit without a statement journal on
    disk (a savepoint per job copied each job's pages to a temporary file: issue 33)."""
    vfs = SubjournalFiles(f"subjournal-files-{id(db_path)}")
    conn = apsw.Connection(str(db_path), vfs=vfs.name)
    conn.pragma("journal_mode", "wal")
    writer = Writer(conn)
    writer.start()
    try:

        def many(batch: int) -> Job:
            def job(conn: apsw.Connection) -> int:
                for n in range(40):
                    conn.execute(
                        "INSERT INTO memories (id, agent_id, role, content, hash, importance, "
                        "confidence, last_accessed, timestamp, created_at) "
                        "VALUES (?, 'a', 'user', ?, ?, 0.5, 1.0, 0, 0, 0)",
                        (f"{batch}-{n}", "x" * 2000, f"{batch}-{n}"),
                    )
                return batch

            return job

        tasks, gate = await one_batch(writer, [(many(batch), True) for batch in range(4)])
        gate.set()
        assert (await settle(tasks))[1:] == [0, 1, 2, 3]
        assert vfs.written == 0
    finally:
        writer.stop()
        conn.close()
        vfs.unregister()


async def test_a_batch_of_only_non_durable_jobs_commits_with_normal_and_the_next_durable_with_full(
    writer: Writer,
) -> None:
    """The connection's synchronous level, read inside each job: NORMAL when no job of the batch
    is durable, FULL again for the next durable batch, and FULL for a mixed batch."""
    assert await writer.run(read_sync) == SYNC_FULL
    assert await writer.run(read_sync, durable=False) == SYNC_NORMAL
    assert await writer.run(read_sync, durable=False) == SYNC_NORMAL
    assert await writer.run(read_sync) == SYNC_FULL
    tasks, gate = await one_batch(writer, [(read_sync, False), (read_sync, True)])
    gate.set()
    assert (await settle(tasks))[1:] == [SYNC_FULL, SYNC_FULL]


async def test_after_commit_runs_before_any_reply_of_the_batch_is_released(
    db_path: Path,
) -> None:
    """The hook (where the in-memory index catches up) has finished, and the rows are visible to
    another connection, before the first await of the batch returns."""
    events: list[tuple[str, float]] = []

    def after_commit(_: apsw.Connection) -> None:
        time.sleep(0.2)  # a slow hook on purpose: a reply released before it would show
        events.append(("hook", time.monotonic()))

    conn = open_db(db_path)
    writer = Writer(conn, after_commit=after_commit)
    writer.start()
    try:

        async def store(memory_id: str) -> set[str]:
            await writer.run(put(memory_id))
            events.append(("reply", time.monotonic()))
            return stored_ids(db_path)

        tasks, gate = await one_batch(writer, [])
        replies = [asyncio.create_task(store(f"m{n}")) for n in range(5)]
        await queued(writer, 5)
        gate.set()
        await settle(tasks)
        seen = await asyncio.wait_for(asyncio.gather(*replies), 10)
    finally:
        writer.stop()
        conn.close()
    assert all(ids >= {f"m{n}" for n in range(5)} for ids in seen)
    kinds = [kind for kind, _ in events]
    assert kinds == ["hook", "hook", *["reply"] * 5]  # the holding batch, then the five


async def test_a_failed_commit_fails_every_job_of_the_batch(
    writer: Writer, db_path: Path, commits: list[float]
) -> None:
    """A foreign key violation deferred to COMMIT (a session message without its session, with
    `PRAGMA defer_foreign_keys`) makes COMMIT fail: every job of the batch gets that error,
    nothing of the batch is stored, no hook runs, and the next batch commits normally."""

    def orphan_message(conn: apsw.Connection) -> str:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        conn.execute(
            "INSERT INTO session_messages VALUES "
            "('', 'a', 'no-such-session', 1, 'x', 'user', 0, NULL)"
        )
        return "inserted"  # the statement itself succeeds: the check waits for COMMIT

    tasks, gate = await one_batch(writer, [(put("innocent"), True), (orphan_message, True)])
    gate.set()
    _, innocent, orphan = await settle(tasks)
    for outcome in (innocent, orphan):
        assert isinstance(outcome, apsw.ConstraintError) and "FOREIGN KEY" in str(outcome)
    assert len(commits) == 1  # only the holding job's batch
    assert stored_ids(db_path) == set()
    assert await writer.run(put("next")) == "next"
    assert stored_ids(db_path) == {"next"}


async def test_stop_finishes_the_queued_jobs_before_the_thread_ends(
    writer: Writer, db_path: Path
) -> None:
    """Jobs queued when stop() is called are run, committed and answered."""
    tasks, gate = await one_batch(writer, [(put(f"m{n}"), True) for n in range(5)])
    stopping = asyncio.create_task(asyncio.to_thread(writer.stop))
    await queued(writer, 5 + 1)  # stop() queued its end behind the five, and waits
    assert not stopping.done()  # stop waits for the held job and the queue behind it
    gate.set()
    await asyncio.wait_for(stopping, 10)
    assert (await settle(tasks))[1:] == [f"m{n}" for n in range(5)]
    assert stored_ids(db_path) == {f"m{n}" for n in range(5)}


def test_processes_migrating_one_new_file_at_once_apply_each_step_once(tmp_path: Path) -> None:
    """Workers that start together on a new file (two on one database, a bench) all come up:
    each migration step is applied by whichever takes the write lock first, and skipped by the
    others, instead of failing with "table ... already exists"."""
    from worker.db import migrate, migrations, open_db

    for trial in range(10):
        path = tmp_path / f"new-{trial}.db"
        errors: list[BaseException] = []

        def start(path: Path = path, errors: list[BaseException] = errors) -> None:
            try:
                conn = open_db(path)
                migrate(conn)
                conn.close()
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=start) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        conn = open_db(path)
        assert int(conn.pragma("user_version")) == len(migrations())
        conn.close()
