"""Recall's order: score, then newer timestamp, then ascending id; `top_of` cuts candidates to
the first `limit` in it (and drops those below `minScore`), `Top` keeps the best rows offered so
far while a ranking reads rows a batch at a time. A ranking is (slot, score), best first."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from msgspec import UNSET

from handlers.recall.columns import Columns
from handlers.recall.slots import Rows, Scores
from schema.memory import RecallRequest

# A ranking: (slot in the columns, score), best first; `ids_of` names them.
Ranked = list[tuple[int, float]]


class Pool(NamedTuple):
    """A ranking as two arrays, for a caller that goes on computing on them (expand.py): no
    Python pair per memory of a pool of hundreds."""

    slots: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]

    def ranked(self) -> Ranked:
        return list(zip(self.slots.tolist(), self.scores.tolist(), strict=True))


EMPTY = Pool(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))


def top_of(
    columns: Columns,
    candidates: npt.NDArray[np.int64],
    score: npt.NDArray[np.float64],
    req: RecallRequest,
    *,
    by_id: bool = True,
) -> Ranked:
    """`top_pool` as a ranking."""
    return top_pool(columns, candidates, score, req, by_id=by_id).ranked()


def top_pool(
    columns: Columns,
    candidates: npt.NDArray[np.int64],
    score: npt.NDArray[np.float64],
    req: RecallRequest,
    *,
    by_id: bool = True,
) -> Pool:
    """The first `limit` of the candidates (slots) by score, newer timestamp, then ascending
    id, without those below `minScore`. Without `by_id`, the same memories for a caller that
    orders them on its own keys (expand.py): in no particular order when no tie straddles the
    cut (no sort at all), else with the memories equal on score and timestamp left in the
    candidates' order but those at the cut, taken by id (the ids of the ties inside, most of a
    long pool of memories stored at the same millisecond, are not read)."""
    if len(candidates) > req.limit:
        kth = np.partition(score, len(score) - req.limit)[len(score) - req.limit]
        keep = score >= kth  # every row tied with the k-th competes on the tie-breaks
        candidates, score = candidates[keep], score[keep]
    if not by_id and len(candidates) <= req.limit:  # no tie at the cut: the members will do
        slots, values = candidates.astype(np.int64, copy=False), score
    else:
        timestamp = columns.timestamp[candidates]
        order = np.lexsort((-timestamp, -score))
        places = first_by_id(
            columns, candidates[order], (score[order], timestamp[order]), req.limit, every=by_id
        )
        chosen = order[places]
        slots, values = candidates[chosen].astype(np.int64, copy=False), score[chosen]
    above = values >= (-1.0 if req.min_score is UNSET else req.min_score)
    if not above.all():
        slots, values = slots[above], values[above]
    return Pool(slots, values)


def first_by_id(
    columns: Columns,
    slots: npt.NDArray[np.int64],
    keys: tuple[npt.NDArray[Any], ...],
    limit: int,
    *,
    every: bool = True,
) -> list[int]:
    """Positions of the first `limit` of `slots`, which are in order of `keys` (equal keys: a
    tie), each run of ties in ascending id order: every run (`every`), or only the run at the
    cut, whose members compete on id for the places left."""
    count = len(slots)
    tied = np.ones(max(count - 1, 0), dtype=np.bool_)
    for key in keys:
        tied &= key[1:] == key[:-1]
    if count > limit:
        # The run holding the last place, whole: past the cut only its members can compete.
        after = np.flatnonzero(~tied[limit - 1 :])
        count = limit + int(after[0]) if len(after) else count
        tied = tied[: count - 1]
    places = list(range(count))
    ends = [*(np.flatnonzero(~tied) + 1).tolist(), count]
    starts = [0, *ends[:-1]]
    if not every:  # only the run at the cut, if it reaches past it
        starts, ends = starts[-1:], ends[-1:]
        if ends[0] <= limit:
            return places
    ids = columns.ids
    for start, end in zip(starts, ends, strict=True):
        if end - start > 1:
            places[start:end] = sorted(places[start:end], key=lambda at: ids[int(slots[at])])
    return places[:limit]


def ids_of(columns: Columns, ranked: Ranked) -> list[tuple[str, float]]:
    """The ranking as (memory id, score)."""
    return [(columns.ids[slot], score) for slot, score in ranked]


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
