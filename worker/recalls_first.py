"""Recalls first: while a recall is in progress, a store waits a moment before it starts, and
the writer before its next batch.

An agent waits on its recall; a store is acknowledged either way. With 64 stores in flight the
event loop, the writer and the GIL are busy with them, and a recall took 2-3x its idle time
even with the model's stored texts held back (worker/embedders/local.py). A store that arrives
during a recall now starts when the recalls in progress are done, or after STORE_WAIT_S; the
writer thread starts its next batch on the same terms (`wait_in_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

# The longest a store waits for recalls: under a constant stream of recalls stores still go on.
STORE_WAIT_S = 0.02


class RecallsFirst:
    def __init__(self) -> None:
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._idle_for_threads = threading.Event()
        self._idle_for_threads.set()

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

    async def after_recalls(self, most_s: float = STORE_WAIT_S) -> None:
        """Return once no recall is in progress, or after `most_s`."""
        if self._idle.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), most_s)

    def wait_in_thread(self, most_s: float = STORE_WAIT_S) -> None:
        """`after_recalls` for a thread (the writer's, before a batch)."""
        self._idle_for_threads.wait(most_s)
