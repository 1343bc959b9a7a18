"""What the recall index keeps between recalls so that a recall costs less than looking it all
up again (issue 33): the postings' base lookups (a word's rows and a stem's words, hashed in
Python each time before), and the agent's counted bytes, counted again only when a write or a
recall changed what it holds. Kept answers are the fresh ones, as words keep arriving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from handlers.recall.keywords import keyword_weights
from handlers.recall.rank import rank
from handlers.store import insert_memory
from schema.memory import RecallRequest
from tests.test_index_persist import KEY, filled, index_on
from tests.test_topk import memories
from worker.recall_index.agent_index import AgentIndex
from worker.recall_index.postings import Postings
from worker.recall_index.strings import Strings


def counted(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """One item per call of owner.name from now on."""
    calls: list[int] = []
    original = getattr(owner, name)

    def count(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, count)
    return calls


def test_a_word_looked_up_again_is_not_hashed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    postings = Postings.gathered({"paint": [1, 5], "painting": [2], "river": [3]})
    first = (postings.get("paint"), postings.variants("paint"), postings.get("absent"))
    hashed = counted(monkeypatch, Strings, "positions")
    again = (postings.get("paint"), postings.variants("paint"), postings.get("absent"))
    assert hashed == []
    assert first[1] == again[1] == ("paint", "painting")
    assert first[0] is not None and again[0] is not None
    assert first[0].tolist() == again[0].tolist() == [1, 5]
    assert first[2] is None and again[2] is None


def test_kept_lookups_give_the_rows_and_words_added_since() -> None:
    """The base's answers are kept, the tail's never: a word's new rows and a stem's new words
    are found after the lookup that was kept."""
    postings = Postings.gathered({"paint": [1, 5], "painting": [2]})
    assert postings.variants("paint") == ("paint", "painting")
    assert postings.get("paint") is not None
    postings.add("paint", 9)
    postings.add("paints", 10)  # a new word of the same stem
    found = postings.get("paint")
    assert found is not None and found.tolist() == [1, 5, 9]
    assert postings.variants("paint") == ("paint", "painting", "paints")


def test_keyword_weights_over_kept_lookups_are_those_of_a_fresh_index() -> None:
    """Memories added between recalls: every query's terms (rows and weights) equal those of
    an index loaded afresh from the same rows, in every keyword mode."""
    rows = memories(11, 240)
    kept = AgentIndex(anchor_ms=0)
    kept.load(rows[:40])
    for end in range(40, 241, 40):
        if end > 40:
            for row in rows[end - 40 : end]:
                kept.upsert(row)
        fresh = AgentIndex(anchor_ms=0)
        fresh.load(rows[:end])
        for query in (["cat", "deploy"], ["deploying", "rare", "absent"], ["the", "cats", "über"]):
            for mode in ("share", "idf", "stems"):
                ours = keyword_weights(kept.columns(), query, mode)
                theirs = keyword_weights(fresh.columns(), query, mode)
                assert terms_of(ours) == terms_of(theirs), (end, query, mode)


def terms_of(terms: list[Any]) -> list[tuple[list[int] | None, float]]:
    return [(None if t.posting is None else t.posting.tolist(), t.weight) for t in terms]


def test_a_recall_that_adds_nothing_does_not_count_the_agents_bytes_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memory.db"
    writer = filled(path, 200)
    index = index_on(path, writer, cache=False)
    req = msgspec.convert({"agentId": "a", "query": "note alpha", "limit": 5}, RecallRequest)
    found = index.snapshot(KEY)
    rank(found.columns, req, now=9000, query_vector=None)  # keeps its lookups
    found = index.snapshot(KEY)  # counted again: it keeps more
    rank(found.columns, req, now=9000, query_vector=None)  # the same lookups: nothing added
    counts = counted(monkeypatch, AgentIndex, "nbytes")
    found = index.snapshot(KEY)
    ranked = rank(found.columns, req, now=9000, query_vector=None)
    assert counts == []
    with writer:  # a read transaction for the counts not held yet
        found.count_access(writer, [(memory_id, 0) for memory_id, _ in ranked[:1]])
    before = index.counted_bytes()
    index.snapshot(KEY)  # an access count held now: counted
    assert len(counts) == 1
    assert index.counted_bytes() > before
    with writer:
        insert_memory(
            writer, agent=KEY, content="a new river", role="user", now=1, timestamp=5000,
            importance=0.5,
        )  # fmt: skip
    index.after_commit(writer)  # a write: counted there
    calls = len(counts)
    index.snapshot(KEY)
    assert len(counts) == calls


def test_a_word_in_the_base_and_the_tail_is_joined_once_then_only_its_new_rows_appended() -> None:
    """While an agent grows, a word's rows are the base's then the tail's at every lookup, and
    a lookup copies only the rows added since the last (the base's rows again only when the
    joined list runs out of room, which doubles), never changing a list handed out before."""
    base = list(range(0, 3000, 3))
    postings = Postings.gathered({"paint": base, "river": [1]})
    added: list[int] = []
    handed: list[tuple[np.ndarray, list[int]]] = []
    copies = 0
    for slot in range(3000, 3400):
        postings.add("paint", slot)
        added.append(slot)
        found = postings.get("paint")
        assert found is not None and found.tolist() == base + added
        if handed and not np.shares_memory(found, handed[-1][0]):
            copies += 1
        handed.append((found, base + added))
    assert copies <= 6  # 400 rows added: joined again at 16, 48, 112, 240 rows of the tail
    assert all(found.tolist() == expected for found, expected in handed)
