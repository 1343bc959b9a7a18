"""Recalls' access counts, gathered for a moment and written together.

A recall replies with the counts the recall index holds and persists them after. One write per
recall cost about 0.4 ms of worker CPU at 20 000 memories (a writer job, the hand-off to its
thread, a commit) beside 1 ms for everything else, on the sequential path users time. Gathered
for GATHER_SECONDS, a burst of recalls costs one write per agent, and what it leaves is what one
write per recall would have left: each memory's count grows by its accesses and its last access
is the latest of them. A crash loses at most that moment's increments; they were never durable
(non-durable bookkeeping, docs/choices.md), and the reply already gave them.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog

log = structlog.get_logger()

# How long the first access of a burst waits for others before they are written together.
GATHER_SECONDS = 0.05


class Accessed(msgspec.Struct, frozen=True):
    """One agent's memories accessed by recalls, as one write's decision: each id once per
    recall at `at` (a single recall's), or, with `counts` and `times`, each id `counts[i]` times
    and last at `times[i]` (gathered recalls). Logged by shards; the older shape still decodes."""

    tenant: str
    agent_id: str
    ids: list[str]
    at: int
    counts: list[int] | None = None
    times: list[int] | None = None

    def each(self) -> list[tuple[str, int, int]]:
        """(id, accesses, latest access) per memory."""
        if self.counts is None or self.times is None:
            return [(memory_id, 1, self.at) for memory_id in self.ids]
        return list(zip(self.ids, self.counts, self.times, strict=True))


Write = Callable[[Accessed], Awaitable[Any]]


class AccessCounts:
    """The accesses not yet written, per agent, and the one task that will write them."""

    def __init__(self, gather: float = GATHER_SECONDS) -> None:
        self.gather = gather  # seconds the first access of a burst waits for the others
        self._pending: dict[tuple[str, str], dict[str, list[int]]] = {}
        self._flush: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None

    def add(self, accessed: Accessed, write: Write, background: set[asyncio.Task[Any]]) -> None:
        """Hold these accesses; the first of a burst starts the task that writes them (kept in
        `background`, which a stop waits for)."""
        held = self._pending.setdefault((accessed.tenant, accessed.agent_id), {})
        for memory_id, count, at in accessed.each():
            seen = held.get(memory_id)
            if seen is None:
                held[memory_id] = [count, at]
            else:
                seen[0] += count
                seen[1] = max(seen[1], at)
        if self._flush is None:
            loop = asyncio.get_running_loop()
            self._wake = loop.create_future()
            # A context of its own: the write gathers many calls' accesses and is none of them
            # (not the first recall's call, nor its log keys).
            written = self._written(write, self._wake)
            self._flush = task = loop.create_task(written, context=contextvars.Context())
            background.add(task)
            task.add_done_callback(background.discard)

    def hurry(self) -> None:
        """Write what is held now, not after the gathering moment (a stop)."""
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _written(self, write: Write, wake: asyncio.Future[None]) -> None:
        await asyncio.wait([wake], timeout=self.gather)
        pending, self._pending, self._flush, self._wake = self._pending, {}, None, None
        results = await asyncio.gather(
            *(write(_decision(key, held)) for key, held in pending.items()),
            return_exceptions=True,
        )
        for error in results:
            if isinstance(error, BaseException):
                log.warning("recall.access_counts_lost", error=type(error).__name__)


def _decision(key: tuple[str, str], held: dict[str, list[int]]) -> Accessed:
    ids = list(held)
    times = [held[memory_id][1] for memory_id in ids]
    counts = [held[memory_id][0] for memory_id in ids]
    return Accessed(key[0], key[1], ids, max(times), counts, times)
