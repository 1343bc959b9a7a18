"""The expanded mode's neighbour stage (handlers/recall/expand.py `neighbour_scores`) gives each
pooled memory exactly what its definition says, bit for bit: a plain loop over each memory's
window, sorted by (timestamp, slot), is the reference, on random agents with sessions and
sessionless memories, timestamps out of slot order and tied, deleted rows around the pooled
ones, pools crowded and sparse, and windows cut by either end of the agent."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.recall.columns import Columns
from handlers.recall.expand import SESSIONLESS_GAP_MS, Expansion, neighbour_scores

HOUR = 3_600_000


def window_columns(session: list[int], timestamp: list[int], live: list[bool]) -> Columns:
    """Columns holding what the neighbour stage reads (the rest empty)."""
    rows = len(session)
    empty: Any = np.zeros(rows)
    return Columns(
        rows=rows, ids=[f"m{n}" for n in range(rows)], live=np.array(live, dtype=np.bool_),
        timestamp=np.array(timestamp, dtype=np.int64), importance=empty, confidence=empty,
        role=np.zeros(rows, dtype=np.int8), session=np.array(session, dtype=np.int32),
        session_codes={}, vectors={}, has_vector={}, postings=None,  # type: ignore[arg-type]
        static=empty, growth=empty, anchor_ms=0, pinned=np.zeros(rows, dtype=np.bool_), tags={},
        category=np.zeros(rows, dtype=np.int8), sensitivity=np.zeros(rows, dtype=np.int8),
        tag_slots={},
    )  # fmt: skip


def reference(
    columns: Columns, slots: list[int], score: list[float], expansion: Expansion
) -> list[float]:
    """The definition, one memory at a time: its window's memories of the same conversation
    (same session; without one, within SESSIONLESS_GAP_MS) in (timestamp, slot) order; its
    neighbours the `turns` entries before and after it; it takes `lift` of the largest lead
    over it of those that are in the pool."""
    pooled = {slot: at for at, slot in enumerate(slots)}
    lifted = []
    for slot, own in zip(slots, score, strict=True):
        reach = expansion.reach
        if not any(abs(other - slot) <= reach for other in slots if other != slot):
            lifted.append(own)
            continue
        session = int(columns.session[slot])
        time = int(columns.timestamp[slot])
        together = [
            cell
            for cell in range(slot - reach, slot + reach + 1)
            if 0 <= cell < columns.rows
            and bool(columns.live[cell])
            and int(columns.session[cell]) == session
            and (session >= 0 or abs(int(columns.timestamp[cell]) - time) <= SESSIONLESS_GAP_MS)
        ]
        line = sorted(together, key=lambda cell: (int(columns.timestamp[cell]), cell))
        at = line.index(slot)
        lead = 0.0
        for cell in line[max(0, at - expansion.turns) : at + expansion.turns + 1]:
            if cell != slot and cell in pooled:
                lead = max(lead, score[pooled[cell]] - own)
        lifted.append(own + expansion.lift * lead)
    return lifted


@settings(max_examples=300, deadline=None)
@given(
    rows=st.integers(1, 160),
    reach=st.sampled_from([1, 2, 3, 5, 8, 32]),
    turns=st.integers(1, 3),
    lift=st.sampled_from([0.5, 1.0, 0.3]),
    disorder=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    sessionless=st.sampled_from([0.0, 0.5, 1.0]),
    data=st.data(),
)
def test_each_pooled_memory_takes_the_lift_its_definition_gives(
    rows: int,
    reach: int,
    turns: int,
    lift: float,
    disorder: float,
    sessionless: float,
    data: st.DataObject,
) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    session = [-1 if rng.random() < sessionless else int(rng.integers(3)) for _ in range(rows)]
    # In slot order a minute apart, some out of order, some tied, some hours away.
    timestamp = [10**12 + n * 60_000 for n in range(rows)]
    for n in range(rows):
        if rng.random() < disorder:
            timestamp[n] = 10**12 + [0, 60_000, 2 * HOUR, int(rng.integers(rows))][rng.integers(4)]
    live = [bool(rng.random() < 0.9) for _ in range(rows)]
    columns = window_columns(session, timestamp, live)
    # A ranking pools live memories only (the deleted rows are among their neighbours).
    alive = [slot for slot in range(rows) if live[slot]]
    if not alive:
        return
    pool = data.draw(st.lists(st.sampled_from(alive), min_size=1, max_size=len(alive), unique=True))
    score = [float(rng.choice([0.1, 0.2, 0.25, rng.random()])) for _ in pool]
    expansion = Expansion(lift=lift, turns=turns, reach=reach)
    found = neighbour_scores(
        columns, np.array(pool, dtype=np.int64), np.array(score, dtype=np.float64), expansion
    )
    assert found.tolist() == reference(columns, pool, score, expansion)


def test_a_memory_two_turns_away_in_time_is_lifted_and_three_turns_away_is_not() -> None:
    """Slots 0-4 of one session, committed out of order: in time the hit (slot 0) is followed
    by slots 3, 4, then 1, 2; with two turns, slots 3 and 4 take the lift, 1 and 2 do not."""
    columns = window_columns([0] * 5, [0, 30, 40, 10, 20], [True] * 5)
    slots = np.arange(5, dtype=np.int64)
    score = np.array([1.0, 0.0, 0.0, 0.0, 0.0])
    found = neighbour_scores(columns, slots, score, Expansion())
    assert found.tolist() == [1.0, 0.0, 0.0, 0.5, 0.5]


def test_a_memory_at_the_agents_edge_takes_no_lift_from_a_slot_past_its_reach() -> None:
    """Slot 0's window, moved inside the agent, also holds slot 2; with reach 1 and 2 turns,
    slot 2 (scored higher) is still no neighbour of slot 0, so slot 0 keeps its score."""
    columns = window_columns([-1, -1, -1], [10**12, 10**12 + 60_000, 10**12 + 120_000], [True] * 3)
    pool, score = [0, 1, 2], [0.2, 0.1, 0.25]
    expansion = Expansion(lift=0.5, turns=2, reach=1)
    found = neighbour_scores(
        columns, np.array(pool, dtype=np.int64), np.array(score, dtype=np.float64), expansion
    )
    assert found.tolist() == reference(columns, pool, score, expansion)
    assert found[0] == 0.2
