"""The recall index reaches disk whether or not an agent is recalled: an agent that takes many
changes is loaded from the write side and written by the saver, a clean shutdown writes it, and
each snapshot of a loaded agent is opened again, so that growth goes back to the mapped files
(worker/recall_index/saver.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import apsw
import pytest

from handlers.store import insert_memory
from tests.test_index_persist import (
    KEY,
    answers,
    filled,
    fresh,
    index_on,
    opened_from_disk,
    saved,
)
from worker.db import migrate, open_db
from worker.readers import Readers
from worker.recall_index import persist, saver
from worker.recall_index.index import MemoryIndex
from worker.recall_index.mapping import mapped
from worker.recall_index.saver import ADOPT_AFTER, SAVE_AFTER, due

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")


def stored(index: MemoryIndex, writer: apsw.Connection, count: int, start: int = 0) -> None:
    """Memories of agent `a` committed in batches, each followed by the index's catch-up, as
    the writer thread does; the agent is never recalled here."""
    for first in range(start, start + count, 50):
        with writer:
            for n in range(first, min(first + 50, start + count)):
                insert_memory(
                    writer, agent=KEY, content=f"note {WORDS[n % 6]} {WORDS[n % 5]} {n}",
                    role="user", now=1, timestamp=1000 + n, importance=(n % 7) / 7,
                    session_id=f"s{n % 4}",
                )  # fmt: skip
        index.after_commit(writer)


def until(condition: object, timeout: float = 30.0) -> bool:
    """Wait for the saver's thread to make `condition()` true; whether it did."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def snapshots(path: Path) -> list[Path]:
    return list(Path(f"{path}.index").glob("[!.]*-*"))


def new_file(path: Path) -> apsw.Connection:
    writer = open_db(path)
    migrate(writer)
    return writer


def test_an_agent_never_recalled_reaches_disk_and_a_killed_worker_restarts_from_it(
    tmp_path: Path,
) -> None:
    """Stores only: the saver loads the agent from the write side and writes its snapshot, so
    that a restart after a kill -9 (no shutdown) opens it memory-mapped, replays what came
    after it, and answers as a load from SQLite."""
    path = tmp_path / "memory.db"
    writer = new_file(path)
    index = index_on(path, writer)
    stored(index, writer, ADOPT_AFTER + 100)
    assert until(lambda: snapshots(path)), "no snapshot of an agent that was never recalled"
    stored(index, writer, 120, start=ADOPT_AFTER + 100)  # after it: replayed at the restart
    restarted = index_on(path, writer)  # the first index is dropped without its shutdown
    assert opened_from_disk(restarted)
    assert restarted.snapshot(KEY).columns.rows == ADOPT_AFTER + 220
    assert answers(restarted) == fresh(path, writer)


def test_a_clean_shutdown_writes_an_agent_that_was_never_recalled(tmp_path: Path) -> None:
    """Stores then at once a clean stop: the stop writes the agent's snapshot (loading it if
    the saver had not yet), and the next start opens it instead of reading SQLite."""
    path = tmp_path / "memory.db"
    writer = new_file(path)
    index = index_on(path, writer)
    stored(index, writer, ADOPT_AFTER + 50)
    index.close()
    assert snapshots(path), "the clean stop wrote no snapshot"
    restarted = index_on(path, writer)
    assert opened_from_disk(restarted)
    assert restarted.snapshot(KEY).columns.rows == ADOPT_AFTER + 50
    assert answers(restarted) == fresh(path, writer)


def test_growth_past_a_snapshots_room_stays_exact_and_goes_back_to_the_mapped_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent opened from a snapshot with room for few appends takes SAVE_AFTER + 500 more
    memories: while they are copied into RAM past the room the answers are a fresh load's;
    once the saver has written the agent again it is opened from that snapshot: its columns
    mapped, no keyword's posting in two parts, its RAM back to what a mapped agent holds."""
    monkeypatch.setattr(persist, "DISK_ROOM", 16)
    path = tmp_path / "memory.db"
    writer = filled(path, 300)  # before any index: all of them in the first snapshot
    first = index_on(path, writer)
    first.snapshot(KEY)
    first.close()
    index = index_on(path, writer)
    assert mapped(index.agent(KEY).live)
    written = index._saver.written if index._saver else 0
    stored(index, writer, 400, start=300)  # past the room of 300 + 16 + 75 rows
    grown = index.agent(KEY)
    assert not mapped(grown.live)
    assert answers(index) == fresh(path, writer)
    monkeypatch.undo()  # the next snapshot has the room snapshots have
    stored(index, writer, SAVE_AFTER + 100, start=700)
    grown_bytes, grown_tail = grown.nbytes(), grown.postings.tail.nbytes()
    assert until(lambda: index._saver is not None and index._saver.written > written)
    assert until(lambda: mapped(index.agent(KEY).live)), "not opened again from its snapshot"
    reopened = index.agent(KEY)
    assert answers(index) == fresh(path, writer)
    assert reopened.postings.tail.nbytes() < grown_tail / 4  # what came after the snapshot
    # The saver snapshots while the last stores go on: those after it stay in RAM (its tail).
    assert reopened.nbytes() < grown_bytes / 3
    index.close()


def test_stores_made_while_two_snapshots_are_written_fit_the_room_of_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent opened from a snapshot takes, before it is opened from the next one, the stores
    made while that snapshot was written, `due` changes, and the stores made while the next is
    written: with a sixteenth of its rows stored during each write it stays in the mapped
    files (a room of an eighth was outgrown, and every row copied into RAM), and its answers
    are a fresh load's. The saver's thread is not started: the test freezes, stores, then
    writes and reopens, in that order."""
    monkeypatch.setattr(saver.Saver, "start", lambda self: None)
    monkeypatch.setattr(persist, "DISK_ROOM", 16)
    monkeypatch.setattr(saver, "SAVE_AFTER", 16)  # due(rows) is an eighth of the rows
    path = tmp_path / "memory.db"
    writer = filled(path, 2048)
    saved(path, writer)
    index = index_on(path, writer)
    assert index._saver is not None and mapped(index.agent(KEY).live)
    rows = start = 2048
    for _ in range(3):
        stored(index, writer, due(rows), start=start)
        start += due(rows)
        frozen = index._freeze(KEY)
        assert frozen is not None
        stored(index, writer, rows // 16, start=start)  # while it is written
        start += rows // 16
        assert mapped(index.agent(KEY).live), f"outgrew the room at {start} rows"
        assert index._saver.save(KEY, frozen)
        assert mapped(index.agent(KEY).live), "not opened from the snapshot just written"
        rows = len(index.agent(KEY).ids)
    assert rows == start
    assert answers(index) == fresh(path, writer)
    index.close()


def test_an_agent_opened_again_after_its_snapshot_keeps_the_access_counts_it_held(
    tmp_path: Path,
) -> None:
    """Recall counts an access in the index before SQLite has it (the write follows the
    reply): once the saver has written the agent and opened it again, the next count goes on
    from the index's, not from SQLite's older one."""
    path = tmp_path / "memory.db"
    writer = filled(path, 300)
    index = index_on(path, writer)
    ranked = [(memory_id, slot) for slot, memory_id in enumerate(index.agent(KEY).ids) if slot < 3]
    reader = open_db(path)
    assert index.snapshot(KEY).count_access(reader, ranked) == {m: 1 for m, _ in ranked}
    assert index._saver is not None and index._saver.save(KEY)
    assert until(lambda: mapped(index.agent(KEY).live))  # opened again from what it wrote
    assert index.snapshot(KEY).count_access(reader, ranked) == {m: 2 for m, _ in ranked}
    index.close()


def test_a_clean_stop_during_a_load_from_sqlite_writes_the_agent_once_it_is_loaded(
    tmp_path: Path,
) -> None:
    """A stop soon after a first start, while the agent is still read from SQLite: the stop
    waits for the load and writes its snapshot, so the next start opens it."""
    path = tmp_path / "memory.db"
    writer = filled(path, 300)
    loading, release = threading.Event(), threading.Event()

    def held_reader() -> apsw.Connection:
        loading.set()
        assert release.wait(20), "the test never released the load"
        return open_db(path)

    index = MemoryIndex(
        Readers(path), max_bytes=10**9, clock=lambda: 5000, open_reader=held_reader,
        cache_dir=Path(f"{path}.index"),
    )  # fmt: skip
    index.attach(writer)
    load = threading.Thread(target=index.snapshot, args=(KEY,))
    load.start()
    assert loading.wait(20)
    stop = threading.Thread(target=index.close)
    stop.start()
    release.set()
    stop.join(30)
    load.join(30)
    assert snapshots(path), "the stop wrote no snapshot of the agent it was loading"
    restarted = index_on(path, writer)
    assert opened_from_disk(restarted)
    assert answers(restarted) == fresh(path, writer)
