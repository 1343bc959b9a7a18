"""The benchmark's client side: timed requests, bounded concurrency, percentiles.

Requests are raw JSON (the bench measures the worker, not the typed client's decoding) sent to
the subjects the trigger table names (worker/registry.py), by trigger."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from worker.outgoing import error_reply
from worker.registry import BY_TRIGGER


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    values = np.asarray(samples_ms, dtype=np.float64)
    if len(values) == 0:
        return {"p50_ms": 0.0, "p99_ms": 0.0}
    return {
        "p50_ms": round(float(np.percentile(values, 50)), 3),
        "p99_ms": round(float(np.percentile(values, 99)), 3),
    }


class BenchClient:
    def __init__(
        self,
        nc: Any,
        prefix: str = "",
        timeout: float = 60.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        """`headers` go on every request (the bench's stand-in for `Nats-Request-Info`)."""
        self.nc = nc
        self.timeout = timeout
        self.headers = headers
        self.subjects = {trigger: route.subject(prefix) for trigger, route in BY_TRIGGER.items()}

    async def timed(self, trigger: str, payload: Any) -> tuple[float, Any]:
        """A trigger's request (`memory::recall`): milliseconds, and its reply decoded."""
        return await self.timed_at(self.subjects[trigger], payload)

    async def timed_at(self, subject: str, payload: Any) -> tuple[float, Any]:
        """The same on any subject (the echo floor's)."""
        data = msgspec.json.encode(payload)
        started = time.perf_counter()
        msg = await self.nc.request(subject, data, timeout=self.timeout, headers=self.headers)
        elapsed = (time.perf_counter() - started) * 1000
        if error_reply(msg) is not None:
            raise RuntimeError(f"{subject}: {msg.data.decode()}")
        return elapsed, msgspec.json.decode(msg.data) if msg.data else None

    async def many(
        self, trigger: str, payloads: Sequence[Any], *, concurrency: int
    ) -> tuple[list[Any], list[float], float]:
        """Send every payload with at most `concurrency` in flight; replies in payload order,
        latencies, and wall seconds."""
        replies: list[Any] = [None] * len(payloads)
        latencies: list[float] = [0.0] * len(payloads)
        cursor = iter(range(len(payloads)))

        async def lane() -> None:
            for index in cursor:
                latencies[index], replies[index] = await self.timed(trigger, payloads[index])

        started = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(max(1, concurrency))))
        return replies, latencies, time.perf_counter() - started

    async def sent(
        self, trigger: str, payloads: Sequence[Any], *, concurrency: int
    ) -> tuple[list[float], float]:
        """`many` at the least cost to the client, which shares the machine's cores with the
        worker it measures: every body encoded before the clock starts, each request published
        to one reply subscription of its own with a future to wait on (nats-py's `request`
        makes a random token and a timer per request), and the replies only checked for an
        error, not decoded. Latencies in payload order, and wall seconds; TimeoutError when no
        reply came for `timeout` seconds."""
        nc, subject, headers = self.nc, self.subjects[trigger], self.headers
        bodies = [msgspec.json.encode(payload) for payload in payloads]
        latencies: list[float] = [0.0] * len(bodies)
        loop, clock = asyncio.get_running_loop(), time.perf_counter
        inbox = f"{nc.new_inbox()}."
        waiting: dict[str, asyncio.Future[Any]] = {}
        progress = [clock()]

        async def answered(msg: Any) -> None:
            future = waiting.pop(msg.subject, None)
            if future is not None and not future.done():
                future.set_result(msg)

        replies = await nc.subscribe(f"{inbox}*", cb=answered)
        await nc.flush()
        cursor = iter(range(len(bodies)))

        async def lane() -> None:
            for index in cursor:
                reply = f"{inbox}{index}"
                future = waiting[reply] = loop.create_future()
                started = clock()
                await nc.publish(subject, bodies[index], reply=reply, headers=headers)
                msg = await future
                progress[0] = latencies[index] = clock()
                latencies[index] = (latencies[index] - started) * 1000
                if msg.headers and (error_reply(msg) or msg.headers.get("Status")):
                    raise RuntimeError(f"{subject}: {msg.headers} {msg.data.decode()}")

        async def stalled() -> None:
            while clock() - progress[0] < self.timeout:
                await asyncio.sleep(1.0)
            raise TimeoutError(f"{subject}: no reply for {self.timeout} s")

        started = clock()
        lanes: asyncio.Future[Any] = asyncio.gather(*(lane() for _ in range(max(1, concurrency))))
        watch: asyncio.Future[Any] = asyncio.ensure_future(stalled())
        try:
            await asyncio.wait([lanes, watch], return_when=asyncio.FIRST_COMPLETED)
            if watch.done():
                lanes.cancel()
                watch.result()
            await lanes
        finally:
            watch.cancel()
            await replies.unsubscribe()
        return latencies, clock() - started

    async def wait_for_vectors(self, *, stall_s: float = 15.0) -> int:
        """Until the worker's backfill has given every memory a vector (or made no progress for
        `stall_s`); returns how many are still without one."""
        last, since = -1, time.monotonic()
        while True:
            _, stats = await self.timed("memory::stats", {})
            missing = int(stats["memoriesWithoutVector"])
            if missing == 0:
                return 0
            if missing != last:
                last, since = missing, time.monotonic()
            elif time.monotonic() - since > stall_s:
                return missing
            await asyncio.sleep(0.05)

    async def recall_many(self, payloads: Sequence[Any], *, concurrency: int) -> list[Any]:
        return (await self.many("memory::recall", payloads, concurrency=concurrency))[0]
