"""Where each slot's run of memories stored as they were said begins: slots all live, of one
session (or all without one) and in time order, one after another. The expanded mode's
neighbour stage (expand.py) takes a window of slots that is one such run in its own order,
without gathering the window to look: the window [start, end] is one run exactly when
`runs[end] <= start`.

`runs_of` finds them over an agent's columns; the recall index keeps them in step with its
writes (`relink` after a slot is deleted or its timestamp changes, `run_at` for a new slot:
worker/recall_index/agent_index.py), and the stage finds them itself where the columns come
without them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# slot -> the first slot of its run (a live slot), or the slot after it (a deleted one: no
# window holding it is a run). Never decreasing along the slots.
Runs = npt.NDArray[np.int32]


def runs_of(
    live: npt.NDArray[np.bool_],
    session: npt.NDArray[np.int32],
    timestamp: npt.NDArray[np.int64],
    rows: int,
    size: int | None = None,
) -> Runs:
    """The runs of the first `rows` slots (in an array of `size`, the rest 0)."""
    found = np.zeros(max(rows, size or 0), dtype=np.int32)
    if rows == 0:
        return found
    live, session, timestamp = live[:rows], session[:rows], timestamp[:rows]
    linked = live[1:] & live[:-1]
    linked &= session[1:] == session[:-1]
    linked &= timestamp[1:] >= timestamp[:-1]
    begins = np.arange(rows, dtype=np.int32)
    begins[1:][linked] = 0
    runs = found[:rows]
    np.maximum.accumulate(begins, out=runs)
    dead = np.flatnonzero(~live)
    runs[dead] = dead + 1
    return found


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
    return int(runs.item(at - 1)) if _linked(live, session, timestamp, at) else at


def relink(
    runs: Runs,
    live: npt.NDArray[np.bool_],
    session: npt.NDArray[np.int32],
    timestamp: npt.NDArray[np.int64],
    rows: int,
    at: int,
) -> None:
    """Bring the entries up to date after slot `at` (of `rows`) was deleted or its timestamp
    changed: its own, and those of the run that follows it, which may join or leave its run
    (one slice written; the entries of that run are equal and the later ones greater)."""
    runs[at] = value = run_at(runs, live, session, timestamp, at)
    after = at + 1
    if after >= rows or not live.item(after):
        return
    joined = value if _linked(live, session, timestamp, after) else after
    held = int(runs.item(after))
    if held != joined:
        end = after + int(np.searchsorted(runs[after:rows], held, side="right"))
        runs[after:end] = joined
