"""Runs a synchronous local model off the event loop, batching concurrent requests.

Stores that arrive while the model is busy are embedded together in the next batches, so a slow
model costs throughput per batch, not per store. Queries have a lane of their own: their own
thread, which runs while a batch of stored texts is in flight rather than after it, so a recall
never waits behind stored texts (README "Recall quality and speed"). The threads that embed
stored texts run at a lower scheduling priority, so that on a small machine the query lane, the
event loop and the writer get the cores first and a burst of stores is embedded in what is left.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from worker.embedders import Vector

MAX_BATCH = 64
# Stored texts go to the model 8 at a time (no slower per text than larger batches here).
PASSAGE_BATCH = 8
# How much lower the stored texts' threads are scheduled (Linux nice, per thread).
PASSAGE_NICENESS = 10
# While a recall is in progress a stored text waits for it before its model call, at most this
# long: recalls come first, and stored texts still get on under a constant stream of them.
MAX_YIELD_S = 0.05

Waiting = list[tuple[str, "asyncio.Future[Vector | None]"]]


class LocalModel(Protocol):
    """`lanes`: how many calls the model may run at once (one of them a query's)."""

    name: str
    lanes: int

    def embed_queries(self, texts: list[str]) -> Vector: ...

    def embed_passages(self, texts: list[str]) -> Vector: ...


def _lower_priority() -> None:
    """Nice the calling thread (Linux schedules threads one by one; elsewhere, no-op)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PASSAGE_NICENESS)


class BatchingEmbedder:
    def __init__(self, model: LocalModel) -> None:
        self.model = model
        self.name = model.name
        passage_lanes = max(1, model.lanes - 1)
        # A model that runs one call at a time has one lane for both, queries first.
        self._shared = model.lanes < 2
        self._pools = {
            True: concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="embedder-query"),
            False: concurrent.futures.ThreadPoolExecutor(
                passage_lanes,
                thread_name_prefix="embedder-passage",
                initializer=None if self._shared else _lower_priority,
            ),
        }
        self._lane_count = {True: 1, False: passage_lanes}
        self._waiting: dict[bool, Waiting] = {True: [], False: []}
        self._wake: dict[bool, asyncio.Event] = {}
        self._lanes: list[asyncio.Task[None]] = []
        self._running = 0
        self._recalls = 0
        self._no_recall = threading.Event()
        self._no_recall.set()

    @contextlib.contextmanager
    def recalling(self) -> Iterator[None]:
        """Around a whole recall (on the event loop): the stored texts' lanes hold back between
        texts until it is done, so that its query, its ranking and the event loop have the
        cores, not only its model call (niceness alone left a recall 3.5-5.5x slower while
        64 stores were in flight)."""
        self._recalls += 1
        self._no_recall.clear()
        try:
            yield
        finally:
            self._recalls -= 1
            if self._recalls == 0:
                self._no_recall.set()

    def _passages_after_recalls(self, texts: list[str]) -> Vector:
        """On a stored texts' lane: one model call per text, each after the recalls in
        progress (or MAX_YIELD_S)."""
        rows = []
        for text in texts:
            if not self._shared:  # on a single lane the recall's own query waits behind us
                self._no_recall.wait(MAX_YIELD_S)
            rows.append(self.model.embed_passages([text]))
        return np.concatenate(rows)

    async def embed(self, texts: list[str], *, query: bool) -> list[Vector | None]:
        loop = asyncio.get_running_loop()
        if not self._lanes:
            self._start_lanes(loop)
        futures: list[asyncio.Future[Vector | None]] = []
        for text in texts:
            future: asyncio.Future[Vector | None] = loop.create_future()
            self._waiting[query].append((text, future))
            futures.append(future)
        self._wake[query and not self._shared].set()
        try:
            return list(await asyncio.gather(*futures))
        except asyncio.CancelledError:
            # The caller is gone (its request timed out, the worker stops): its texts leave the
            # queue, so that the model does not spend time on them nor count them as backlog.
            mine = set(futures)
            self._waiting[query] = [item for item in self._waiting[query] if item[1] not in mine]
            raise

    def _start_lanes(self, loop: asyncio.AbstractEventLoop) -> None:
        self._wake = {True: asyncio.Event(), False: asyncio.Event()}
        if not self._shared:
            self._lanes.append(loop.create_task(self._lane(True)))
        for _ in range(self._lane_count[False]):
            self._lanes.append(loop.create_task(self._lane(False)))

    def _pending(self, lane: bool) -> bool:
        return bool(self._waiting[lane] or (self._shared and self._waiting[True]))

    def _next_batch(self, lane: bool) -> tuple[bool, Waiting]:
        """The lane's next texts: a query lane takes queries; a passage lane takes stored
        texts, or queries too when the model has a single lane."""
        query = lane or (self._shared and bool(self._waiting[True]))
        size = MAX_BATCH if query else PASSAGE_BATCH
        waiting = self._waiting[query]
        self._waiting[query] = waiting[size:]
        return query, waiting[:size]

    async def _lane(self, lane: bool) -> None:
        wake = self._wake[lane]
        loop = asyncio.get_running_loop()
        while True:
            await wake.wait()
            wake.clear()
            while self._pending(lane):
                query, part = self._next_batch(lane)
                if self._pending(lane):  # for another lane of the same kind, if one is idle
                    wake.set()
                embed = self.model.embed_queries if query else self._passages_after_recalls
                self._running += len(part)
                try:
                    texts = [text for text, _ in part]
                    matrix = await loop.run_in_executor(self._pools[lane], embed, texts)
                    for (_, future), row in zip(part, matrix, strict=True):
                        if not future.done():
                            future.set_result(row)
                except Exception:
                    for _, future in part:
                        if not future.done():
                            future.set_result(None)
                finally:
                    self._running -= len(part)

    def backlog(self) -> int:
        return len(self._waiting[True]) + len(self._waiting[False]) + self._running

    async def close(self) -> None:
        for lane in self._lanes:
            lane.cancel()
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
