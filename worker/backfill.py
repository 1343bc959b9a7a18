"""Vectors that follow their memory: stores the model could not keep up with, and memories left
without a vector (an embedding call that failed, a crash before the vector came, a database
filled with MEMORY_WORKER_EMBEDDER=none). Vectors of another model are left alone: a model that
failed to load must not overwrite good vectors with its fallback's.

When more texts are waiting for the model than one batch, a store commits without its vector
and replies at once; the memory is recallable by its keywords at once and by meaning when this
task has embedded it. Sustained throughput is still the model's; a burst no longer waits for it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from handlers.store import missing_vector_agents, set_embeddings, vectorless
from worker.embedders import Embedder
from worker.readers import Readers
from worker.writer import Writer

log = structlog.get_logger()

BATCH = 64
# Stores stop waiting for their vector when this many texts are already waiting for the model.
DEFER_AT = 32


class Backfill:
    def __init__(self, embedder: Embedder, readers: Readers, writer: Writer) -> None:
        self._embedder = embedder
        self._readers = readers
        self._writer = writer
        self._agents: dict[str, None] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None
        self.embedded = 0

    def start(self) -> None:
        """Begin with every agent that has a memory without a vector."""
        if self._embedder.name != "none":
            self._task = asyncio.create_task(self._run())

    def add(self, agent_id: str) -> None:
        self._agents[agent_id] = None
        self._wake.set()

    def pending_agents(self) -> int:
        return len(self._agents)

    async def _run(self) -> None:
        try:
            for agent_id in await self._readers.run(missing_vector_agents):
                self.add(agent_id)
        except Exception as error:
            log.error("backfill.scan_failed", error=type(error).__name__)
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._agents:
                # Taken off before its batch, so that a store deferred meanwhile puts it back.
                agent_id = next(iter(self._agents))
                del self._agents[agent_id]
                try:
                    done = await self.fill_batch(agent_id)
                except Exception as error:
                    log.error("backfill.failed", agent=agent_id, error=type(error).__name__)
                    done = True
                if not done:  # to the back of the line: a long backlog starves nobody
                    self._agents[agent_id] = None

    async def fill_batch(self, agent_id: str) -> bool:
        """Embed one batch of the agent's memories that have no vector; True when there are no
        more, or none of this batch could be embedded (those are retried at the next start)."""
        model = self._embedder.name
        rows = await self._readers.run(lambda c: vectorless(c, agent_id, BATCH))
        if not rows:
            return True
        vectors = await self._embedder.embed([content for _, content in rows], query=False)
        found = [(i, v) for (i, _), v in zip(rows, vectors, strict=True) if v is not None]
        if found:
            await self._writer.run(lambda c: set_embeddings(c, agent_id, model, found))
            self.embedded += len(found)
        return not found or len(rows) < BATCH

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
