"""The ranking without a query vector (handlers/recall/topk.py), which skips memories by bounds,
returns exactly what scoring every memory (rank.all_pool, the reference) returns: the same ids,
in the same order, with the same scores, for random agents with skewed keywords, many exact
ties, deletions, rescores, rows appended after the snapshot, and every filter."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.recall.block_bounds import BlockBounds
from handlers.recall.filters import excluded_slots
from handlers.recall.keywords import KeywordMode, keyword_weights
from handlers.recall.order import ids_of
from handlers.recall.rank import all_pool, rank
from handlers.recall.slots import Dense, member
from handlers.recall.topk import FAST_FROM, pool_without_vector
from handlers.text import query_keywords
from schema.memory import RecallRequest
from schema.taxonomy import CATEGORIES, SENSITIVITIES
from worker.recall_index.agent_index import AgentIndex, Row

WEEK = 604_800_000
NOW = 1_800_000_000_000
# Zipf-like: the first words are in most memories, the last in few; stems shared by several.
WORDS = ["time", "cat", "cats", "deploy", "deployed", "deploying", "key", "rotates", "über"]
WORDS += ["river", "basket", "stone", "a1", "rare", "rarer", "the"]
ROLES = ["user", "assistant", "system"]
TAGS = ["red", "green", "blue"]
SESSIONS = ["s1", "s2", "s3"]


def memories(seed: int, count: int) -> list[Row]:
    """Rows with few distinct timestamps, importances and confidences, so scores tie often."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    weights /= weights.sum()
    stamps = [NOW - WEEK, NOW - 2 * WEEK, NOW, NOW - 30 * WEEK]
    disorder = [0.0, 0.01, 0.05, 0.3][seed % 4]
    rows: list[Row] = []
    for n in range(count):
        words = rng.choice(WORDS, size=int(rng.integers(1, 6)), p=weights)
        # Mostly in slot order, as memories arrive (so blocks differ in recency), some not.
        timestamp = int(NOW - (count - n) * (80 * WEEK // count))
        if rng.random() < disorder:
            timestamp = stamps[int(rng.integers(len(stamps)))]
        elif rng.random() < disorder:
            timestamp = int(NOW - rng.integers(0, 60 * WEEK))
        importance = (
            [0.1, 0.5, 0.9, 1.0][int(rng.integers(4))] if rng.random() < 0.7 else rng.random()
        )
        confidence = [0.5, 1.0][int(rng.integers(2))]
        tags = [t for t in TAGS if rng.random() < 0.2]
        session = None if rng.random() < 0.3 else SESSIONS[int(rng.integers(3))]
        metadata = (
            None
            if rng.random() < 0.5
            else msgspec.json.encode({"k": int(rng.integers(3))}).decode()
        )
        rows.append(
            (
                f"m{rng.integers(10**9):09d}-{n}", ROLES[int(rng.integers(3))], session, timestamp,
                float(importance), float(confidence), None, None, " ".join(words), 0, metadata,
                int(rng.random() < 0.05), None if rng.random() < 0.8 else "rare basket",
                CATEGORIES[int(rng.integers(len(CATEGORIES)))],
                SENSITIVITIES[int(rng.integers(len(SENSITIVITIES)))],
                msgspec.json.encode(tags).decode() if tags else None,
            )
        )  # fmt: skip
    return rows


filters = st.fixed_dictionaries(
    {},
    optional={
        "pinned": st.booleans(),
        "metadata": st.fixed_dictionaries({"k": st.integers(0, 3)}),
        "category": st.sampled_from(CATEGORIES),
        "tags": st.lists(st.sampled_from(TAGS), min_size=1, max_size=2),
        "maxSensitivity": st.sampled_from(SENSITIVITIES),
        "since": st.integers(NOW - 40 * WEEK, NOW),
        "until": st.integers(NOW - 20 * WEEK, NOW + 1),
        "roles": st.lists(st.sampled_from(ROLES), min_size=1, max_size=2, unique=True),
        "sessionId": st.sampled_from([*SESSIONS, "nope"]),
        "minScore": st.floats(0.0, 0.6),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(1, 3000),
    block=st.sampled_from([1, 7, 64, 256, 4096]),
    query=st.lists(st.sampled_from([*WORDS, "absent"]), max_size=5).map(" ".join),
    mode=st.sampled_from(["share", "idf", "stems"]),
    limit=st.integers(1, 50),
    chosen=filters,
    share=st.sampled_from([0.0, 0.05, 1 / 16, 1.0]),
    data=st.data(),
)
def test_skipping_ranking_equals_the_full_scan(
    seed: int,
    count: int,
    block: int,
    query: str,
    mode: KeywordMode,
    limit: int,
    chosen: dict[str, Any],
    share: float,
    data: st.DataObject,
) -> None:
    """Same ids, order and scores (exactly, not within rounding) as scoring every memory."""
    rows = memories(seed, count)
    index = AgentIndex(anchor_ms=NOW - 3 * WEEK)
    index.bounds = BlockBounds(block)
    first = data.draw(st.integers(0, count))
    index.load(rows[:first])
    for row in rows[first:]:
        index.upsert(row)
    rng = np.random.default_rng(seed + 1)
    # Rescores (up and down: a lowered maximum leaves a looser bound), deletions, and rewrites
    # (a deletion, then the memory again in a new slot).
    for at in rng.choice(count, size=count // 10, replace=True):
        old = rows[int(at)]
        moved = int(old[3]) + int(rng.integers(-WEEK, WEEK))
        index.upsert((*old[:3], moved, float(rng.random()), *old[5:]))
    for at in rng.choice(count, size=count // 8, replace=False):
        index.remove(rows[int(at)][0])
    for at in rng.choice(count, size=count // 20, replace=False):
        index.remove(rows[int(at)][0])
        index.upsert(rows[int(at)])
    snapshot = index.columns()
    for late in memories(seed + 2, 20):
        index.upsert(late)
    request = msgspec.convert(
        {"agentId": "a", "query": query, "limit": limit, **chosen}, RecallRequest
    )
    ids = [row[0] for row in rows]
    excluded = frozenset(data.draw(st.lists(st.sampled_from(ids), max_size=5)))
    expected = all_pool(
        snapshot, request, now=NOW, query_vector=None, keyword_mode=mode, excluded=excluded
    ).ranked()
    ours = pool_without_vector(
        snapshot,
        request,
        now=NOW,
        terms=keyword_weights(snapshot, query_keywords(query), mode),
        excluded=excluded_slots(snapshot, excluded),
        bounds=index.bounds,
        essential_share=share,
        full_scan_share=math.inf,  # never leave it to the full scan here
    )
    assert ours is not None and ours.ranked() == expected


def test_a_large_agent_without_a_query_vector_ranks_as_the_full_scan() -> None:
    """recall.rank on an agent large enough for handlers/recall/topk.py (default block size and
    share of essential keywords) answers as the full scan does, in every keyword mode."""
    index = AgentIndex(anchor_ms=NOW - 3 * WEEK)
    index.load(memories(4, FAST_FROM + 5000))
    columns = index.columns()
    for mode in ("share", "idf", "stems"):
        for query in ("cat rare", "time", "", "river stone deployed absent"):
            request = RecallRequest(agent_id="a", query=query, limit=10)
            everything = all_pool(
                columns, request, now=NOW, query_vector=None, keyword_mode=mode
            ).ranked()
            expected = ids_of(columns, everything)
            found = rank(columns, request, now=NOW, query_vector=None, keyword_mode=mode)
            assert found == expected and len(found) == 10


def test_postings_kept_as_bits_rank_as_the_full_scan_with_memories_added_since() -> None:
    """A loaded agent's common words get bits (worker/recall_index/postings.py), rare ones do
    not; memories stored after the load lie past the bits' `upto`. topk's answer, which tests
    membership through the bits, is still the full scan's, for a top 10 and a top 500."""
    index = AgentIndex(anchor_ms=NOW - 3 * WEEK)
    rows = memories(5, FAST_FROM + 6000)
    index.load(rows[:FAST_FROM])
    for row in rows[FAST_FROM:]:
        index.upsert(row)
    common, rare = index.postings.dense("time"), index.postings.dense("rarer")
    assert common is not None and rare is None
    base = index.postings.base.get("time")
    assert base is not None and common.upto == int(base[-1]) + 1
    tail = index.postings.tail.get("time")
    assert tail is not None and len(tail) and int(tail[0]) >= common.upto
    columns = index.columns()
    for mode in ("share", "idf", "stems"):
        for query in ("time cat rare", "time the", "deploy stone the time"):
            for limit in (10, 500):
                request = RecallRequest(agent_id="a", query=query, limit=limit)
                everything = all_pool(
                    columns, request, now=NOW, query_vector=None, keyword_mode=mode
                ).ranked()
                found = rank(columns, request, now=NOW, query_vector=None, keyword_mode=mode)
                assert found == ids_of(columns, everything) and len(found) == limit


@settings(max_examples=200, deadline=None)
@given(
    slots=st.lists(st.integers(0, 3000), min_size=1, max_size=400, unique=True),
    rows=st.lists(st.integers(0, 3100), max_size=300, unique=True),
    cut=st.integers(0, 400),
)
def test_membership_through_bits_equals_the_binary_search(
    slots: list[int], rows: list[int], cut: int
) -> None:
    """member() with a posting's bits below `upto` (and its slots past it searched) answers
    exactly as the binary search does, for rows in order or not."""
    posting = np.array(sorted(slots), dtype=np.int32)
    base = posting[: min(cut, len(posting))]
    upto = int(base[-1]) + 1 if len(base) else 0
    inside = np.zeros(upto, dtype=np.bool_)
    inside[base] = True
    dense = Dense(np.packbits(inside, bitorder="little"), upto)
    wanted = np.array(rows, dtype=np.int64)
    assert member(posting, wanted, dense=dense).tolist() == np.isin(wanted, posting).tolist()
    ordered = np.sort(wanted)
    found = member(posting, ordered, ascending=True, dense=dense)
    assert found.tolist() == np.isin(ordered, posting).tolist()


def test_accesses_are_counted_at_the_ranked_slot_or_where_the_memory_moved() -> None:
    """A recall counts accesses by the slots its snapshot ranked: a memory still there is
    counted at that slot, one stored again since (a new slot) at its new one, and one removed
    since not at all (so the reply leaves it out)."""
    index = AgentIndex(anchor_ms=NOW - 3 * WEEK)
    rows = memories(seed=3, count=3)
    for row in rows:
        index.upsert(row)
    kept, moved, removed = (row[0] for row in rows)
    ranked = [
        (memory_id, slot)
        for memory_id in (kept, moved, removed)
        if (slot := index.slot_of(memory_id)) is not None
    ]
    assert len(ranked) == 3
    index.remove(moved)
    index.upsert(rows[1])  # stored again: a new slot
    index.remove(removed)
    assert index.slot_of(moved) not in {slot for _, slot in ranked}
    assert index.unknown_access(ranked) == [kept, moved]
    counts = index.count_access(ranked, {kept: 4})
    assert counts == {kept: 5, moved: 1}
    assert index.count_access(ranked, {}) == {kept: 6, moved: 2}
