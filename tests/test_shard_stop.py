"""A shard's stop ends its background tasks even when a cancellation is lost on its way."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import TooManyStalledMsgsError

from tests.support import wait_until
from tests.test_shards import TTL, shard_config
from worker.shards.app import ShardApp, cancelled


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


def losing_the_cancellation_once(real: Any, in_round: asyncio.Event) -> Any:
    """A stand-in for a bus call: the first call waits for a reply until cancelled, and raises
    what nats-py's JetStream publish raises instead of the cancellation (TooManyStalledMsgsError);
    later calls are the real one."""
    calls = 0

    async def call(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > 1:
            return await real(*args)
        in_round.set()
        try:
            await asyncio.Event().wait()  # the reply, on its way
        except asyncio.CancelledError:
            raise TooManyStalledMsgsError from None

    return call


async def test_a_shard_stops_when_a_balance_round_loses_the_cancellation(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop() returns while the balance round it cancels turns the cancellation into an error
    (two parallel suite runs hung so in test_payload_shards and test_replay)."""
    app = ShardApp(shard_config(nats_url, tmp_path, "s1"))
    await app.start()
    assert app.leases is not None
    in_round = asyncio.Event()
    monkeypatch.setattr(app.leases, "beat", losing_the_cancellation_once(app.leases.beat, in_round))
    await wait_until(in_round.is_set, "a balance round beating", timeout=10 * TTL)
    stopping = asyncio.create_task(app.stop())
    done, _ = await asyncio.wait([stopping], timeout=20)
    if not done:  # the balancer ran on: end it, so that stop can finish and the test ends
        assert app._balancer is not None
        while not app._balancer.done():
            app._balancer.cancel()
            await asyncio.sleep(0.05)
        await stopping
    assert done, "stop() still waiting for the balance loop after 20 s"
