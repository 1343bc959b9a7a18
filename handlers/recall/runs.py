"""Where each slot's run of memories stored as they were said begins: slots all live, of one
session (or all without one) and in time order, one after another. The expanded mode's
neighbour stage (neighbours.py) takes a window of slots that is one such run in its own order,
without gathering the window to look: a window [start, end] of at most SPAN + 1 slots is one
run exactly when `runs[end] <= start`.

An entry is never lower than SPAN slots before its own, so that a deletion or a rescore
rewrites at most the SPAN entries after it, not the rest of a run that may be a million slots
long (1 ms a deletion there): the windows never look further back.

`runs_of` finds them over an agent's columns; the recall index keeps them in step with its
writes (`relink` after a slot is deleted or its timestamp changes, `run_at` for a new slot:
worker/recall_index/agent_index.py), and the stage finds them itself where the columns come
without them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# slot -> the first slot of its run or SPAN slots before it, whichever is later (a live slot),
# or the slot after it (a deleted one: no window holding it is a run). Never decreasing.
Runs = npt.NDArray[np.int32]
SPAN = 128


def runs_of(
    live: npt.NDArray[np.bool_],
    session: npt.NDArray[np.int32],
    timestamp: npt.NDArray[np.int64],
    rows: int,
    size: int | None = None,
    span: int | None = None,
) -> Runs:
    """The runs of the first `rows` slots (in an array of `size`, the rest 0), for windows of
    at most `span` + 1 slots (SPAN: the module's, read at the call)."""
    found = np.zeros(max(rows, size or 0), dtype=np.int32)
    found[:rows] = _between(live, session, timestamp, 0, rows, None, SPAN if span is None else span)
    return found


def _between(
    live: npt.NDArray[np.bool_],
    session: npt.NDArray[np.int32],
    timestamp: npt.NDArray[np.int64],
    low: int,
    high: int,
    before: int | None,
    span: int,
) -> Runs:
    """The entries of slots low..high-1, given `before`, the entry of slot low - 1 (None: no
    slot before low)."""
    runs = np.arange(low, high, dtype=np.int32)
    if high <= low:
        return runs
    first = max(low - 1, 0)
    linked = live[first + 1 : high] & live[first : high - 1]
    linked &= session[first + 1 : high] == session[first : high - 1]
    linked &= timestamp[first + 1 : high] >= timestamp[first : high - 1]
    if low > 0:  # the pairs (slot - 1, slot) from low on
        runs[linked] = 0
        if linked[0] and before is not None:
            runs[0] = before
    else:
        runs[1:][linked] = 0
    np.maximum.accumulate(runs, out=runs)
    np.maximum(runs, np.arange(low - span, high - span, dtype=np.int32), out=runs)
    dead = np.flatnonzero(~live[low:high])
    runs[dead] = dead + (low + 1)
    return runs


def _linked(
    live: npt.NDArray[np.bool_],
    session: npt.NDArray[np.int32],
    timestamp: npt.NDArray[np.int64],
    at: int,
) -> bool:
    """Whether slot `at` continues the run of slot `at - 1` (`item`: Python values, cheaper
    than numpy scalars on a store's path)."""
    before = at - 1
    return (
        at > 0
        and live.item(at)
        and live.item(before)
        and session.item(at) == session.item(before)
        and timestamp.item(at) >= timestamp.item(before)
    )


def run_at(
    runs: Runs,
    live: npt.NDArray[np.bool_],
    session: npt.NDArray[np.int32],
    timestamp: npt.NDArray[np.int64],
    at: int,
) -> int:
    """Slot `at`'s entry, given the entries before it."""
    if not live.item(at):
        return at + 1
    begins = int(runs.item(at - 1)) if _linked(live, session, timestamp, at) else at
    return max(begins, at - SPAN)


def relink(
    runs: Runs,
    live: npt.NDArray[np.bool_],
    session: npt.NDArray[np.int32],
    timestamp: npt.NDArray[np.int64],
    rows: int,
    at: int,
) -> None:
    """Bring the entries up to date after slot `at` (of `rows`) was deleted or its timestamp
    changed: its own and the SPAN after it (those further on are SPAN before their own slot
    whether the run they are in begins before `at` or after it)."""
    high = min(rows, at + SPAN + 1)
    before = int(runs.item(at - 1)) if at > 0 else None
    runs[at:high] = _between(live, session, timestamp, at, high, before, SPAN)
