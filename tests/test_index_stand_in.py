"""A recall of an agent still being read from SQLite (a first start without a snapshot) waits
at most `hold_s` for the load, then ranks a stand-in of the agent's likeliest rows
(worker/recall_index/stand_in.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import apsw
import msgspec
import pytest

from handlers.recall.rank import rank
from handlers.store import insert_memory
from schema.memory import RecallRequest
from tests.test_index_persist import KEY, filled
from worker.db import migrate, open_db
from worker.readers import Readers
from worker.recall_index import stand_in
from worker.recall_index.index import MemoryIndex
from worker.recall_index.view import Snapshot

Ranked = tuple[int, list[tuple[str, float]]]


def ranked(query: str) -> Callable[[apsw.Connection, Snapshot], Ranked]:
    request = msgspec.convert({"agentId": "a", "query": query, "limit": 5}, RecallRequest)

    def ranking(_: apsw.Connection, found: Snapshot) -> Ranked:
        return found.columns.rows, rank(found.columns, request, now=9000, query_vector=None)

    return ranking


async def test_a_recall_waits_for_a_load_from_sqlite_at_most_hold_s_then_ranks_a_stand_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load is held (as a million rows' read would hold it): the recall answers meanwhile
    from the stand-in, which holds the RECENT newest memories and the oldest one, found by its
    query word; its best memory is the loaded agent's. Once the load is in, recalls rank the
    whole agent."""
    monkeypatch.setattr(stand_in, "RECENT", 20)
    path = tmp_path / "memory.db"
    writer = open_db(path)
    migrate(writer)
    with writer:
        insert_memory(
            writer, agent=KEY, content="the ferry to Zanzibar left at dawn", role="user", now=1,
            timestamp=900, importance=0.5,
        )  # fmt: skip
    writer.close()
    filled(path, 300).close()
    loading, release = threading.Event(), threading.Event()

    def held_reader() -> apsw.Connection:
        loading.set()
        assert release.wait(20), "the test never released the load"
        return open_db(path)

    readers = Readers(path, threads=2)
    index = MemoryIndex(readers, max_bytes=10**9, clock=lambda: 5000, open_reader=held_reader)
    index.hold_s = 0.05
    try:
        rows, found = await index.with_snapshot(KEY, ranked("zanzibar"), query="zanzibar")
        assert loading.is_set() and not release.is_set()  # answered while the load was held
        assert rows == 21  # the 20 newest, and the one that holds the word
        assert found[0][0] == _id_of(path, "%Zanzibar%")
        release.set()
        await index.with_snapshot(KEY, ranked(""))  # not a recall: waits for the whole load
        rows, whole = await index.with_snapshot(KEY, ranked("zanzibar"), query="zanzibar")
        assert rows == 301 and whole[0] == found[0]
    finally:
        release.set()
        readers.close()


async def test_without_a_query_a_caller_waits_for_the_whole_load(tmp_path: Path) -> None:
    """Only a recall takes the stand-in: what is not one (no `query`) gets the loaded agent."""
    path = tmp_path / "memory.db"
    filled(path, 50).close()
    loading = threading.Event()

    def reader() -> apsw.Connection:
        loading.set()
        return open_db(path)

    readers = Readers(path, threads=2)
    index = MemoryIndex(readers, max_bytes=10**9, clock=lambda: 5000, open_reader=reader)
    index.hold_s = 0.0
    try:
        rows, _ = await index.with_snapshot(KEY, ranked("note"))
        assert rows == 50 and loading.is_set()
        rows, _ = await asyncio.wait_for(index.with_snapshot(KEY, ranked("x"), query="x"), 10)
        assert rows == 50  # loaded: a recall ranks the whole agent
    finally:
        readers.close()


def test_like_patterns_match_every_word_of_the_query_words_stem() -> None:
    """The part a word shares with its stem ("happy" / "happi": "happ"), at least 3 letters,
    LIKE's own characters escaped; stopwords left out; one pattern per distinct part."""
    assert stand_in.patterns("the happy painting") == ["%happ%", "%paint%"]
    assert stand_in.patterns("paints painted") == ["%paint%"]
    assert stand_in.patterns("snake_case 100%") == ["%snake\\_cas%", "%100%"]
    assert stand_in.patterns("") == []


def _id_of(path: Path, like: str) -> str:
    conn = open_db(path)
    try:
        found = conn.execute("SELECT id FROM memories WHERE content LIKE ?", (like,)).get
        assert isinstance(found, str)
        return found
    finally:
        conn.close()
