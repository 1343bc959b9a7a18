"""The single writer's joinable jobs (worker/writer.py `Joinable`): neighbours in a batch with
the same run_all run in one call, and a run that fails falls back to each job's own function,
undoing what it wrote first when it wrote something."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from tests.support import wait_until
from worker.db import migrate, open_db
from worker.writer import Joinable, Writer

Job = Callable[[apsw.Connection], Any]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    conn = open_db(path)
    migrate(conn)
    conn.close()
    return path


@pytest.fixture
def writer(db_path: Path) -> Iterator[Writer]:
    conn = open_db(db_path)
    writer = Writer(conn)
    writer.start()
    yield writer
    writer.stop()
    conn.close()


def insert(conn: apsw.Connection, memory_id: str) -> None:
    conn.execute(
        "INSERT INTO memories (id, agent_id, role, content, hash, importance, confidence, "
        "last_accessed, timestamp, created_at) VALUES (?, 'a', 'user', ?, ?, 0.5, 1.0, 0, 0, 0)",
        (memory_id, memory_id, memory_id),
    )


def stored_ids(db_path: Path) -> set[str]:
    conn = open_db(db_path)
    try:
        return {str(row[0]) for row in conn.execute("SELECT id FROM memories")}
    finally:
        conn.close()


class Calls:
    """A run_all and per-job functions that insert a memory named by their item, noting each
    call: ("all", [items]) or ("alone", item)."""

    def __init__(self, *, all_fails: str | None = None, alone_fails: str = "") -> None:
        self.made: list[tuple[str, Any]] = []
        self.all_fails = all_fails  # "before" or "after" writing
        self.alone_fails = alone_fails  # the item whose own function raises before writing

    def run_all(self, conn: apsw.Connection, items: list[Any]) -> list[Any]:
        self.made.append(("all", list(items)))
        if self.all_fails == "before":
            raise LookupError("the run failed before writing")
        for item in items:
            insert(conn, item)
        if self.all_fails == "after":
            raise ValueError("the run failed after writing")
        return [f"{item} together" for item in items]

    def alone(self, item: str) -> Job:
        def job(conn: apsw.Connection) -> str:
            self.made.append(("alone", item))
            if item == self.alone_fails:
                raise LookupError(f"{item} failed before writing")
            insert(conn, item)
            return f"{item} alone"

        return job


async def one_batch(writer: Writer, calls: Calls, items: list[str]) -> list[Any]:
    """The items' jobs queued behind a held job, so that they run as one batch; their
    outcomes. An item starting with "plain" is not joinable."""
    entered, gate = threading.Event(), threading.Event()

    def hold(_: apsw.Connection) -> None:
        entered.set()
        gate.wait(10)

    held = asyncio.create_task(writer.run(hold))
    assert await asyncio.to_thread(entered.wait, 10)
    tasks = [
        asyncio.create_task(
            writer.run(
                calls.alone(item),
                joinable=None if item.startswith("plain") else Joinable(calls.run_all, item),
            )
        )
        for item in items
    ]
    await wait_until(lambda: writer.queued == len(items), "the batch queued", timeout=10)
    gate.set()
    outcomes = await asyncio.wait_for(asyncio.gather(held, *tasks, return_exceptions=True), 10)
    return outcomes[1:]


async def test_joinable_neighbours_run_in_one_call_and_each_gets_its_own_result(
    writer: Writer, db_path: Path
) -> None:
    """Two joinable jobs, a plain one, then one joinable: one run_all for the first two, then
    each of the others by its own function (a run of one needs no joining)."""
    calls = Calls()
    outcomes = await one_batch(writer, calls, ["a", "b", "plain-c", "d"])
    assert calls.made == [("all", ["a", "b"]), ("alone", "plain-c"), ("alone", "d")]
    assert outcomes == ["a together", "b together", "plain-c alone", "d alone"]
    assert stored_ids(db_path) == {"a", "b", "plain-c", "d"}


async def test_a_run_that_fails_before_writing_runs_job_by_job_and_a_failing_job_fails_alone(
    writer: Writer, db_path: Path
) -> None:
    calls = Calls(all_fails="before", alone_fails="b")
    outcomes = await one_batch(writer, calls, ["a", "b", "c"])
    assert calls.made == [("all", ["a", "b", "c"]), ("alone", "a"), ("alone", "b"), ("alone", "c")]
    assert outcomes[0] == "a alone" and outcomes[2] == "c alone"
    assert isinstance(outcomes[1], LookupError)
    assert stored_ids(db_path) == {"a", "c"}


async def test_a_run_that_fails_after_writing_is_undone_and_its_jobs_run_alone(
    writer: Writer, db_path: Path
) -> None:
    """The batch rolls back (the run's rows with it) and runs again, each job by its own
    function in a savepoint: every row once, each job's own result."""
    calls = Calls(all_fails="after")
    outcomes = await one_batch(writer, calls, ["plain-first", "a", "b"])
    assert calls.made == [
        ("alone", "plain-first"),
        ("all", ["a", "b"]),
        ("alone", "plain-first"),
        ("alone", "a"),
        ("alone", "b"),
    ]
    assert outcomes == ["plain-first alone", "a alone", "b alone"]
    assert stored_ids(db_path) == {"plain-first", "a", "b"}
