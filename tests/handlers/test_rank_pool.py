"""The ranking as arrays (handlers/recall/rank.py `rank_pool`, order.py `top_pool`) is the
ranking as it was first written, bit for bit: every eligible memory's score gathered by slot,
cut to the k-th, sorted on (score, newer, id), then pairs above `minScore`. Random agents with
many ties, with and without deletions (every memory eligible: no gather), with filters."""

from __future__ import annotations

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from handlers.recall.columns import Columns
from handlers.recall.filters import filter_mask
from handlers.recall.formula import scores
from handlers.recall.keywords import KeywordMode
from handlers.recall.order import Ranked
from handlers.recall.rank import rank_pool, rank_rows
from schema.memory import RecallRequest
from tests.test_topk import NOW, WEEK, WORDS, memories
from worker.recall_index.agent_index import AgentIndex


def reference(columns: Columns, req: RecallRequest, mode: KeywordMode) -> Ranked:
    """The full scan as first written: the eligible slots, their scores gathered, the ties at
    the k-th kept, sorted on (score, newer) with ties by id, and pairs above the floor."""
    eligible = filter_mask(columns, req, frozenset())
    if eligible is None or columns.rows == 0:
        return []
    candidates = np.flatnonzero(eligible)
    if len(candidates) == 0:
        return []
    score = scores(columns, req.query, now=NOW, query_vector=None, keyword_mode=mode)
    score = score[candidates]
    if len(candidates) > req.limit:
        kth = np.partition(score, len(score) - req.limit)[len(score) - req.limit]
        keep = score >= kth
        candidates, score = candidates[keep], score[keep]
    timestamp = columns.timestamp[candidates]
    ids = [columns.ids[int(slot)] for slot in candidates]
    order = sorted(range(len(candidates)), key=lambda at: (-score[at], -timestamp[at], ids[at]))
    floor = -1.0 if req.min_score is UNSET else req.min_score
    found = [(int(candidates[at]), float(score[at])) for at in order[: req.limit]]
    return [(slot, value) for slot, value in found if value >= floor]


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(1, 1200),
    query=st.lists(st.sampled_from([*WORDS, "absent"]), max_size=4).map(" ".join),
    mode=st.sampled_from(["share", "idf", "stems"]),
    limit=st.integers(1, 40),
    deleted=st.booleans(),
    min_score=st.sampled_from([None, 0.2]),
    since=st.booleans(),
    ties=st.booleans(),
)
def test_the_ranking_as_arrays_is_the_full_scan_as_first_written(
    seed: int,
    count: int,
    query: str,
    mode: KeywordMode,
    limit: int,
    deleted: bool,
    min_score: float | None,
    since: bool,
    ties: bool,
) -> None:
    rows = memories(seed, count)
    if ties:  # three timestamps, one importance: most memories tie with many others
        stamps = [NOW - WEEK, NOW - 2 * WEEK, NOW]
        rows = [(*row[:3], stamps[n % 3], 0.5, 1.0, *row[6:]) for n, row in enumerate(rows)]
    index = AgentIndex(anchor_ms=NOW - 3 * WEEK)
    index.load(rows)
    if deleted:
        rng = np.random.default_rng(seed)
        for at in rng.choice(count, size=max(1, count // 8), replace=False):
            index.remove(rows[int(at)][0])
    columns = index.columns()
    fields: dict[str, object] = {} if min_score is None else {"minScore": min_score}
    if since:
        fields["since"] = NOW - 10 * WEEK
    req = msgspec.convert({"agentId": "a", "query": query, "limit": limit, **fields}, RecallRequest)
    expected = reference(columns, req, mode)
    found = rank_rows(columns, req, now=NOW, query_vector=None, keyword_mode=mode)
    assert found == expected
    pool = rank_pool(columns, req, now=NOW, query_vector=None, keyword_mode=mode)
    assert pool.slots.dtype == np.int64
    assert pool.ranked() == expected
