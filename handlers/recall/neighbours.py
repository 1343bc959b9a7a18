"""The expanded mode's neighbour stage (expand.py): each pooled memory's neighbours, the turns
said before and after it in its conversation, and the largest lead over it of those in the pool.

A window of slots around a memory that is one run (runs.py: live, one session, in time order)
has its neighbours next to it in slot order, found for the whole pool at once in slot order;
only the other windows are gathered and sorted by time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from handlers.recall.columns import Columns
from handlers.recall.runs import SPAN, runs_of

if TYPE_CHECKING:
    from handlers.recall.expand import Expansion

# Two memories without a session are neighbours only if stored this close in time: a chat's turns
# are seconds to minutes apart, while memories an agent saves on different days are not one topic.
SESSIONLESS_GAP_MS = 3_600_000


def neighbour_scores(
    columns: Columns,
    slots: npt.NDArray[np.int64],
    score: npt.NDArray[np.float64],
    expansion: Expansion,
    among: npt.NDArray[np.bool_] | None = None,
) -> npt.NDArray[np.float64]:
    """score + lift * the largest lead over it of a neighbour in the pool (none: score), for
    the pooled memories `among` (None: all; the others keep their score).

    Turns are counted in timestamp order among the memories stored within `reach` slots of it,
    not in slot order: stores sent concurrently may be committed a few places out of order.

    Each memory's window (its `reach` slots on either side, inside the agent) is sorted by
    (timestamp, slot), the memories of other conversations last; its neighbours are the
    entries up to `turns` places before and after its own, and only those are looked up in the
    pool. A window all of one conversation and already in time order (memories stored as they
    were said) is its own order. A memory deleted since it was pooled has no neighbours."""
    reach = expansion.reach
    by_slot = np.argsort(slots)
    sorted_slots = slots[by_slot]
    # Only a memory with another pooled memory within reach can have a pooled neighbour.
    close = sorted_slots[1:] - sorted_slots[:-1] <= reach
    in_order = np.zeros(len(slots), dtype=np.bool_)
    in_order[:-1] = close
    in_order[1:] |= close
    crowded = np.empty_like(in_order)
    crowded[by_slot] = in_order
    busy = np.flatnonzero(crowded if among is None else crowded & among)
    lifted = score.copy()
    if len(busy) == 0:
        return lifted
    rows = columns.rows
    width = min(2 * reach + 1, rows)  # moved inside the agent where it would pass an end
    runs = columns.runs
    if runs is None or width > SPAN + 1:  # the index's look back SPAN slots (runs.py)
        runs = runs_of(columns.live, columns.session, columns.timestamp, rows, span=width)
    centre = slots[busy]
    start = np.minimum(np.maximum(centre - reach, 0), rows - width)
    end = start + (width - 1)
    # A window all of the memory's conversation, every memory live and in time order (stored
    # as they were said: one run, runs.py) is in its own order: its neighbours are the slots
    # next to it. (A window moved inside the agent holds more than the memory's reach: if all
    # of it is, its reach is.) Only the others are sorted.
    plain = runs[end] <= start
    own_time = columns.timestamp[centre]
    plain &= (columns.session[centre] >= 0) | (
        (columns.timestamp[end] - own_time <= SESSIONLESS_GAP_MS)
        & (own_time - columns.timestamp[start] <= SESSIONLESS_GAP_MS)
    )
    turns = min(expansion.turns, width - 1)
    lead = np.zeros(len(slots), dtype=np.float64)
    if plain.any():
        lead[by_slot] = _next_leads(sorted_slots, score[by_slot], min(turns, reach))
    mixed = np.flatnonzero(~plain)
    if len(mixed):
        lead[busy[mixed]] = _window_leads(
            columns, (slots, by_slot, sorted_slots), score, busy[mixed], start[mixed], reach, turns
        )
    lifted[busy] += expansion.lift * lead[busy]
    return lifted


def _next_leads(
    sorted_slots: npt.NDArray[np.int64], sorted_score: npt.NDArray[np.float64], turns: int
) -> npt.NDArray[np.float64]:
    """Each pooled memory's largest lead over it (at least 0) of a pooled memory at most
    `turns` slots away, the pool in slot order: its neighbours, where its window is plain."""
    lead = np.zeros(len(sorted_slots), dtype=np.float64)
    for apart in range(1, min(turns, len(sorted_slots) - 1) + 1):
        # Slots are distinct, so a memory `turns` slots away is at most `turns` places away.
        near = sorted_slots[apart:] - sorted_slots[:-apart] <= turns
        later = np.where(near, sorted_score[apart:] - sorted_score[:-apart], 0.0)
        np.maximum(lead[:-apart], later, out=lead[:-apart])
        earlier = np.where(near, sorted_score[:-apart] - sorted_score[apart:], 0.0)
        np.maximum(lead[apart:], earlier, out=lead[apart:])
    return lead


def _window_leads(
    columns: Columns,
    pool: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]],
    score: npt.NDArray[np.float64],
    busy: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    reach: int,
    turns: int,
) -> npt.NDArray[np.float64]:
    """The largest lead over each `busy` memory (at least 0) of its neighbours in the pool
    (`pool`: slots, their order by slot, and the slots in that order), from its window of
    slots from `start` sorted by (timestamp, slot), the other conversations' memories last."""
    slots, by_slot, sorted_slots = pool
    rows = columns.rows
    width = min(2 * reach + 1, rows)
    own = slots[busy] - start
    timestamp = _window(columns.timestamp, rows, width, start)
    session = _window(columns.session, rows, width, start)
    live = _window(columns.live, rows, width, start)
    together = _together(session, timestamp, live, own, reach)
    key = np.where(together, timestamp, np.iinfo(np.int64).max)
    order = np.argsort(key, axis=1, kind="stable")
    at = np.argmax(order == own[:, None], axis=1)
    steps = np.arange(1, turns + 1)
    moved = at[:, None] + np.concatenate([-steps, steps])[None, :]
    inner = np.arange(len(busy))[:, None]
    cell = order[inner, np.clip(moved, 0, width - 1)]
    near = (moved >= 0) & (moved < width) & together[inner, cell]
    near &= together[inner[:, 0], own][:, None]  # deleted since: none
    other = start[:, None] + cell
    found = by_slot[np.clip(np.searchsorted(sorted_slots, other), 0, len(slots) - 1)]
    near &= slots[found] == other
    lead = np.where(near, score[found] - score[busy, None], 0.0).max(axis=1)
    found_lead: npt.NDArray[np.float64] = np.maximum(lead, 0.0)
    return found_lead


def _together(
    session: npt.NDArray[np.int32],
    timestamp: npt.NDArray[np.int64],
    live: npt.NDArray[np.bool_],
    own: npt.NDArray[np.int64],
    reach: int,
) -> npt.NDArray[np.bool_]:
    """Which slots of each window (one row each; the memory at `own`) are of its conversation:
    live, of its session, without one within SESSIONLESS_GAP_MS of it, and within `reach`."""
    line = np.arange(len(own))
    together: npt.NDArray[np.bool_] = live & (session == session[line, own][:, None])
    together &= np.abs(np.arange(session.shape[1]) - own[:, None]) <= reach
    sessionless = np.flatnonzero(session[line, own] < 0)
    if len(sessionless):
        gap = timestamp[sessionless] - timestamp[sessionless, own[sessionless]][:, None]
        together[sessionless] &= np.abs(gap, out=gap) <= SESSIONLESS_GAP_MS
    return together


def _window(
    column: npt.NDArray[Any], rows: int, width: int, start: npt.NDArray[np.int64]
) -> npt.NDArray[Any]:
    """The column's values over the `width` slots from each of `start` (one row each)."""
    view = np.lib.stride_tricks.as_strided(
        column, (rows - width + 1, width), (column.strides[0],) * 2, writeable=False
    )
    found: npt.NDArray[Any] = view[start]
    return found
