"""The parts of handlers/topk.py that work on sets of rows (slots) rather than on a query: the
prior's bounds per block of slots, membership in sorted slot lists, recall's filters on given
rows, and the best rows found so far."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from msgspec import UNSET

from handlers import recall
from handlers.taxonomy import CATEGORY_CODES, SENSITIVITY_CODES, categories_of
from schema.memory import RecallRequest

BLOCK = 4096
Rows = npt.NDArray[np.signedinteger[Any]]  # slots: int64, or a posting's int32
Scores = npt.NDArray[np.float64]


class BlockBounds:
    """Per block of `block` slots, over its rows: the greatest static part, growth and
    timestamp, and the least timestamp (kept negated, so that every array is a maximum). A
    rescore may only widen them (a narrowed value leaves a looser bound, still valid); a load
    rebuilds them. Arrays are replaced, never resized, so a ranking holding them stays valid."""

    NAMES = ("static", "growth", "newest", "oldest")

    def __init__(self, block: int = BLOCK) -> None:
        self.block = block
        self.static: Scores = np.full(16, -math.inf)
        self.growth: Scores = np.full(16, -math.inf)
        self.newest: Scores = np.full(16, -math.inf)
        self.oldest: Scores = np.full(16, -math.inf)  # minus the least timestamp

    def rebuild(
        self, static: Scores, growth: Scores, timestamp: npt.NDArray[np.int64], rows: int
    ) -> None:
        blocks = -(-rows // self.block)
        size = max(16, 2 * blocks)
        stamps = timestamp[:rows].astype(np.float64)
        for name, column in zip(self.NAMES, (static, growth, stamps, -stamps), strict=True):
            padded = np.full(blocks * self.block, -math.inf)
            padded[:rows] = column[:rows]
            fresh = np.full(size, -math.inf)
            fresh[:blocks] = padded.reshape(blocks, self.block).max(axis=1, initial=-math.inf)
            setattr(self, name, fresh)

    def widen(self, at: int, static: float, growth: float, timestamp: int) -> None:
        block = at // self.block
        if block >= len(self.static):
            size = 2 * block + 2
            for name in self.NAMES:
                old = getattr(self, name)
                new = np.full(size, -math.inf)
                new[: len(old)] = old
                setattr(self, name, new)
        for name, value in zip(
            self.NAMES, (static, growth, float(timestamp), -float(timestamp)), strict=True
        ):
            found = getattr(self, name)
            if not value <= found[block]:
                found[block] = value


class Dense(NamedTuple):
    """A long posting's slots below `upto` as packed bits (slot s: bit s % 8 of byte s // 8):
    testing a row is a gather, where a binary search in a posting of a million slots missed
    the cache at each step (50 ns a row)."""

    bits: npt.NDArray[np.uint8]
    upto: int


def member(
    sorted_slots: npt.NDArray[Any],
    rows: Rows,
    *,
    ascending: bool = False,
    dense: Dense | None = None,
) -> npt.NDArray[np.bool_]:
    """Which of `rows` are in the ascending array `sorted_slots`. With `ascending` (rows are
    ascending and distinct) the shorter array is searched for in the longer, whichever it is:
    the fewer binary searches (it measured no faster on the scale bench's queries, whose rows
    are mostly the shorter already). `dense`: the same posting's bits below its `upto`."""
    if dense is not None and len(rows) and dense.upto > 0:
        at = np.minimum(rows, dense.upto - 1)
        hit: npt.NDArray[np.bool_] = ((dense.bits[at >> 3] >> (at & 7)) & 1).astype(np.bool_)
        above = rows >= dense.upto
        if above.any():
            # The bound in the posting's own type: a Python int would copy the posting.
            newer = sorted_slots[
                int(np.searchsorted(sorted_slots, sorted_slots.dtype.type(dense.upto))) :
            ]
            hit[above] = member(newer, rows[above], ascending=ascending)
        return hit
    if len(sorted_slots) == 0:
        return np.zeros(len(rows), dtype=np.bool_)
    # Keys of another integer type than the array searched make numpy copy all of that array
    # to theirs first (a posting is int32, rows are int64): search in the posting's own type.
    rows = rows.astype(sorted_slots.dtype, copy=False)
    if ascending and len(sorted_slots) * math.log2(len(rows) + 1) < len(rows) * math.log2(
        len(sorted_slots) + 1
    ):
        at = np.searchsorted(rows, sorted_slots)
        inside = at < len(rows)
        at, wanted = at[inside], sorted_slots[inside]
        hit = np.zeros(len(rows), dtype=np.bool_)
        hit[at[rows[at] == wanted]] = True
        return hit
    at = np.searchsorted(sorted_slots, rows)
    np.minimum(at, len(sorted_slots) - 1, out=at)
    found: npt.NDArray[np.bool_] = sorted_slots[at] == rows
    return found


def slot_array(slots: Sequence[int] | npt.NDArray[np.int32], rows: int) -> Rows:
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
            tags: Mapping[tuple[str, str], Sequence[int] | npt.NDArray[np.int32]] = columns.tags
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
            keep &= member(slots, rows, ascending=True)
        if self.categories is not None:
            keep &= np.isin(c.category[rows], self.categories)
        if req.max_sensitivity is not UNSET:
            keep &= c.sensitivity[rows] <= SENSITIVITY_CODES[req.max_sensitivity]
        if self.tagged is not None:
            keep &= member(self.tagged, rows, ascending=True)
        if len(self.excluded):
            keep &= ~member(self.excluded, rows, ascending=True)
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
    kind = sorted_slots.dtype  # keys of another type would copy the posting to theirs
    low = np.searchsorted(sorted_slots, starts.astype(kind, copy=False))
    high = np.searchsorted(sorted_slots, ends.astype(kind, copy=False))
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
