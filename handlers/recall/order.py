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
# Scores from which the k-th best is found among those above a sample's: every SAMPLE_STEP-th.
SAMPLE_FROM = 4096
SAMPLE_STEP = 32


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
    candidates: npt.NDArray[np.int64] | None,
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
    long pool of memories stored at the same millisecond, are not read). `candidates` None:
    every slot, `score` of each."""
    if len(score) > req.limit:
        keep = at_least_kth(score, req.limit)  # a row tied with the k-th competes on the rest
        candidates = keep if candidates is None else candidates[keep]
        score = score[keep]
    elif candidates is None:
        candidates = np.arange(len(score))
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


def at_least_kth(score: npt.NDArray[np.float64], limit: int) -> npt.NDArray[np.int64]:
    """Where (ascending) the scores at least the `limit`-th best are, as np.partition orders
    them (NaN above all). Of many, only those not below a sample's `rank`-th best are
    partitioned (at 20 000 scores and a limit of 500, 58 us against 83), which hold every
    score at least the k-th when they are `limit` or more (else all are)."""
    count = len(score)
    if count >= SAMPLE_FROM and 8 * limit <= count:
        sample = score[::SAMPLE_STEP]
        rank = min(len(sample), 2 * limit // SAMPLE_STEP + 4)
        floor = np.partition(sample, len(sample) - rank)[len(sample) - rank]
        above = np.flatnonzero(~(score < floor))  # NaN (above all) as well
        if len(above) >= limit:
            inner = score[above]
            kth = np.partition(inner, len(inner) - limit)[len(inner) - limit]
            found: npt.NDArray[np.int64] = above[inner >= kth]
            return found
    kth = np.partition(score, count - limit)[count - limit]
    return np.flatnonzero(score >= kth)


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
    if count < 2:
        return list(range(min(count, limit)))
    tied = keys[0][1:] == keys[0][:-1]
    for key in keys[1:]:
        tied &= key[1:] == key[:-1]
    if count > limit:
        # The run holding the last place, whole: past the cut only its members can compete.
        after = np.flatnonzero(~tied[limit - 1 :])
        count = limit + int(after[0]) if len(after) else count
        tied = tied[: count - 1]
    if not tied.any():  # most rankings: no two memories alike on the keys
        return list(range(min(count, limit)))
    places = list(range(count))
    if every:
        ends = [*(np.flatnonzero(~tied) + 1).tolist(), count]
        starts = [0, *ends[:-1]]
    else:  # only the run at the cut, if it reaches past it (the runs before it are not found)
        if count <= limit:
            return places
        before = np.flatnonzero(~tied[: limit - 1])
        starts, ends = [int(before[-1]) + 1 if len(before) else 0], [count]
    ids = columns.ids
    for start, end in zip(starts, ends, strict=True):
        if end - start > 1:
            names = [ids[slot] for slot in slots[start:end].tolist()]
            places[start:end] = sorted(places[start:end], key=lambda at: names[at - start])
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
