"""Recall's exact top-k without a query vector, scoring only the memories that can still win.

Without cosine a memory's score is its prior, min(1, growth * c(now)) * 0.10 + static, plus
0.25 * the weights of the query keywords it has. The prior is bounded per block of slots
(`BlockBounds`: the greatest growth and static part of each block's rows), so a block whose
bound cannot reach the k-th best score found so far is skipped without reading its rows.
Keywords are split MaxScore-style: rare ones ("essential", small postings, visited heaviest
first) have their rows scored exactly, which soon gives a high k-th score; common ones are left
to the block pass, which scores a block's rows exactly, common keywords included, only when
its prior bound plus their total weight reaches that k-th score. Every score is computed with
the same floating point operations, in the same order, as `formula.scores`, and the
final order is `order.top_of`'s, so the result is the full scan's, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from msgspec import UNSET

from handlers.recall.block_bounds import BlockBounds
from handlers.recall.columns import WEEK_MS, Columns, Posting
from handlers.recall.filters import Filter
from handlers.recall.formula import prior
from handlers.recall.keywords import Terms
from handlers.recall.order import EMPTY, Pool, Top, top_pool
from handlers.recall.slots import Dense, Rows, Scores, in_ranges, member
from schema.memory import RecallRequest

# Below this many rows the full scan (`rank.all_pool`) is as fast: a few vector operations.
FAST_FROM = 32_768
# Floating slack on every bound: a bound adds its terms in another order than a score does.
SLACK = 1e-9
# Keywords whose postings hold more than this share of the rows are left to the block pass.
ESSENTIAL_SHARE = 1 / 16
# When blocks holding more than this share of the rows are still in play, scanning all is faster.
FULL_SCAN_SHARE = 0.5


def pool_without_vector(
    columns: Columns,
    req: RecallRequest,
    *,
    now: int,
    terms: Terms,
    excluded: Rows,
    bounds: BlockBounds,
    essential_share: float = ESSENTIAL_SHARE,
    full_scan_share: float = FULL_SCAN_SHARE,
    by_id: bool = True,
) -> Pool | None:
    """`rank.rank`'s answer without a query vector as arrays (order.py `Pool`; `terms`: the
    query's keyword weights, `excluded`: the slots left out), or None when the bounds leave so
    many memories in play that `rank.all_pool` is faster. `by_id`: as `rank.rank_rows`'s."""
    if columns.rows == 0:
        return EMPTY
    session_code = None
    if req.session_id is not UNSET:
        session_code = columns.session_codes.get(req.session_id)
        if session_code is None:
            return EMPTY
    ranking = Ranking(columns, req, now, terms, Filter(columns, req, excluded, session_code))
    driver = ranking.passes.driver()
    if driver is not None and len(driver) <= columns.rows * essential_share:
        ranking.settle(driver, {}, ranking.present)
    else:
        essential = ranking.essential(essential_share, bounds)
        if not ranking.blocks(bounds, essential, full_scan_share):
            return None
    return top_pool(columns, ranking.top.rows, ranking.top.scores, req, by_id=by_id)


class Ranking:
    """One query's state: its keywords (weights in the query's order, and those with rows), the
    best rows so far, and the rows' prior at `now`."""

    def __init__(
        self,
        columns: Columns,
        req: RecallRequest,
        now: int,
        terms: Terms,
        passes: Filter,
    ) -> None:
        self.columns, self.passes = columns, passes
        self.c = 0.5 ** ((now - columns.anchor_ms) / WEEK_MS)
        # Postings in their own integer type: a million-row posting copied to int64 cost 1 ms.
        self.terms = terms
        # Keywords some row has, heaviest first (then rarest): MaxScore's order.
        self.present = [
            at
            for at, (posting, _, _) in enumerate(self.terms)
            if posting is not None and len(posting)
        ]
        self.present.sort(key=lambda at: (-self.weight(at), len(self.posting(at))))
        self.top = Top(req.limit, -math.inf if req.min_score is UNSET else req.min_score)

    def posting(self, at: int) -> Posting:
        posting = self.terms[at].posting
        assert posting is not None
        return posting

    def weight(self, at: int) -> float:
        return self.terms[at].weight

    def dense(self, at: int) -> Dense | None:
        return self.terms[at].dense

    def settle(
        self,
        rows: Rows,
        hits: dict[int, npt.NDArray[np.bool_]],
        unknown: list[int],
        settled: Sequence[int] = (),
    ) -> None:
        """Offer the rows that pass and may reach the k-th score, exactly scored, but those in
        the postings of the keywords `settled` before. `hits`: the keywords already known for
        them (which rows have each); `unknown`: the keywords to look up, heaviest first,
        dropping rows as soon as their bound falls below the k-th score."""
        rows = rows.astype(np.int64, copy=False)  # an int32 index is converted at each gather
        score = prior(self.columns, rows, self.c)
        bound = score + SLACK + 0.25 * sum(self.weight(at) for at in unknown)
        for at, hit in hits.items():
            bound[hit] += 0.25 * self.weight(at)
        keep = bound >= self.top.theta
        for at in settled:
            keep[keep] &= ~member(
                self.posting(at), rows[keep], ascending=True, dense=self.dense(at)
            )
        keep[keep] &= self.passes.passing(rows[keep])
        rows, score, bound = rows[keep], score[keep], bound[keep]
        hits = {at: hit[keep] for at, hit in hits.items()}
        theta = self.top.theta
        limit = self.top.limit
        if unknown and len(rows) > limit:
            # What these rows score without the keywords not yet looked up is a lower bound:
            # the k-th best of it is one too for the k-th score, before any look-up.
            lower = bound - SLACK - 0.25 * sum(self.weight(at) for at in unknown)
            kth = float(np.partition(lower, len(lower) - limit)[len(lower) - limit])
            theta = max(theta, kth - SLACK)
        for at in unknown:
            hit = member(self.posting(at), rows, ascending=True, dense=self.dense(at))
            bound[~hit] -= 0.25 * self.weight(at)
            keep = bound >= theta
            rows, score, bound = rows[keep], score[keep], bound[keep]
            hits = {known: found[keep] for known, found in hits.items()}
            hits[at] = hit[keep]
        for at, (_, weight, _) in enumerate(self.terms):  # the query's order, as `scores` adds
            if at in hits:
                score[hits[at]] += 0.25 * weight
        self.top.offer(rows, score)

    def essential(self, share: float, bounds: BlockBounds) -> list[int]:
        """Score the rows of the heaviest keywords with small postings until the rest of the
        keywords with the highest prior cannot reach the k-th score; those keywords."""
        prior_max = float(self.block_priors(bounds).max())
        done: list[int] = []
        for at in self.present:
            rest = sum(self.weight(other) for other in self.present if other not in done)
            if prior_max + 0.25 * rest + SLACK < self.top.theta:
                break
            posting = self.posting(at)
            if len(posting) > self.columns.rows * share:
                continue
            unknown = [other for other in self.present if other != at and other not in done]
            self.settle(posting, {at: np.ones(len(posting), dtype=np.bool_)}, unknown, done)
            done.append(at)
        return done

    def block_priors(self, bounds: BlockBounds) -> Scores:
        """Per block, the highest prior any of its rows can have now (minus infinity for a
        block whose timestamps all fall outside `since`..`until`)."""
        blocks = -(-self.columns.rows // bounds.block)
        recency = bounds.growth[:blocks] * self.c
        np.minimum(recency, 1.0, out=recency)
        recency *= 0.10
        bound: Scores = recency + bounds.static[:blocks]
        bound[np.isnan(bound)] = math.inf
        req = self.passes.req
        if req.since is not UNSET:
            bound[bounds.newest[:blocks] < req.since] = -math.inf
        if req.until is not UNSET:
            bound[-bounds.oldest[:blocks] >= req.until] = -math.inf
        return bound

    def blocks(self, bounds: BlockBounds, essential: list[int], full_scan_share: float) -> bool:
        """Score the rows in no essential posting, block by block, highest bound first (in
        batches of 1, 2, 4, ... blocks), while a block's bound reaches the k-th score; False
        when so many blocks still could that scanning every row is cheaper."""
        others = [at for at in self.present if at not in essential]
        bound = self.block_priors(bounds) + 0.25 * sum(self.weight(at) for at in others) + SLACK
        order = np.argsort(-bound, kind="stable")
        order = order[bound[order] >= self.top.theta]
        taken, batch = 0, 1
        while taken < len(order):
            if taken >= 3:  # after the first batches, the best bounds, have set the k-th score
                left = np.count_nonzero(bound[order[taken:]] >= self.top.theta)
                if left * bounds.block > full_scan_share * self.columns.rows:
                    return False
            chosen = order[taken : taken + batch]
            taken += batch
            batch *= 2
            chosen = np.sort(chosen[bound[chosen] >= self.top.theta])
            if len(chosen) == 0:
                break
            starts = chosen * bounds.block
            ends = np.minimum(starts + bounds.block, self.columns.rows)
            rows = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)])
            keep = np.ones(len(rows), dtype=np.bool_)
            for at in essential:
                keep &= ~in_ranges(self.posting(at), starts, ends)
            hits = {at: in_ranges(self.posting(at), starts, ends) for at in others}
            rows = rows[keep]
            self.settle(rows, {at: hit[keep] for at, hit in hits.items()}, [])
        return True
