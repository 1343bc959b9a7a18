"""The prior's bounds per block of slots, which let the ranking without a query vector (topk.py)
skip a block whose rows cannot reach the k-th best score without reading them. The recall index
keeps them in step with an agent's columns (worker/recall_index/agent_index.py)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from handlers.recall.slots import Scores

BLOCK = 4096


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
        whole = rows // self.block  # the full blocks, reduced in place (no padded copy)
        size = max(16, 2 * blocks)
        newest, oldest = (np.full(size, -math.inf) for _ in range(2))
        stamps = timestamp[:rows]
        if whole:
            shaped = stamps[: whole * self.block].reshape(whole, self.block)
            newest[:whole] = shaped.max(axis=1)
            oldest[:whole] = -shaped.min(axis=1).astype(np.float64)
        if blocks > whole:
            newest[whole] = float(stamps[whole * self.block :].max())
            oldest[whole] = -float(stamps[whole * self.block :].min())
        self.newest, self.oldest = newest, oldest
        for name, column in (("static", static), ("growth", growth)):
            fresh = np.full(size, -math.inf)
            if whole:
                fresh[:whole] = column[: whole * self.block].reshape(whole, self.block).max(axis=1)
            if blocks > whole:
                fresh[whole] = column[whole * self.block : rows].max()
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
