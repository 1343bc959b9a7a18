"""memory::recall's ranking: the exact top `limit` of an agent's memories by the contract's
score (formula.py), in recall's order (order.py), over those that pass the filters (filters.py).

`rank_rows` picks how: a large agent without a usable query vector by topk.py, which reads only
the memories that can still win; with a vector index that applies (vector_index.py), a
shortlist picked with the codes (approximate); else every memory is scored (`all_pool`, the
reference the others equal). Ranking reads an agent's columns (columns.py) and needs no
database; the trigger's own reads and writes around it are in trigger.py.
"""

from __future__ import annotations

from typing import Required, TypedDict, Unpack

import numpy as np
import numpy.typing as npt

from handlers.recall.columns import Columns
from handlers.recall.filters import excluded_slots, filter_mask
from handlers.recall.formula import scores
from handlers.recall.keywords import KeywordMode, Terms, keyword_weights
from handlers.recall.order import EMPTY, Pool, Ranked, ids_of, top_pool
from handlers.recall.topk import FAST_FROM, pool_without_vector
from handlers.recall.vector_index import EXACT, VectorIndex, approximate, shortlist_scores
from handlers.text import query_keywords
from schema.memory import RecallRequest


class RankOptions(TypedDict, total=False):
    """What a ranking is asked with besides the request: `rank_rows`'s keyword arguments, which
    `rank` and the expanded mode (expand.py) hand on as they are."""

    now: Required[int]
    query_vector: Required[tuple[str, npt.NDArray[np.float32]] | None]
    keyword_mode: KeywordMode
    excluded: set[str] | frozenset[str]
    vector_index: VectorIndex
    terms: Terms
    by_id: bool


def rank(
    columns: Columns, req: RecallRequest, **options: Unpack[RankOptions]
) -> list[tuple[str, float]]:
    """`rank_rows` as (id, score)."""
    return ids_of(columns, rank_rows(columns, req, **options))


def rank_rows(
    columns: Columns,
    req: RecallRequest,
    *,
    now: int,
    query_vector: tuple[str, npt.NDArray[np.float32]] | None,
    keyword_mode: KeywordMode = "share",
    excluded: set[str] | frozenset[str] = frozenset(),
    vector_index: VectorIndex = EXACT,
    terms: Terms | None = None,
    by_id: bool = True,
) -> Ranked:
    """`rank_pool` as (slot, score), best first."""
    return rank_pool(
        columns,
        req,
        now=now,
        query_vector=query_vector,
        keyword_mode=keyword_mode,
        excluded=excluded,
        vector_index=vector_index,
        terms=terms,
        by_id=by_id,
    ).ranked()


def rank_pool(
    columns: Columns,
    req: RecallRequest,
    *,
    now: int,
    query_vector: tuple[str, npt.NDArray[np.float32]] | None,
    keyword_mode: KeywordMode = "share",
    excluded: set[str] | frozenset[str] = frozenset(),
    vector_index: VectorIndex = EXACT,
    terms: Terms | None = None,
    by_id: bool = True,
) -> Pool:
    """The exact top `limit` as slots and scores (order.py `Pool`): score, then newer
    timestamp, then ascending id, over the memories that pass the filters (all on the
    columns); `excluded` holds the ids left out (the pinned memories returned apart).
    `minScore` drops what ranks below it. Where `vector_index` applies, the top of a
    shortlist picked with the codes (approximate).

    Without a usable query vector a large agent is ranked by topk.py, which scores
    only the memories that can still win; `all_pool` scores every one (and is its reference).
    `terms`: the query's `keyword_weights`, when the caller has them (they are found once).
    Without `by_id`, the same memories in any order (order.py `top_pool`), for a caller that
    orders them itself."""
    rows = columns.rows
    bounds = columns.bounds
    if terms is None:
        terms = keyword_weights(columns, query_keywords(req.query), keyword_mode)
    with_vector = (
        query_vector is not None
        and query_vector[0] in columns.vectors
        and columns.vectors[query_vector[0]].shape[1] == query_vector[1].shape[0]
    )
    if (
        with_vector
        or rows < FAST_FROM
        or bounds is None
        or len(bounds.static) * bounds.block < rows
    ):
        return all_pool(
            columns,
            req,
            now=now,
            query_vector=query_vector,
            keyword_mode=keyword_mode,
            excluded=excluded,
            vector_index=vector_index,
            terms=terms,
            by_id=by_id,
        )
    found = pool_without_vector(
        columns,
        req,
        now=now,
        terms=terms,
        excluded=excluded_slots(columns, excluded),
        bounds=bounds,
        by_id=by_id,
    )
    if found is not None:
        return found
    return all_pool(
        columns,
        req,
        now=now,
        query_vector=None,
        keyword_mode=keyword_mode,
        excluded=excluded,
        terms=terms,
        by_id=by_id,
    )


def all_pool(
    columns: Columns,
    req: RecallRequest,
    *,
    now: int,
    query_vector: tuple[str, npt.NDArray[np.float32]] | None,
    keyword_mode: KeywordMode = "share",
    excluded: set[str] | frozenset[str] = frozenset(),
    vector_index: VectorIndex = EXACT,
    terms: Terms | None = None,
    by_id: bool = True,
) -> Pool:
    """`rank` by scoring every memory of the agent that passes the filters (with the codes, of
    a shortlist of them), as arrays: the reference the faster paths are held to."""
    rows = columns.rows
    if rows == 0:
        return EMPTY
    eligible = filter_mask(columns, req, excluded)
    if eligible is None:
        return EMPTY
    if approximate(columns, query_vector, vector_index):
        assert query_vector is not None
        if not eligible.any():
            return EMPTY
        if terms is None:
            terms = keyword_weights(columns, query_keywords(req.query), keyword_mode)
        shortlist, score = shortlist_scores(
            columns, terms, eligible, now=now, query_vector=query_vector,
            candidates=vector_index.candidates, keyword_weight=vector_index.keyword_weight,
        )  # fmt: skip
        return top_pool(columns, shortlist, score, req, by_id=by_id)
    every = bool(eligible.all())  # then every row's score as it is, not a copy of it
    candidates = None if every else np.flatnonzero(eligible)
    if candidates is not None and len(candidates) == 0:
        return EMPTY
    score = scores(
        columns,
        req.query,
        now=now,
        query_vector=query_vector,
        keyword_mode=keyword_mode,
        terms=terms,
    )
    found = score if candidates is None else score[candidates]
    return top_pool(columns, candidates, found, req, by_id=by_id)
