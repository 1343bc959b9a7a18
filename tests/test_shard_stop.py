"""A shard stops even when one of its background loops loses the cancellation stop sends it.

nats-py can swallow a cancellation: its JetStream publish turns one into
TooManyStalledMsgsError, and Python 3.11's wait_for returns a reply that arrived together with
it. A balance or snapshot round doing so went back to sleep, and ShardApp.stop waited for the
loop forever (seen as whole test runs hanging under load). The stand-ins below lose it so."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from nats.js.errors import TooManyStalledMsgsError

from tests.support import wait_until
from tests.test_shards import TTL, shard_config
from worker.shards.app import ShardApp
from worker.shards.snapshot import snapshot_forever


def losing_the_cancellation_once(real: Any, in_round: asyncio.Event) -> Any:
    """A stand-in for a bus call: the first call waits for a reply until cancelled, and raises
    what nats-py's publish raises instead of the cancellation; later calls are the real one."""
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


async def ended(task: asyncio.Task[Any], timeout: float) -> bool:
    """Whether the task ended within timeout; if not, it is cancelled again (a second
    cancellation reaches the loop's sleep) so that the test itself ends."""
    done, _ = await asyncio.wait([task], timeout=timeout)
    if not done:
        while not task.done():
            task.cancel()
            await asyncio.sleep(0.05)
    return bool(done)


async def test_a_shard_stops_when_a_balance_round_loses_the_cancellation(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop() returns while the balance round it cancels turns the cancellation into an error."""
    app = ShardApp(shard_config(nats_url, tmp_path, "s1"))
    await app.start()
    assert app.leases is not None
    in_round = asyncio.Event()
    monkeypatch.setattr(app.leases, "beat", losing_the_cancellation_once(app.leases.beat, in_round))
    await wait_until(in_round.is_set, "a balance round beating", timeout=10 * TTL)
    stopping = asyncio.create_task(app.stop())
    done, _ = await asyncio.wait([stopping], timeout=20)
    if not done:  # the balancer ran on: end it, so that stop can finish
        assert app._balancer is not None
        await ended(app._balancer, 0)
        await stopping
    assert done, "stop() still waiting for the balance loop after 20 s"


async def test_the_snapshot_loop_ends_when_a_round_loses_the_cancellation() -> None:
    """snapshot_forever ends once cancelled, though the snapshot it was taking raised an error
    in place of the cancellation."""
    in_round = asyncio.Event()

    async def take(node: Any) -> None:
        return None

    snapshots: Any = SimpleNamespace(take=losing_the_cancellation_once(take, in_round))
    owned: Any = lambda: [SimpleNamespace(partition=0)]  # noqa: E731
    loop = asyncio.create_task(snapshot_forever(snapshots, owned, 0.01))
    await asyncio.wait_for(in_round.wait(), 10)
    loop.cancel()
    assert await ended(loop, 10), "the snapshot loop ran on after its cancellation"
    assert loop.cancelled() or loop.exception() is None
