"""The recall index keeps each slot's run (handlers/recall/runs.py: where the slots live, of one
session and in time order up to it begin, looking back SPAN slots at most) in step with its
writes: after appends, rescores that move a memory in time, deletions and a memory stored
again, the runs it holds are those found afresh from its columns, whatever the SPAN; and a
window of at most SPAN + 1 slots is one run exactly when every slot of it is live, of one
session and in time order."""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.recall import runs as runs_module
from handlers.recall.runs import runs_of
from tests.test_topk import NOW, WEEK, memories
from worker.recall_index.agent_index import AgentIndex, Row


def conversations(seed: int, count: int, sessions: int, disorder: float) -> list[Row]:
    """Rows in long runs: a session (or none) kept for several rows, time mostly in order."""
    rng = np.random.default_rng(seed)
    rows = []
    session: str | None = None
    for n, row in enumerate(memories(seed, count)):
        if rng.random() < 0.15:
            pick = int(rng.integers(sessions + 1))
            session = None if pick == sessions else f"s{pick}"
        timestamp = NOW - (count - n) * 60_000
        if rng.random() < disorder:
            timestamp -= int(rng.integers(0, 10)) * 60_000
        rows.append((*row[:2], session, timestamp, *row[4:]))
    return rows


def assert_kept(index: AgentIndex) -> None:
    rows = len(index.ids)
    fresh = runs_of(index.live, index.session, index.timestamp, rows)
    assert index.runs[:rows].tolist() == fresh[:rows].tolist()
    assert index.columns().runs is index.runs


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    count=st.integers(1, 120),
    sessions=st.integers(0, 3),
    disorder=st.sampled_from([0.0, 0.05, 0.3]),
    loaded=st.floats(0.0, 1.0),
    span=st.sampled_from([1, 3, 8, runs_module.SPAN]),
)
def test_the_runs_kept_through_appends_rescores_and_deletions_are_the_runs_found_afresh(
    seed: int, count: int, sessions: int, disorder: float, loaded: float, span: int
) -> None:
    with mock.patch.object(runs_module, "SPAN", span):
        kept_through_writes(seed, count, sessions, disorder, loaded)


def kept_through_writes(
    seed: int, count: int, sessions: int, disorder: float, loaded: float
) -> None:
    rows = conversations(seed, count, sessions, disorder)
    index = AgentIndex(anchor_ms=NOW - 3 * WEEK, capacity=4)
    first = int(loaded * count)
    index.load(rows[:first])
    assert_kept(index)
    for row in rows[first:]:  # one by one, growing the columns
        index.upsert(row)
        assert_kept(index)
    rng = np.random.default_rng(seed)
    for _ in range(count // 4 + 1):
        row = rows[int(rng.integers(count))]
        action = int(rng.integers(4))
        if action == 0:  # moved in time: joins or leaves its neighbours' runs
            index.upsert((*row[:3], row[3] + int(rng.integers(-5, 6)) * 60_000, *row[4:]))
        elif action == 1:  # rescored at the same time
            index.upsert((*row[:4], float(rng.random()), *row[5:]))
        elif action == 2:
            index.remove(row[0])
        else:  # deleted, then stored again in a new slot
            index.remove(row[0])
            index.upsert(row)
        assert_kept(index)


@settings(max_examples=200, deadline=None)
@given(
    session=st.lists(st.sampled_from([-1, 0, 1]), min_size=1, max_size=40),
    span=st.sampled_from([1, 2, 5, 100]),
    data=st.data(),
)
def test_a_window_is_one_run_exactly_when_it_is_live_of_one_session_and_in_time_order(
    session: list[int], span: int, data: st.DataObject
) -> None:
    rows = len(session)
    timestamp = data.draw(st.lists(st.integers(0, 4), min_size=rows, max_size=rows))
    live = [True] * rows
    for dead in data.draw(st.lists(st.integers(0, rows - 1), max_size=3)):
        live[dead] = False
    runs = runs_of(
        np.array(live),
        np.array(session, np.int32),
        np.array(timestamp, np.int64),
        rows,
        rows + 5,
        span=span,
    )
    assert len(runs) == rows + 5
    for start in range(rows):
        for end in range(start, min(rows, start + span + 1)):
            ordered = all(timestamp[at] <= timestamp[at + 1] for at in range(start, end))
            one = all(live[start : end + 1]) and len(set(session[start : end + 1])) == 1
            assert (int(runs[end]) <= start) == (one and ordered), (start, end)
