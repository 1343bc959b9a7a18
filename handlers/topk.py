"""Recall's exact top-k without a query vector, scoring only the memories that can still win.

Without cosine a memory's score is its prior, min(1, growth * c(now)) * 0.10 + static, plus
0.25 * the weights of the query keywords it has. The prior is bounded per block of slots
(`BlockBounds`: the greatest growth and static part of each block's rows), so a block whose
bound cannot reach the k-th best score found so far is skipped without reading its rows.
Keywords are split MaxScore-style: rare ones ("essential", small postings, visited heaviest
first) have their rows scored exactly, which soon gives a high k-th score; common ones are left
to the block pass, which scores a block's rows exactly, common keywords included, only when
its prior bound plus their total weight reaches that k-th score. Every score is computed with
the same floating point operations, in the same order, as `handlers.recall.scores`, and the
final order is `handlers.recall.top_of`'s, so the result is the full scan's, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from msgspec import UNSET

from handlers import recall
from handlers.taxonomy import CATEGORY_CODES, SENSITIVITY_CODES, categories_of
from handlers.text import query_keywords, stem
from schema.memory import RecallRequest

BLOCK = 4096
# Below this many rows the full scan (`recall.rank_all`) is as fast: a few vector operations.
FAST_FROM = 16_384
# Floating slack on every bound: a bound adds its terms in another order than a score does.
SLACK = 1e-9
# Keywords whose postings hold more than this share of the rows are left to the block pass.
ESSENTIAL_SHARE = 1 / 16
Rows = npt.NDArray[np.int64]
Scores = npt.NDArray[np.float64]


class BlockBounds:
    """Per block of `block` slots: the greatest static part and growth of its rows. A rescore
    may only raise them (a lowered value leaves a looser bound, still valid); a load rebuilds
    them. Arrays are replaced, never resized, so a ranking holding the old ones stays valid."""

    def __init__(self, block: int = BLOCK) -> None:
        self.block = block
        self.static: Scores = np.full(16, -math.inf)
        self.growth: Scores = np.full(16, -math.inf)

    def rebuild(self, static: Scores, growth: Scores, rows: int) -> None:
        blocks = -(-rows // self.block)
        size = max(16, 2 * blocks)
        fresh_static, fresh_growth = np.full(size, -math.inf), np.full(size, -math.inf)
        for fresh, column in ((fresh_static, static), (fresh_growth, growth)):
            padded = np.full(blocks * self.block, -math.inf)
            padded[:rows] = column[:rows]
            fresh[:blocks] = padded.reshape(blocks, self.block).max(axis=1, initial=-math.inf)
        self.static, self.growth = fresh_static, fresh_growth

    def raise_to(self, at: int, static: float, growth: float) -> None:
        block = at // self.block
        if block >= len(self.static):
            size = 2 * block + 2
            for name in ("static", "growth"):
                old = getattr(self, name)
                new = np.full(size, -math.inf)
                new[: len(old)] = old
                setattr(self, name, new)
        # Growth before static: both only rise, and a reader sees each at least as it was.
        if not growth <= self.growth[block]:
            self.growth[block] = growth
        if not static <= self.static[block]:
            self.static[block] = static


def member(sorted_slots: npt.NDArray[Any], rows: Rows) -> npt.NDArray[np.bool_]:
    """Which of `rows` are in the ascending array `sorted_slots`."""
    if len(sorted_slots) == 0:
        return np.zeros(len(rows), dtype=np.bool_)
    at = np.searchsorted(sorted_slots, rows)
    np.minimum(at, len(sorted_slots) - 1, out=at)
    found: npt.NDArray[np.bool_] = sorted_slots[at] == rows
    return found


def slot_array(slots: Sequence[int], rows: int) -> Rows:
    """An append-only slot list (ascending) as an array of the slots below `rows`, copied: a
    view would pin the writer's array.array, which could then not grow."""
    found = np.array(slots, dtype=np.int64)
    return found[: int(np.searchsorted(found, rows))]


class Filter:
    """recall.rank's filters, applied to the rows given rather than to the whole agent."""

    def __init__(
        self,
        columns: recall.Columns,
        req: RecallRequest,
        excluded: Rows,
        session_code: int | None,
    ) -> None:
        self.columns, self.req = columns, req
        self.excluded, self.session_code = excluded, session_code
        rows = columns.rows
        self.metadata: list[Rows] = []
        if req.metadata is not UNSET:
            tags: Mapping[tuple[str, str], Sequence[int]] = columns.tags
            for key, value in req.metadata.items():
                self.metadata.append(
                    slot_array(tags.get((key, recall.canonical_json(value)), ()), rows)
                )
        self.tagged: Rows | None = None
        if req.tags is not UNSET:
            found = [slot_array(columns.tag_slots.get(tag, ()), rows) for tag in req.tags]
            self.tagged = np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)
        categories = categories_of(req)
        self.categories = None if categories is None else [CATEGORY_CODES[c] for c in categories]

    def driver(self) -> Rows | None:
        """The only rows that can pass, when a slot-list filter names them (else None)."""
        lists = self.metadata + ([] if self.tagged is None else [self.tagged])
        if not lists:
            return None
        smallest = min(lists, key=len)
        return smallest

    def passing(self, rows: Rows) -> npt.NDArray[np.bool_]:
        c, req = self.columns, self.req
        keep: npt.NDArray[np.bool_] = c.live[rows]
        if req.pinned is not UNSET:
            keep &= c.pinned[rows] == req.pinned
        for slots in self.metadata:
            keep &= member(slots, rows)
        if self.categories is not None:
            keep &= np.isin(c.category[rows], self.categories)
        if req.max_sensitivity is not UNSET:
            keep &= c.sensitivity[rows] <= SENSITIVITY_CODES[req.max_sensitivity]
        if self.tagged is not None:
            keep &= member(self.tagged, rows)
        if len(self.excluded):
            keep &= ~member(self.excluded, rows)
        if req.since is not UNSET or req.until is not UNSET:
            timestamp = c.timestamp[rows]
            if req.since is not UNSET:
                keep &= timestamp >= req.since
            if req.until is not UNSET:
                keep &= timestamp < req.until
        if req.roles is not UNSET:
            keep &= np.isin(c.role[rows], [recall.ROLE_CODES[role] for role in req.roles])
        if self.session_code is not None:
            keep &= c.session[rows] == self.session_code
        return keep


def in_ranges(sorted_slots: Rows, starts: Rows, ends: Rows) -> npt.NDArray[np.bool_]:
    """Which rows of the ranges [starts[i], ends[i]), laid end to end, are in `sorted_slots`:
    reads only the slots inside the ranges, not every row of them."""
    lengths = ends - starts
    found = np.zeros(int(lengths.sum()), dtype=np.bool_)
    low = np.searchsorted(sorted_slots, starts)
    high = np.searchsorted(sorted_slots, ends)
    offset = 0
    for start, length, lo, hi in zip(starts, lengths, low, high, strict=True):
        if hi > lo:
            found[sorted_slots[lo:hi] - (start - offset)] = True
        offset += int(length)
    return found


class Top:
    """The best rows offered so far: every row scoring at least the k-th best (ties kept, as
    they compete on timestamp and id), and `theta`, the score a row must reach to matter."""

    def __init__(self, limit: int, floor: float) -> None:
        self.limit = limit
        self.theta = floor
        self.rows: Rows = np.zeros(0, dtype=np.int64)
        self.scores: Scores = np.zeros(0, dtype=np.float64)

    def offer(self, rows: Rows, scores: Scores) -> None:
        if len(rows) == 0:
            return
        rows, scores = np.concatenate([self.rows, rows]), np.concatenate([self.scores, scores])
        if len(scores) > self.limit:
            kth = float(np.partition(scores, len(scores) - self.limit)[len(scores) - self.limit])
            keep = scores >= kth
            rows, scores = rows[keep], scores[keep]
            self.theta = max(self.theta, kth)
        self.rows, self.scores = rows, scores


Term = tuple[int, Rows, float]  # (place in the query's order, posting below `rows`, weight)


def weighted_terms(
    columns: recall.Columns, mode: recall.KeywordMode, query: str
) -> list[tuple[Rows | None, float]]:
    """`recall.keyword_weights`'s postings and weights, computed without reading every row:
    postings are cut at `rows` but keep deleted rows (the filter drops them), and the live
    counts IDF needs come from the deleted slots, which are few."""
    keywords = query_keywords(query)
    if mode == "stems":
        stems = list(dict.fromkeys(stem(keyword) for keyword in keywords))
        found = [recall.stem_posting(columns.postings, stemmed) for stemmed in stems]
    else:
        found = [columns.postings.get(keyword) for keyword in keywords]
    if not found:
        return []
    rows = columns.rows
    postings = [None if p is None else p[: int(np.searchsorted(p, rows))] for p in found]
    if mode == "share":
        weights = [1.0] * len(postings)
    else:
        live = columns.live[:rows]
        alive = int(np.count_nonzero(live))
        dead = np.flatnonzero(~live) if alive < rows else np.zeros(0, dtype=np.int64)

        def live_count(posting: Rows) -> int:
            if len(dead) == 0:
                return len(posting)
            if len(dead) < len(posting):
                return len(posting) - int(np.count_nonzero(member(posting, dead)))
            return int(np.count_nonzero(live[posting]))

        memories = max(1, alive)
        weights = [recall.idf(memories, 0 if p is None else live_count(p)) for p in postings]
    total = sum(weights)
    return [(posting, weight / total) for posting, weight in zip(postings, weights, strict=True)]


def prior(columns: recall.Columns, rows: Rows, c: float) -> Scores:
    """`recall.scores`'s first steps, on these rows only (the same operations, in order)."""
    total: Scores = columns.growth[rows] * c
    np.minimum(total, 1.0, out=total)
    total *= 0.10
    total += columns.static[rows]
    return total


def rank_without_vector(
    columns: recall.Columns,
    req: RecallRequest,
    *,
    now: int,
    keyword_mode: recall.KeywordMode,
    excluded: Rows,
    bounds: BlockBounds,
    essential_share: float = ESSENTIAL_SHARE,
) -> list[tuple[str, float]]:
    """`recall.rank`'s answer without a query vector; `excluded`: the slots left out."""
    if columns.rows == 0:
        return []
    session_code = None
    if req.session_id is not UNSET:
        session_code = columns.session_codes.get(req.session_id)
        if session_code is None:
            return []
    ranking = Ranking(columns, req, now, keyword_mode, Filter(columns, req, excluded, session_code))
    driver = ranking.passes.driver()
    if driver is not None and len(driver) <= columns.rows * essential_share:
        ranking.settle(driver, {}, ranking.present)
    else:
        essential = ranking.essential(essential_share, bounds)
        ranking.blocks(bounds, essential)
    return recall.top_of(columns, ranking.top.rows, ranking.top.scores, req)


class Ranking:
    """One query's state: its keywords (weights in the query's order, and those with rows), the
    best rows so far, and the rows' prior at `now`."""

    def __init__(
        self,
        columns: recall.Columns,
        req: RecallRequest,
        now: int,
        keyword_mode: recall.KeywordMode,
        passes: Filter,
    ) -> None:
        self.columns, self.passes = columns, passes
        self.c = 0.5 ** ((now - columns.anchor_ms) / recall.WEEK_MS)
        self.terms = weighted_terms(columns, keyword_mode, req.query)
        # Keywords some row has, heaviest first (then rarest): MaxScore's order.
        self.present = [
            at for at, (posting, _) in enumerate(self.terms) if posting is not None and len(posting)
        ]
        self.present.sort(key=lambda at: (-self.weight(at), len(self.posting(at))))
        self.top = Top(req.limit, -math.inf if req.min_score is UNSET else req.min_score)

    def posting(self, at: int) -> Rows:
        posting = self.terms[at][0]
        assert posting is not None
        return posting

    def weight(self, at: int) -> float:
        return self.terms[at][1]

    def settle(
        self, rows: Rows, hits: dict[int, npt.NDArray[np.bool_]], unknown: list[int]
    ) -> None:
        """Offer the rows that pass and may reach the k-th score, exactly scored. `hits`: the
        keywords already known for them (which rows have each); `unknown`: the keywords to look
        up, heaviest first, dropping rows as soon as their bound falls below the k-th score."""
        score = prior(self.columns, rows, self.c)
        bound = score + SLACK + 0.25 * sum(self.weight(at) for at in unknown)
        for at, hit in hits.items():
            bound[hit] += 0.25 * self.weight(at)
        keep = (bound >= self.top.theta) & self.passes.passing(rows)
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
            hit = member(self.posting(at), rows)
            bound[~hit] -= 0.25 * self.weight(at)
            keep = bound >= theta
            rows, score, bound = rows[keep], score[keep], bound[keep]
            hits = {known: found[keep] for known, found in hits.items()}
            hits[at] = hit[keep]
        for at, (_, weight) in enumerate(self.terms):  # the query's order, as `scores` adds
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
            # Rows of keywords already done were settled with them.
            rows = posting
            for other in done:
                rows = rows[~member(self.posting(other), rows)] if len(rows) else rows
            unknown = [other for other in self.present if other != at and other not in done]
            self.settle(rows, {at: np.ones(len(rows), dtype=np.bool_)}, unknown)
            done.append(at)
        return done

    def block_priors(self, bounds: BlockBounds) -> Scores:
        """Per block, the highest prior any of its rows can have now."""
        blocks = -(-self.columns.rows // bounds.block)
        recency = bounds.growth[:blocks] * self.c
        np.minimum(recency, 1.0, out=recency)
        recency *= 0.10
        bound: Scores = recency + bounds.static[:blocks]
        bound[np.isnan(bound)] = math.inf
        return bound

    def blocks(self, bounds: BlockBounds, essential: list[int]) -> None:
        """Score the rows in no essential posting, block by block, highest bound first (in
        batches of 1, 2, 4, ... blocks), while a block's bound reaches the k-th score."""
        others = [at for at in self.present if at not in essential]
        bound = self.block_priors(bounds) + 0.25 * sum(self.weight(at) for at in others) + SLACK
        order = np.argsort(-bound, kind="stable")
        order = order[bound[order] >= self.top.theta]
        taken, batch = 0, 1
        while taken < len(order):
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
