"""Fair turns: at most so many holders at once, and those waiting served round-robin by key.

One tenant keeping 300 long recalls in flight made another tenant's 3-word recall wait behind
all of them (1.85 s at the median against 1.2 ms idle): every queue on the way (the dispatcher,
the query's model lane, the reader threads) served in arrival order. A key here is a tenant (or,
with tenancy off, an agent): dispatch gives each key a bounded number of requests executing at
once and a bounded queue (worker/dispatch.py), and the reader threads and the query lane take
their next piece of work from the key whose turn it is, so a key that has one request waiting
goes ahead of another key's hundredth.

Everything here runs on the event loop; `TURN` carries the key of the request being served
into the reader threads' and the model's queues.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import TypeVar

# The key whose work is being done: set by dispatch for a request's whole length (and inherited
# by the tasks it starts); background work (the backfill, the saver) has the empty key.
TURN: ContextVar[str] = ContextVar("turn", default="")

T = TypeVar("T")


class QueueFull(Exception):
    """A key already has its whole queue waiting; the message names the limit."""


class Turns:
    def __init__(
        self,
        capacity: int | None,
        *,
        per_key: int | None = None,
        queue: int | None = None,
        describe: Callable[[str], str] = lambda key: f"{key!r} has too many requests waiting",
    ) -> None:
        """`capacity`: holders at once in all (None: no bound); `per_key`: holders at once of
        one key; `queue`: how many of one key may wait beyond those (None: no bound), past
        which `acquire` raises QueueFull with `describe(key)`."""
        self.capacity = capacity
        self.per_key = per_key
        self.queue = queue
        self._describe = describe
        self._running: dict[str, int] = {}
        self._total = 0
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        # Keys with someone waiting, in the order of their next turn.
        self._order: deque[str] = deque()

    def running(self, key: str) -> int:
        return self._running.get(key, 0)

    def waiting(self, key: str) -> int:
        return len(self._waiting.get(key, ()))

    def _free(self, key: str) -> bool:
        return (self.capacity is None or self._total < self.capacity) and (
            self.per_key is None or self.running(key) < self.per_key
        )

    def _grant(self, key: str) -> None:
        self._running[key] = self.running(key) + 1
        self._total += 1

    async def acquire(self, key: str) -> None:
        """Return when it is key's turn (at once if it has one free and nobody of key waits)."""
        if self._free(key) and not self._waiting.get(key):
            self._grant(key)
            return
        queue = self._waiting.setdefault(key, deque())
        if self.queue is not None and len(queue) >= self.queue:
            if not queue:
                del self._waiting[key]
            raise QueueFull(self._describe(key))
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(turn)
        if len(queue) == 1:
            self._order.append(key)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.release(key)  # granted, and given up before it was used
            else:
                self._forget(key, turn)
            raise

    def _forget(self, key: str, turn: asyncio.Future[None]) -> None:
        queue = self._waiting.get(key)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(turn)
        if not queue:
            del self._waiting[key]
            with contextlib.suppress(ValueError):
                self._order.remove(key)

    def release(self, key: str) -> None:
        left = self.running(key) - 1
        if left:
            self._running[key] = left
        else:
            self._running.pop(key, None)
        self._total -= 1
        self._hand_on()

    def _hand_on(self) -> None:
        """Give free turns to waiting keys, one each in their order; a key served goes to the
        back of the line, a key at its own bound keeps its place."""
        passed = 0
        while self._order and passed < len(self._order):
            if self.capacity is not None and self._total >= self.capacity:
                return
            key = self._order[0]
            if self.per_key is not None and self.running(key) >= self.per_key:
                self._order.rotate(-1)
                passed += 1
                continue
            queue = self._waiting[key]
            turn = queue.popleft()
            self._order.popleft()
            if queue:
                self._order.append(key)
            else:
                del self._waiting[key]
            self._grant(key)
            turn.set_result(None)
            passed = 0

    @contextlib.asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        await self.acquire(key)
        try:
            yield
        finally:
            self.release(key)


def fair_order(keys: Sequence[str], after: str | None) -> Iterable[int]:
    """Positions of `keys` (one per waiting item, oldest first) in the order to serve them:
    one item per key in turn, starting with the first key after `after` in the rotation of
    keys by their oldest item; each key's items stay in their own order."""
    by_key: dict[str, deque[int]] = {}
    for position, key in enumerate(keys):
        by_key.setdefault(key, deque()).append(position)
    rotation = deque(by_key)
    if after in by_key:
        rotation.rotate(-(list(by_key).index(after) + 1))
    while rotation:
        key = rotation.popleft()
        items = by_key[key]
        yield items.popleft()
        if items:
            rotation.append(key)
