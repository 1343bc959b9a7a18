"""Runs a synchronous local model off the event loop, batching concurrent requests.

Stores that arrive while the model is busy are embedded together in the next batches, so a slow
model costs throughput per batch, not per store. Queries have a lane of their own: their own
thread, which runs while a batch of stored texts is in flight rather than after it, so a recall
never waits behind stored texts (README "Recall quality and speed"). The threads that embed
stored texts run at a lower scheduling priority, so that on a small machine the query lane, the
event loop and the writer get the cores first and a burst of stores is embedded in what is left.

Each lane takes its next texts one per tenant in turn (worker/turns.py), and a batch of queries
holds about one full-length query's text at most: a tenant's 3-word query waits for the batch
in progress, not behind another tenant's queue of 16 KiB ones (about 60 ms of model each).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from worker.affinity import every_cpu
from worker.embedders import Vector
from worker.recalls_first import RecallsFirst
from worker.turns import TURN, fair_order

MAX_BATCH = 64
# Stored texts go to the model 8 at a time (no slower per text than larger batches here).
PASSAGE_BATCH = 8
# How much lower the stored texts' threads are scheduled (Linux nice, per thread).
PASSAGE_NICENESS = 10
# While a recall is in progress a stored text waits for it before its model call, at most this
# long: recalls come first, and stored texts still get on under a constant stream of them.
MAX_YIELD_S = 0.05
# A batch of queries stops at this much text (a text counts at most this much: the model reads
# its first 256 tokens, about 1 000-1 500 characters), so that short queries are still batched.
QUERY_BATCH_CHARS = 2048
# Query lanes when the model runs calls side by side (one tenant's queries use one at a time).
QUERY_LANES = 2

# (text, its future, the key of the request it is for)
Waiting = list[tuple[str, "asyncio.Future[Vector | None]", str]]


class LocalModel(Protocol):
    """`lanes`: how many calls the model may run at once (one of them a query's)."""

    name: str
    lanes: int

    def embed_queries(self, texts: list[str]) -> Vector: ...

    def embed_passages(self, texts: list[str]) -> Vector: ...


def _lower_priority() -> None:
    """Nice the calling thread PASSAGE_NICENESS below its own (Linux schedules threads one by
    one; elsewhere, no-op). Below its own, not to an absolute level: a worker started under
    `nice -n 15` gave its stored texts 10, above its queries (root may raise a priority)."""
    every_cpu()
    with contextlib.suppress(AttributeError, OSError):
        thread = threading.get_native_id()
        niceness = os.getpriority(os.PRIO_PROCESS, thread) + PASSAGE_NICENESS
        os.setpriority(os.PRIO_PROCESS, thread, min(niceness, 19))


class BatchingEmbedder:
    def __init__(self, model: LocalModel, gate: RecallsFirst | None = None) -> None:
        """`gate`: the worker's recalls-first gate, whose budget the stored texts' lanes share
        with the stores and the writer (worker/recalls_first.py); by default one of its own."""
        self.model = model
        self.name = model.name
        passage_lanes = max(1, model.lanes - 1)
        # A model that runs one call at a time has one lane for both, queries first.
        self._shared = model.lanes < 2
        # Two query lanes, a tenant's queries on one at a time: one tenant's long queries
        # leave the other lane to the rest (a key in progress on one is passed over by the other).
        self._query_lanes = 1 if self._shared else QUERY_LANES
        self._pools = {
            True: concurrent.futures.ThreadPoolExecutor(
                self._query_lanes, thread_name_prefix="embedder-query", initializer=every_cpu
            ),
            False: concurrent.futures.ThreadPoolExecutor(
                passage_lanes,
                thread_name_prefix="embedder-passage",
                initializer=every_cpu if self._shared else _lower_priority,
            ),
        }
        # Stored texts whose second's recalls-first budget is spent run at full priority here
        # (an unprivileged thread can lower its priority but never raise it back).
        self._due = concurrent.futures.ThreadPoolExecutor(
            passage_lanes, thread_name_prefix="embedder-passage-due", initializer=every_cpu
        )
        self._lane_count = {True: self._query_lanes, False: passage_lanes}
        self._in_progress: Counter[str] = Counter()  # keys of the queries in the model now
        self._waiting: dict[bool, Waiting] = {True: [], False: []}
        self._served: dict[bool, str | None] = {True: None, False: None}  # the last key served
        self._wake: dict[bool, asyncio.Event] = {}
        self._lanes: list[asyncio.Task[None]] = []
        self._running = 0
        self._gate = gate or RecallsFirst()

    @contextlib.contextmanager
    def recalling(self) -> Iterator[None]:
        """Around a whole recall (on the event loop): the stored texts' lanes hold back between
        texts until it is done, so that its query, its ranking and the event loop have the
        cores, not only its model call (niceness alone left a recall 3.5-5.5x slower while
        64 stores were in flight)."""
        with self._gate.recalling():
            yield

    def _passage_after_recalls(self, text: str) -> Vector:
        """On a stored texts' lane: one text, after the recalls in progress (or MAX_YIELD_S,
        or until the gate's budget for the second is spent)."""
        if not self._shared:  # on a single lane the recall's own query waits behind us
            self._gate.wait_in_thread(MAX_YIELD_S)
        return self.model.embed_passages([text])

    async def _embedded(self, lane: bool, query: bool, texts: list[str]) -> Vector:
        """A batch's rows: queries in one model call; stored texts one call each, each on a
        thread of full priority once the second's recalls-first budget is spent (chosen text
        by text: a niced thread under load may take most of a second over one)."""
        loop = asyncio.get_running_loop()
        if query:
            return await loop.run_in_executor(self._pools[lane], self.model.embed_queries, texts)
        rows = []
        for text in texts:
            pool = self._due if not self._shared and self._gate.spent() else self._pools[lane]
            rows.append(await loop.run_in_executor(pool, self._passage_after_recalls, text))
        return np.concatenate(rows)

    async def embed(self, texts: list[str], *, query: bool) -> list[Vector | None]:
        loop = asyncio.get_running_loop()
        if not self._lanes:
            self._start_lanes(loop)
        futures: list[asyncio.Future[Vector | None]] = []
        key = TURN.get()
        for text in texts:
            future: asyncio.Future[Vector | None] = loop.create_future()
            self._waiting[query].append((text, future, key))
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
            for _ in range(self._lane_count[True]):
                self._lanes.append(loop.create_task(self._lane(True)))
        for _ in range(self._lane_count[False]):
            self._lanes.append(loop.create_task(self._lane(False)))

    def _pending(self, lane: bool) -> bool:
        return bool(self._waiting[lane] or (self._shared and self._waiting[True]))

    def _next_batch(self, lane: bool) -> tuple[bool, Waiting]:
        """The lane's next texts (none: nothing it may take now): a query lane takes queries
        of keys not in progress on the other; a passage lane takes stored texts, or queries too
        when the model has a single lane. One key's text after another's in turn; queries up
        to QUERY_BATCH_CHARS (at least one)."""
        query = lane or (self._shared and bool(self._waiting[True]))
        size = MAX_BATCH if query else PASSAGE_BATCH
        waiting = self._waiting[query]
        busy = self._in_progress if lane and self._query_lanes > 1 else Counter[str]()
        taken: list[int] = []
        chars = 0
        for position in fair_order([key for _, _, key in waiting], self._served[query]):
            if busy[waiting[position][2]]:
                continue
            cost = min(len(waiting[position][0]), QUERY_BATCH_CHARS) if query else 0
            if len(taken) == size or (taken and chars + cost > QUERY_BATCH_CHARS):
                break
            taken.append(position)
            chars += cost
        if not taken:
            return query, []
        chosen = set(taken)
        self._waiting[query] = [item for at, item in enumerate(waiting) if at not in chosen]
        self._served[query] = waiting[taken[-1]][2]
        return query, [waiting[at] for at in taken]

    async def _lane(self, lane: bool) -> None:
        wake = self._wake[lane]
        while True:
            await wake.wait()
            wake.clear()
            while self._pending(lane):
                query, part = self._next_batch(lane)
                if not part:  # only keys in progress on the other lane: it takes them next
                    break
                if self._pending(lane):  # for another lane of the same kind, if one is idle
                    wake.set()
                await self._run(lane, query, part)

    async def _run(self, lane: bool, query: bool, part: Waiting) -> None:
        """One batch on the lane's threads; its callers get their rows (None if it failed)."""
        keys = [key for _, _, key in part] if query else []
        self._in_progress.update(keys)
        self._running += len(part)
        try:
            matrix = await self._embedded(lane, query, [text for text, _, _ in part])
            for (_, future, _), row in zip(part, matrix, strict=True):
                if not future.done():
                    future.set_result(row)
        except Exception:
            for _, future, _ in part:
                if not future.done():
                    future.set_result(None)
        finally:
            self._running -= len(part)
            self._in_progress.subtract(keys)
            self._in_progress += Counter()  # drop the keys at zero

    def backlog(self) -> int:
        return len(self._waiting[True]) + len(self._waiting[False]) + self._running

    async def close(self) -> None:
        for lane in self._lanes:
            lane.cancel()
        for pool in (*self._pools.values(), self._due):
            pool.shutdown(wait=False, cancel_futures=True)
