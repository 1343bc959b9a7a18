"""Recalls first: while a recall is in progress, a store waits a moment before it starts, the
writer before its next batch, and a stored text's model lane before its next text; for at most
a budget of each second in all.

An agent waits on its recall; a store is acknowledged either way. With 64 stores in flight the
event loop, the writer and the GIL are busy with them, and a recall took 2-3x its idle time
even with the model's stored texts held back (worker/embedders/local.py). A store that arrives
during a recall now starts when the recalls in progress are done, or after STORE_WAIT_S; the
writer thread starts its next batch on the same terms (`wait_in_thread`), and so does each
stored text's lane (MAX_YIELD_S there).

The gate is the worker's, over every tenant; under a steady stream of recalls (one tenant's
flood) it would hold all of that back all the time: every store and writer batch 20 ms later,
each model lane at one stored text per 50 ms, a vector backfill falling behind without bound.
So the time during which anything is held back is counted, per second of the clock: past
`budget_ms` of a second (MEMORY_WORKER_RECALLS_FIRST_MS) nothing waits until the next second.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator

# The longest a store waits for recalls: under a constant stream of recalls stores still go on.
STORE_WAIT_S = 0.02
DEFAULT_BUDGET_MS = 250


class RecallsFirst:
    def __init__(
        self, budget_ms: float = DEFAULT_BUDGET_MS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.budget_s = budget_ms / 1000
        self._clock = clock
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._idle_for_threads = threading.Event()
        self._idle_for_threads.set()
        # The hold account (the event loop and threads wait alike): the second it is for, the
        # time held back in it by holds that ended, and the hold going on (since, how many).
        self._lock = threading.Lock()
        self._second = -1
        self._held = 0.0
        self._since = 0.0
        self._holding = 0

    @contextlib.contextmanager
    def recalling(self) -> Iterator[None]:
        """Around a whole recall, on the event loop."""
        self._running += 1
        self._idle.clear()
        self._idle_for_threads.clear()
        try:
            yield
        finally:
            self._running -= 1
            if self._running == 0:
                self._idle.set()
                self._idle_for_threads.set()

    def spent(self) -> bool:
        """Whether recalls are in progress and this second's budget is spent: what was held
        back may now go at full speed (and priority: worker/embedders/local.py)."""
        return not self._idle_for_threads.is_set() and self.held_this_second() >= self.budget_s

    def held_this_second(self) -> float:
        """Seconds of this second of the clock during which something was held back."""
        with self._lock:
            return self._held_at(self._clock())

    def _held_at(self, now: float) -> float:
        second = math.floor(now)
        if second != self._second:
            self._second, self._held = second, 0.0
            self._since = max(self._since, float(second))  # the part before went to its second
        return self._held + (now - self._since if self._holding else 0.0)

    def _begin(self, most_s: float) -> float:
        """How long the caller may wait (0: go ahead), counted as held from now on."""
        with self._lock:
            now = self._clock()
            left = self.budget_s - self._held_at(now)
            if left <= 0:
                return 0.0
            if self._holding == 0:
                self._since = now
            self._holding += 1
            return min(most_s, left)

    def _end(self) -> None:
        with self._lock:
            now = self._clock()
            self._held_at(now)
            self._holding -= 1
            if self._holding == 0:
                self._held += now - self._since

    async def after_recalls(self, most_s: float = STORE_WAIT_S) -> None:
        """Return once no recall is in progress, after `most_s`, or when the second's budget
        is spent."""
        if self._idle.is_set():
            return
        allowed = self._begin(most_s)
        if allowed <= 0:
            return
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), allowed)
        finally:
            self._end()

    def wait_in_thread(self, most_s: float = STORE_WAIT_S) -> None:
        """`after_recalls` for a thread (the writer's before a batch, a model lane's)."""
        if self._idle_for_threads.is_set():
            return
        allowed = self._begin(most_s)
        if allowed <= 0:
            return
        try:
            self._idle_for_threads.wait(allowed)
        finally:
            self._end()
