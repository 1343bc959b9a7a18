"""Sets of slots (an agent's rows in its columns) as sorted arrays: whether rows are in one,
with a long posting's packed bits for the test, and which rows of given ranges are. The ranking
without a query vector (topk.py), the filters on given rows (filters.py), the codes' shortlist
and the expanded mode all ask these questions of postings and slot lists."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

Rows = npt.NDArray[np.signedinteger[Any]]  # slots: int64, or a posting's int32
Scores = npt.NDArray[np.float64]


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
