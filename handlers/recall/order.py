"""Recall's order: score, then newer timestamp, then ascending id; `top_of` cuts candidates to
the first `limit` in it (and drops those below `minScore`), `Top` keeps the best rows offered so
far while a ranking reads rows a batch at a time. A ranking is (slot, score), best first."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from msgspec import UNSET

from handlers.recall.columns import Columns
from handlers.recall.slots import Rows, Scores
from schema.memory import RecallRequest

# A ranking: (slot in the columns, score), best first; `ids_of` names them.
Ranked = list[tuple[int, float]]


def top_of(
    columns: Columns,
    candidates: npt.NDArray[np.int64],
    score: npt.NDArray[np.float64],
    req: RecallRequest,
) -> Ranked:
    """The first `limit` of the candidates (slots) by score, newer timestamp, then ascending
    id, without those below `minScore`."""
    if len(candidates) > req.limit:
        kth = np.partition(score, len(score) - req.limit)[len(score) - req.limit]
        keep = score >= kth  # every row tied with the k-th competes on the tie-breaks
        candidates, score = candidates[keep], score[keep]
    timestamp = columns.timestamp[candidates]
    order = np.lexsort((-timestamp, -score))
    if len(order) > req.limit:
        # Rows that tie the last place on score and timestamp compete on id: keep them all.
        last = order[req.limit - 1]
        tied = (score[order] == score[last]) & (timestamp[order] == timestamp[last])
        order = order[: max(req.limit, int(np.flatnonzero(tied)[-1]) + 1)]
    slots = candidates[order].tolist()
    ordered = score[order]
    tied = (ordered[1:] == ordered[:-1]) & (timestamp[order][1:] == timestamp[order][:-1])
    if tied.any():  # runs equal on score and timestamp go by ascending id
        start = 0
        for end in [*(np.flatnonzero(~tied) + 1).tolist(), len(slots)]:
            if end - start > 1:
                slots[start:end] = sorted(slots[start:end], key=lambda at: columns.ids[at])
            start = end
    floor = -1.0 if req.min_score is UNSET else req.min_score
    values = ordered.tolist()
    kept = zip(slots[: req.limit], values[: req.limit], strict=True)
    return [(slot, value) for slot, value in kept if value >= floor]


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
