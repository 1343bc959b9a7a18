"""The expanded ranking (handlers/recall/expand.py `expanded_rows`) is the one its stage defines,
bit for bit: the formula's pool as `rank_rows` gives it (score, newer, id), each pooled memory
lifted by its neighbours, then a stable sort on (stage score, newer) cut at `limit`. Random
agents with many exact ties (few timestamps and importances), deletions, sessions and none,
pools larger than the limit, and ties across the pool's cut and the limit's."""

from __future__ import annotations

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from handlers.recall.columns import Columns
from handlers.recall.expand import (
    FORMULA_KEYWORD_WEIGHT,
    Expansion,
    expanded_rows,
    keyword_share,
    neighbour_scores,
)
from handlers.recall.keywords import KeywordMode, keyword_weights
from handlers.recall.order import Ranked
from handlers.recall.rank import rank_rows
from handlers.text import query_keywords
from schema.memory import RecallRequest
from tests.test_topk import NOW, WEEK, WORDS, memories
from worker.recall_index.agent_index import AgentIndex


def reference(
    columns: Columns, req: RecallRequest, expansion: Expansion, mode: KeywordMode
) -> Ranked:
    """The stage as first written: every pooled memory's lift, the pool in the formula's order
    (ids resolving every tie), a stable sort on the stage score, then newer."""
    wide = msgspec.structs.replace(req, limit=max(req.limit, expansion.pool), min_score=UNSET)
    terms = keyword_weights(columns, query_keywords(req.query), mode)
    found = rank_rows(columns, wide, now=NOW, query_vector=None, keyword_mode=mode, terms=terms)
    if not found:
        return []
    slots = np.array([slot for slot, _ in found], dtype=np.int64)
    score = np.array([value for _, value in found], dtype=np.float64)
    if expansion.keyword != FORMULA_KEYWORD_WEIGHT:
        score += (expansion.keyword - FORMULA_KEYWORD_WEIGHT) * keyword_share(terms, slots)
    lifted = neighbour_scores(columns, slots, score, expansion)
    order = np.lexsort((-columns.timestamp[slots], -lifted))[: req.limit]
    given = np.clip(lifted[order] / expansion.ceiling, 0.0, 1.0)
    floor = -1.0 if req.min_score is UNSET else req.min_score
    kept = zip(slots[order].tolist(), given.tolist(), strict=True)
    return [(slot, value) for slot, value in kept if value >= floor]


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(1, 1500),
    query=st.lists(st.sampled_from([*WORDS, "absent"]), max_size=4).map(" ".join),
    mode=st.sampled_from(["share", "idf", "stems"]),
    limit=st.integers(1, 30),
    pool=st.sampled_from([1, 5, 40, 200, 500]),
    keyword=st.sampled_from([0.8, 0.25]),
    lift=st.sampled_from([0.5, 1.0]),
    min_score=st.sampled_from([None, 0.2]),
    ties=st.booleans(),
)
def test_the_expanded_top_is_the_stage_defined_over_the_formulas_pool(
    seed: int,
    count: int,
    query: str,
    mode: KeywordMode,
    limit: int,
    pool: int,
    keyword: float,
    lift: float,
    min_score: float | None,
    ties: bool,
) -> None:
    rows = memories(seed, count)
    if ties:  # three timestamps, one importance: most memories tie with many others
        stamps = [NOW - WEEK, NOW - 2 * WEEK, NOW]
        rows = [(*row[:3], stamps[n % 3], 0.5, 1.0, *row[6:]) for n, row in enumerate(rows)]
    index = AgentIndex(anchor_ms=NOW - 3 * WEEK)
    index.load(rows)
    rng = np.random.default_rng(seed)
    for at in rng.choice(count, size=count // 8, replace=False):
        index.remove(rows[int(at)][0])
    columns = index.columns()
    fields = {} if min_score is None else {"minScore": min_score}
    req = msgspec.convert({"agentId": "a", "query": query, "limit": limit, **fields}, RecallRequest)
    expansion = Expansion(pool=pool, keyword=keyword, lift=lift)
    found = expanded_rows(
        columns, req, now=NOW, query_vector=None, keyword_mode=mode, expansion=expansion
    )
    assert found == reference(columns, req, expansion, mode)
