"""The in-memory recall index: bounded memory, least recently used agents leave and reload, and
a load neither blocks the writer nor misses what the writer committed while it ran."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import nats
import numpy as np
import pytest

from handlers.recall.columns import Columns
from handlers.store import insert_memory
from tests.conftest import worker_config
from tests.support import Client
from worker.app import App
from worker.db import migrate, open_db
from worker.readers import Readers
from worker.recall_index.changes import ChangeReader
from worker.recall_index.index import MemoryIndex
from worker.recall_index.view import Snapshot


def filled_db(path: Path, agents: tuple[str, ...], count: int) -> apsw.Connection:
    conn = open_db(path)
    migrate(conn)
    with conn:
        for agent in agents:
            for number in range(count):
                insert_memory(
                    conn, agent=("", agent), content=f"{agent} note {number}", role="user",
                    now=1, timestamp=1, importance=0.5,
                )  # fmt: skip
    return conn


def columns_of(index: MemoryIndex, agent_id: str) -> Columns:
    return index.snapshot(("", agent_id)).columns


def readers_calling(
    path: Path, during_first_load: Callable[[], None]
) -> tuple[Callable[[], apsw.Connection], list[int]]:
    """An `open_reader` for MemoryIndex that counts the connections it opens and calls
    `during_first_load` once the first load has read a row (so its snapshot has begun)."""
    opened: list[int] = []

    def open_reader() -> apsw.Connection:
        reader = open_db(path)
        opened.append(1)
        if len(opened) == 1:

            def on_row(cursor: Any, row: Any) -> Any:
                reader.row_trace = None
                during_first_load()
                return row

            reader.row_trace = on_row
        return reader

    return open_reader, opened


def store_from_another_process(path: Path) -> None:
    """A memory of agent `a` written through a connection of its own, as another process."""
    other_process = open_db(path)
    with other_process:
        insert_memory(
            other_process, agent=("", "a"), content="from elsewhere", role="user",
            now=2, timestamp=2, importance=0.5,
        )  # fmt: skip
    other_process.close()


def test_least_recently_used_agents_leave_when_over_budget_and_reload_on_demand(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    conn = filled_db(path, ("a", "b", "c"), 300)
    index = MemoryIndex(Readers(path), max_bytes=1, clock=lambda: 1)
    assert columns_of(index, "a").rows == 300 and index.loaded_agents() == 1
    columns_of(index, "b")
    assert index.loaded_agents() == 1  # "a" left to make room
    assert columns_of(index, "a").rows == 300
    roomy = MemoryIndex(Readers(path), max_bytes=10**9, clock=lambda: 1)
    for agent in ("a", "b", "c"):
        columns_of(roomy, agent)
    assert roomy.loaded_agents() == 3
    conn.close()


def test_writes_committed_during_a_load_are_applied_without_waiting_for_it(
    tmp_path: Path,
) -> None:
    """While a load reads its snapshot, the writer commits an insert, a rescore and a delete and
    applies them: apply returns at once (it used to wait for the whole load), and the loaded
    index holds all three changes although its snapshot began before them."""
    path = tmp_path / "memory.db"
    filled_db(path, ("a",), 50).close()
    writer = open_db(path)
    log = ChangeReader(writer)
    applied = threading.Event()

    def write_and_apply() -> None:
        with writer:
            insert_memory(
                writer, agent=("", "a"), content="written during the load", role="user",
                now=2, timestamp=2, importance=0.5,
            )  # fmt: skip
            writer.execute("UPDATE memories SET importance = 0.9 WHERE content = 'a note 1'")
            writer.execute("DELETE FROM memories WHERE content = 'a note 2'")
        index.apply(writer, log.take(writer))
        applied.set()

    def write_from_another_thread() -> None:
        other = threading.Thread(target=write_and_apply)
        other.start()
        other.join(timeout=10)
        assert applied.is_set(), "apply waited for the load"

    open_reader, _ = readers_calling(path, write_from_another_thread)
    index = MemoryIndex(Readers(path), open_reader=open_reader, max_bytes=10**9, clock=lambda: 3)
    columns = columns_of(index, "a")
    assert applied.is_set()
    live = {columns.ids[int(row)] for row in np.flatnonzero(columns.live[: columns.rows])}
    contents = dict(writer.execute("SELECT id, content FROM memories WHERE agent_id = 'a'"))
    assert live == set(contents) and len(live) == 50
    assert "written during the load" in contents.values()
    rescored = next(i for i, text in contents.items() if text == "a note 1")
    assert columns.importance[columns.ids.index(rescored)] == 0.9
    writer.close()


def test_a_load_overtaken_by_another_processs_write_is_used_once_and_not_kept(
    tmp_path: Path,
) -> None:
    """When the index is dropped during a load (another process wrote the file), the load's
    snapshot answers the recall that asked but is not cached: the next recall loads afresh."""
    path = tmp_path / "memory.db"
    filled_db(path, ("a",), 20).close()

    open_reader, _ = readers_calling(path, lambda: index.forget_all())
    index = MemoryIndex(Readers(path), open_reader=open_reader, max_bytes=10**9, clock=lambda: 3)
    assert columns_of(index, "a").rows == 20
    assert index.loaded_agents() == 0


class SecondRecall:
    """Another reader thread's recall of agent "a", started while a load of it runs."""

    def __init__(self, index: Callable[[], MemoryIndex]) -> None:
        self.rows: list[int] = []
        self._thread = threading.Thread(target=lambda: self.rows.append(rows_of(index())))

    def start(self) -> None:
        self._thread.start()
        self._thread.join(timeout=0.3)  # it waits for the load in progress
        assert self._thread.is_alive()

    def finish(self) -> list[int]:
        self._thread.join(timeout=10)
        return self.rows


def rows_of(index: MemoryIndex) -> int:
    return columns_of(index, "a").rows


def test_recalls_that_need_an_agent_being_loaded_wait_for_that_load_not_a_second(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    filled_db(path, ("a",), 20).close()
    second = SecondRecall(lambda: index)
    open_reader, opened = readers_calling(path, second.start)
    index = MemoryIndex(Readers(path), open_reader=open_reader, max_bytes=10**9, clock=lambda: 3)
    assert rows_of(index) == 20
    assert second.finish() == [20] and len(opened) == 1


def test_when_a_load_fails_a_recall_that_waited_for_it_loads_again(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    filled_db(path, ("a",), 20).close()
    opened: list[int] = []
    second = SecondRecall(lambda: index)

    def open_reader() -> apsw.Connection:
        opened.append(1)
        if len(opened) == 1:
            second.start()
            raise RuntimeError("disk on fire")
        return open_db(path)

    index = MemoryIndex(Readers(path), open_reader=open_reader, max_bytes=10**9, clock=lambda: 3)
    with pytest.raises(RuntimeError):
        index.agent(("", "a"))
    assert second.finish() == [20] and len(opened) == 2


def test_a_recall_that_waited_for_an_overtaken_load_loads_afresh(tmp_path: Path) -> None:
    """Another process wrote while the load ran: the caller that started it gets its snapshot,
    one that only waited for it loads again and sees the file as it is now."""
    path = tmp_path / "memory.db"
    filled_db(path, ("a",), 20).close()
    second = SecondRecall(lambda: index)

    def another_process_writes() -> None:
        second.start()
        store_from_another_process(path)
        index.forget_all()  # what the writer does when data_version moves

    open_reader, opened = readers_calling(path, another_process_writes)
    index = MemoryIndex(Readers(path), open_reader=open_reader, max_bytes=10**9, clock=lambda: 3)
    assert rows_of(index) == 20
    assert second.finish() == [21] and len(opened) == 2


async def test_snapshots_of_an_agent_being_loaded_share_one_load_and_hold_no_reader_thread(
    tmp_path: Path,
) -> None:
    """Eight recalls of an agent being loaded, on a pool of two reader threads, cause one load
    between them and hold one thread, not both: a recall of a loaded agent answers meanwhile."""
    path = tmp_path / "memory.db"
    filled_db(path, ("a", "b"), 20).close()
    opened: list[int] = []
    loading, release = threading.Event(), threading.Event()

    def slow_reader() -> apsw.Connection:
        opened.append(1)
        if len(opened) > 1:  # "a": its load is held until the test has seen "b" answer
            loading.set()
            assert release.wait(10), "the test never released the load"
        return open_db(path)

    def rows(_: apsw.Connection, found: Snapshot) -> int:
        return found.columns.rows

    readers = Readers(path, threads=2)
    index = MemoryIndex(readers, max_bytes=10**9, clock=lambda: 3, open_reader=slow_reader)
    try:
        assert await index.with_snapshot(("", "b"), rows) == 20
        slow = [asyncio.ensure_future(index.with_snapshot(("", "a"), rows)) for _ in range(8)]
        assert await asyncio.to_thread(loading.wait, 10), "the load of 'a' never started"
        started = time.monotonic()
        assert await index.with_snapshot(("", "b"), rows) == 20
        assert time.monotonic() - started < 0.3 and not any(task.done() for task in slow)
        release.set()
        assert await asyncio.gather(*slow) == [20] * 8
    finally:
        release.set()
        readers.close()
    assert len(opened) == 2  # "b", then "a" once


async def test_recalls_of_other_agents_go_on_while_one_agent_loads(
    nats_url: str, tmp_path: Path
) -> None:
    """Several recalls of an agent whose load is held up hold one reader thread between
    them, not all of them: a recall of another agent answers meanwhile."""
    app = App(worker_config(nats_url, tmp_path / "memory.db"))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        await client.store("slow", "a memory that takes long to load")
        await client.store("quick", "a memory already loaded")
        await client.recall("quick")
        assert app.services is not None
        index = app.services.index
        index.forget_all()
        await client.recall("quick")
        fresh = index._open_reader
        loading, release = threading.Event(), threading.Event()

        def slow_reader() -> apsw.Connection:  # held until the test has seen "quick" answer
            loading.set()
            assert release.wait(10), "the test never released the load"
            return fresh()

        index._open_reader = slow_reader
        slow = [asyncio.ensure_future(client.recall("slow")) for _ in range(4)]
        assert await asyncio.to_thread(loading.wait, 10), "the load of 'slow' never started"
        started = time.monotonic()
        [quick] = await client.recall("quick")
        quick_s = time.monotonic() - started
        assert quick["content"] == "a memory already loaded"
        assert not any(task.done() for task in slow) and quick_s < 0.5
        release.set()
        assert all(len(found) == 1 for found in await asyncio.gather(*slow))
    finally:
        release.set()
        await nc.close()
        await app.stop()


def test_a_commit_after_another_processs_write_applies_that_write_from_the_change_log(
    tmp_path: Path,
) -> None:
    """The writer's `after_commit` applies its own changes in place, and another process's
    write (logged by the same triggers) at its next commit: the agent stays loaded and holds
    the other process's memory, as a fresh load would."""
    path = tmp_path / "memory.db"
    writer = filled_db(path, ("a",), 20)
    index = MemoryIndex(Readers(path), max_bytes=10**9, clock=lambda: 3)
    index.attach(writer)
    assert rows_of(index) == 20
    with writer:
        writer.execute("UPDATE memories SET importance = 0.9 WHERE content = 'a note 1'")
    index.after_commit(writer)
    assert index.loaded_agents() == 1
    store_from_another_process(path)
    with writer:
        pass  # the worker's idle commit (App._watch_other_writers)
    index.after_commit(writer)
    assert index.loaded_agents() == 1
    columns = columns_of(index, "a")
    live = {columns.ids[int(row)] for row in np.flatnonzero(columns.live[: columns.rows])}
    assert live == {i for (i,) in writer.execute("SELECT id FROM memories")} and len(live) == 21
    writer.close()
