"""Runs a synchronous local model off the event loop, batching concurrent requests.

Stores that arrive while the model is busy are embedded together in the next batch, so a slow
model costs throughput per batch, not per store.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Protocol

from worker.embedders import Vector

MAX_BATCH = 64


class LocalModel(Protocol):
    name: str

    def embed_queries(self, texts: list[str]) -> Vector: ...

    def embed_passages(self, texts: list[str]) -> Vector: ...


class BatchingEmbedder:
    def __init__(self, model: LocalModel) -> None:
        self.model = model
        self.name = model.name
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="embedder")
        self._pending: list[tuple[str, bool, asyncio.Future[Vector | None]]] = []
        self._wake: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None

    async def embed(self, texts: list[str], *, query: bool) -> list[Vector | None]:
        loop = asyncio.get_running_loop()
        if self._runner is None:
            self._wake = asyncio.Event()
            self._runner = loop.create_task(self._run())
        assert self._wake is not None
        futures: list[asyncio.Future[Vector | None]] = []
        for text in texts:
            future: asyncio.Future[Vector | None] = loop.create_future()
            self._pending.append((text, query, future))
            futures.append(future)
        self._wake.set()
        return list(await asyncio.gather(*futures))

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                for query in (True, False):
                    part = [item for item in batch if item[1] is query]
                    if not part:
                        continue
                    embed = self.model.embed_queries if query else self.model.embed_passages
                    texts = [text for text, _, _ in part]
                    try:
                        matrix = await loop.run_in_executor(self._pool, embed, texts)
                        for (_, _, future), row in zip(part, matrix, strict=True):
                            if not future.done():
                                future.set_result(row)
                    except Exception:
                        for _, _, future in part:
                            if not future.done():
                                future.set_result(None)

    async def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
