"""Recalls first (worker/recalls_first.py): a store waits for the recalls in progress, briefly."""

from __future__ import annotations

import asyncio
import time

from worker.recalls_first import STORE_WAIT_S, RecallsFirst


async def test_a_store_starts_when_the_recall_in_progress_is_done() -> None:
    """Entered during a recall, `after_recalls` returns when the recall ends, not before."""
    gate = RecallsFirst()
    done: list[str] = []

    async def store() -> None:
        await gate.after_recalls(most_s=5.0)
        done.append("store")

    with gate.recalling():
        waiting = asyncio.ensure_future(store())
        await asyncio.sleep(0.05)  # the behaviour: while the recall lasts, the store waits
        assert done == []
        done.append("recall")
    await asyncio.wait_for(waiting, 5.0)
    assert done == ["recall", "store"]


async def test_a_store_waits_at_most_the_bound_and_not_at_all_without_recalls() -> None:
    """Under a recall that does not end, a store goes on after STORE_WAIT_S; with no recall
    in progress it does not wait."""
    gate = RecallsFirst()
    started = time.monotonic()
    await gate.after_recalls()
    assert time.monotonic() - started < STORE_WAIT_S / 2
    with gate.recalling(), gate.recalling():
        started = time.monotonic()
        await gate.after_recalls()
        waited = time.monotonic() - started
    assert STORE_WAIT_S * 0.9 <= waited < STORE_WAIT_S + 1.0
    started = time.monotonic()
    await gate.after_recalls()  # both recalls ended: idle again
    assert time.monotonic() - started < STORE_WAIT_S / 2


async def test_the_writer_thread_waits_for_a_recall_in_progress_at_most_the_bound() -> None:
    """`wait_in_thread` (the writer's, before a batch) returns when the recall ends, or after
    STORE_WAIT_S when it does not."""
    gate = RecallsFirst()
    with gate.recalling():
        started = time.monotonic()
        await asyncio.to_thread(gate.wait_in_thread)
        assert time.monotonic() - started >= STORE_WAIT_S * 0.9
        waiting = asyncio.ensure_future(asyncio.to_thread(gate.wait_in_thread, 5.0))
        await asyncio.sleep(0.05)  # the behaviour: while the recall lasts, the thread waits
        assert not waiting.done()
    started = time.monotonic()
    await asyncio.wait_for(waiting, 5.0)
    assert time.monotonic() - started < 1.0


async def test_under_a_recall_that_never_ends_waits_add_up_to_at_most_the_budget_a_second() -> None:
    """A steady stream of recalls holds stores back for at most the gate's budget (250 ms) of
    each second in all: 100 stores entered in turn wait well under a second together, where
    each waiting STORE_WAIT_S made 2 s."""
    gate = RecallsFirst()
    with gate.recalling():
        started = time.monotonic()
        for _ in range(100):
            await gate.after_recalls()
        waited = time.monotonic() - started
    assert waited < 0.6, waited
