"""A shard's stop ends its background tasks even when a cancellation is lost on its way."""

from __future__ import annotations

import asyncio

from worker.shards.app import cancelled


async def test_a_task_that_swallows_its_first_cancellation_is_still_ended() -> None:
    """As nats-py does in a flush (`except asyncio.CancelledError: pass`): the first cancel is
    swallowed and the loop goes on; `cancelled` cancels again until the task ends, where a
    single cancel and await waited forever (the hang seen in tests/test_shards.py)."""
    rounds = 0

    async def balancer() -> None:
        nonlocal rounds
        while True:
            rounds += 1
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                if rounds == 1:
                    continue  # lost, once
                raise

    task = asyncio.create_task(balancer())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancelled(task), timeout=5)
    assert task.cancelled() and rounds >= 2
