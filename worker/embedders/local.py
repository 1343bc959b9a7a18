"""Runs a synchronous local model off the event loop, batching concurrent requests.

Stores that arrive while the model is busy are embedded together in the next batches, so a slow
model costs throughput per batch, not per store; queries jump the queue of stored texts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Protocol

from worker.embedders import Vector

MAX_BATCH = 64
# Stored texts go to the model 8 at a time (no slower per text than larger batches here), so
# that a query arriving meanwhile waits for little.
PASSAGE_BATCH = 8


class LocalModel(Protocol):
    name: str

    def embed_queries(self, texts: list[str]) -> Vector: ...

    def embed_passages(self, texts: list[str]) -> Vector: ...


class BatchingEmbedder:
    def __init__(self, model: LocalModel) -> None:
        self.model = model
        self.name = model.name
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="embedder")
        # Queries go first: a recall waits for at most one small batch of stored texts.
        self._waiting: dict[bool, list[tuple[str, asyncio.Future[Vector | None]]]] = {
            True: [],
            False: [],
        }
        self._wake: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None
        self._running = 0

    async def embed(self, texts: list[str], *, query: bool) -> list[Vector | None]:
        loop = asyncio.get_running_loop()
        if self._runner is None:
            self._wake = asyncio.Event()
            self._runner = loop.create_task(self._run())
        assert self._wake is not None
        futures: list[asyncio.Future[Vector | None]] = []
        for text in texts:
            future: asyncio.Future[Vector | None] = loop.create_future()
            self._waiting[query].append((text, future))
            futures.append(future)
        self._wake.set()
        try:
            return list(await asyncio.gather(*futures))
        except asyncio.CancelledError:
            # The caller is gone (its request timed out, the worker stops): its texts leave the
            # queue, so that the model does not spend time on them nor count them as backlog.
            mine = set(futures)
            self._waiting[query] = [item for item in self._waiting[query] if item[1] not in mine]
            raise

    def _next_batch(self) -> tuple[bool, list[tuple[str, asyncio.Future[Vector | None]]]]:
        query = bool(self._waiting[True])
        size = MAX_BATCH if query else PASSAGE_BATCH
        waiting = self._waiting[query]
        self._waiting[query] = waiting[size:]
        return query, waiting[:size]

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting[True] or self._waiting[False]:
                query, part = self._next_batch()
                embed = self.model.embed_queries if query else self.model.embed_passages
                self._running = len(part)
                try:
                    texts = [text for text, _ in part]
                    matrix = await loop.run_in_executor(self._pool, embed, texts)
                    for (_, future), row in zip(part, matrix, strict=True):
                        if not future.done():
                            future.set_result(row)
                except Exception:
                    for _, future in part:
                        if not future.done():
                            future.set_result(None)
                finally:
                    self._running = 0

    def backlog(self) -> int:
        return len(self._waiting[True]) + len(self._waiting[False]) + self._running

    async def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
