"""memory::recall's `expanded` mode: the formula's ranking, then a memory lifted by its neighbours.

A conversation's turns share their topic with the turns around them: the answer to a question
often says "yes, last Friday" and is found only through the turn before it. So the second stage
takes the formula's best `pool` memories (exact, filters applied, by `rank`), re-weighs their
score's keyword term (`keyword` in place of the formula's 0.25: a stage score, not the
contract's formula, which the `formula` mode keeps) and gives each a share of the lead of its
strongest neighbour in the pool on that score: neighbours are the `turns` memories before and
after it in time in the same session, or, for memories without a session, those within
`SESSIONLESS_GAP_MS` of it (counted among the memories stored near it: neighbours.py). The
constants were chosen by cross-validation on LoCoMo (README "Recall quality and speed"). The
score reported is that stage score over the highest it can reach (`Expansion.ceiling`), so it
lies in 0-1 as the formula's does and `minScore` means the same in both modes; the order is the
stage score's. No database, clock or bus: a pure function of the columns and the formula.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Unpack

import msgspec
import numpy as np
import numpy.typing as npt
from msgspec import UNSET

from handlers.recall.columns import Columns
from handlers.recall.keywords import Terms, keyword_weights
from handlers.recall.neighbours import SESSIONLESS_GAP_MS as SESSIONLESS_GAP_MS
from handlers.recall.neighbours import neighbour_scores as neighbour_scores
from handlers.recall.order import Ranked, at_least_kth, first_by_id, ids_of
from handlers.recall.rank import RankOptions, rank_pool
from handlers.recall.slots import member
from handlers.recall.vector_index import EXACT, VectorIndex
from handlers.text import query_keywords
from schema.memory import RecallRequest

# Up to this many rows, the pool's keyword shares come from one pass over each posting.
WHOLE_SHARE_ROWS = 32_768
SEARCHED_FROM = 16
# The keyword term's weight in the contract's formula (formula.py `scores`).
FORMULA_KEYWORD_WEIGHT = 0.25


@dataclass(frozen=True)
class Expansion:
    """`lift`: the share of a stronger neighbour's lead a memory takes; `turns`: neighbours on
    each side; `pool`: how many of the formula's best memories the stage reorders; `keyword`:
    the keyword term's weight in the stage's score (the formula's is 0.25): a conversation's
    answer often shares a rare word with the question that the model's cosine underrates."""

    lift: float = 0.5
    turns: int = 2
    pool: int = 500
    keyword: float = 0.8
    # Slots searched on each side for the turns: stores sent together commit a few out of order.
    reach: int = 32
    # The keyword term's weight in the estimate that picks a vector index's shortlist: the pool
    # is the formula's (0.25), but the stage lifts the memories rich in keywords (0.8), which a
    # shortlist picked on the formula's weight missed: at a million memories the top 10's
    # recall against exact vectors went from 0.80 to 0.93 (README, "One agent of a million").
    shortlist_keyword: float = 0.5

    def __post_init__(self) -> None:
        # A lift above 1 would carry a memory past its neighbour, and past `ceiling`.
        if not (0.0 <= self.lift <= 1.0 and self.keyword >= 0.0):
            raise ValueError(f"lift must be 0-1 and keyword >= 0: {self}")

    @property
    def ceiling(self) -> float:
        """The highest stage score: the formula's terms but the keyword term at 1 (cosine,
        recency, importance and confidence at most 0.75 together), the keyword term at
        `keyword`. A lift of at most 1 never carries a memory above its neighbour's score,
        so no expanded score exceeds it either: 1.55 at the default weight 0.8, 1 at 0.25."""
        return 1.0 - FORMULA_KEYWORD_WEIGHT + self.keyword


def expanded_rank(
    columns: Columns,
    req: RecallRequest,
    *,
    expansion: Expansion = Expansion(),
    **options: Unpack[RankOptions],
) -> list[tuple[str, float]]:
    """`expanded_rows` as (id, expanded score)."""
    return ids_of(columns, expanded_rows(columns, req, expansion=expansion, **options))


def expanded_rows(
    columns: Columns,
    req: RecallRequest,
    *,
    expansion: Expansion = Expansion(),
    **options: Unpack[RankOptions],
) -> Ranked:
    """The top `limit` as (slot, expanded score), by the stage score then newer timestamp (ties
    keep the formula's order); the formula's filters hold (only memories that pass them take
    part). The score given is the stage score over `expansion.ceiling` (0-1; a negative cosine's
    below 0 is given as 0), and `minScore` applies to it."""
    wide = msgspec.structs.replace(req, limit=max(req.limit, expansion.pool), min_score=UNSET)
    if "terms" not in options:  # found once, for the ranking and the stage
        keywords = query_keywords(req.query)
        options["terms"] = keyword_weights(columns, keywords, options.get("keyword_mode", "share"))
    terms = options["terms"]
    index = options.get("vector_index", EXACT)
    options["vector_index"] = _weighed(index, expansion.shortlist_keyword)
    options["by_id"] = False  # the pool's ties are ordered below, by id only where it matters
    slots, formula = rank_pool(columns, wide, **options)
    if len(slots) == 0:
        return []
    score = formula
    if expansion.keyword != FORMULA_KEYWORD_WEIGHT:
        share = keyword_share(terms, slots, columns.rows)
        score = formula + (expansion.keyword - FORMULA_KEYWORD_WEIGHT) * share
    lifted = neighbour_scores(
        columns, slots, score, expansion, among=contenders(score, expansion.lift, req.limit)
    )
    timestamp = columns.timestamp[slots]
    # By the stage score, then newer; ties keep the formula's order (its score, newer, then id):
    # only those at least the `limit`-th best stage score can be in the top (NaN sorts last).
    top = np.arange(len(slots))
    if len(slots) > req.limit and not np.isnan(lifted).any():
        top = at_least_kth(lifted, req.limit)
    order = top[np.lexsort((-formula[top], -timestamp[top], -lifted[top]))]
    keys = (lifted[order], timestamp[order], formula[order])
    chosen = order[first_by_id(columns, slots[order], keys, req.limit)]
    # Scaled after ranking: a division could round two close scores into a tie.
    given = np.clip(lifted[chosen] / expansion.ceiling, 0.0, 1.0)
    floor = -1.0 if req.min_score is UNSET else req.min_score
    kept = zip(slots[chosen].tolist(), given.tolist(), strict=True)
    return [(slot, score) for slot, score in kept if score >= floor]


@functools.lru_cache(maxsize=16)
def _weighed(index: VectorIndex, keyword_weight: float) -> VectorIndex:
    """The vector index with its shortlist's keyword weight (made once: 4 us a recall)."""
    return dataclasses.replace(index, keyword_weight=keyword_weight)


def keyword_share(
    terms: Terms, slots: npt.NDArray[np.int64], rows: int | None = None
) -> npt.NDArray[np.float64]:
    """Each slot's keyword term before its weight (0 to 1), as the formula counts it: the same
    additions in the same order either way. An agent of at most WHOLE_SHARE_ROWS `rows` adds
    each posting to a column of all its rows at once (40 us against 78 for binary searches of
    the pool's 500 at 20 000 memories); a larger one, or without `rows`, searches. Even then a
    posting over SEARCHED_FROM times the pool's size adds only to the pooled slots it holds,
    found by its bits or binary searches (10 us against 23 for 13 000 slots into 500)."""
    if rows is not None and rows <= WHOLE_SHARE_ROWS:
        whole = np.zeros(rows, dtype=np.float64)
        ascending = None
        for posting, weight, dense in terms:
            if posting is None:
                continue
            if len(posting) <= SEARCHED_FROM * len(slots):  # cut at the snapshot's rows
                np.add.at(whole, posting, weight)
                continue
            if ascending is None:
                ascending = np.sort(slots)
            whole[ascending[member(posting, ascending, ascending=True, dense=dense)]] += weight
        found: npt.NDArray[np.float64] = whole[slots]
        return found
    by_slot = np.argsort(slots)
    ascending = slots[by_slot]
    share = np.zeros(len(slots), dtype=np.float64)
    for posting, weight, dense in terms:
        if posting is not None:  # sorted: binary searches, not a set of the posting
            share[by_slot[member(posting, ascending, ascending=True, dense=dense)]] += weight
    return share


def contenders(
    score: npt.NDArray[np.float64], lift: float, limit: int
) -> npt.NDArray[np.bool_] | None:
    """The pooled memories whose expanded score can reach the top `limit` (None: all may).

    A lift never lowers a score, so the `limit`-th best expanded score is at least the
    `limit`-th best stage score; and no memory gains more than `lift` of its lead on the pool's
    best. A memory whose stage score plus that is below the `limit`-th stage score stays out of
    the top whatever its neighbours, and its neighbours need not be looked at (in floating
    point as well: each step of the bound is monotone in the lead it replaces)."""
    if len(score) <= limit or not np.isfinite(score).all():
        return None
    kth = np.partition(score, len(score) - limit)[len(score) - limit]
    best = score.max()
    reach: npt.NDArray[np.bool_] = score + lift * (best - score) >= kth
    return reach
