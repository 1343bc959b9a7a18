"""Vectors that follow their memory: stores the model could not keep up with, and memories left
without a vector (an embedding call that failed, a crash before the vector came, a database
filled with MEMORY_WORKER_EMBEDDER=none), and, when the configured model is the one running,
vectors of another model (recall compares only vectors of its own model, so after a change of
model old memories would lose their meaning term). A fallback (the builtin model failed to load)
must not overwrite good vectors with its own, so then only missing vectors are filled.

When more texts are waiting for the model than one batch, a store commits without its vector
and replies at once; the memory is recallable by its keywords at once and by meaning when this
task has embedded it. Sustained throughput is still the model's; a burst no longer waits for it.

It serves every tenant, one agent (a (tenant, agentId) pair) at a time, in turn.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import numpy as np
import structlog

from handlers.backfill import missing_vector_agents, set_embeddings, vectorless
from worker.embedders import Embedder
from worker.readers import Readers
from worker.recall_index.agent_index import AgentKey
from worker.writer import Writer
from worker.writes import Write, decide_and_apply

log = structlog.get_logger()

# Stores stop waiting for their vector when this many texts are already waiting for the model.
DEFER_AT = 32
# Well under DEFER_AT, so that the backfill's own texts never make stores defer.
BATCH = 16
# A batch the embedder could not embed at all (its service down) is tried again after this.
RETRY_S = 30.0


class Embedded(msgspec.Struct, frozen=True):
    """Vectors given to an agent's memories that lacked them (of this model, with `replace`):
    the backfill's decision, which a shard logs and replays like any write."""

    tenant: str
    agent_id: str
    model: str
    replace: bool
    vectors: list[tuple[str, bytes]]


EMBEDDED = "memory::backfill"
EMBED: Write[Embedded, None] = Write(
    decision=Embedded,
    decide=lambda conn, embedded, now, _: embedded,
    apply=lambda conn, e: set_embeddings(
        conn,
        e.tenant,
        e.agent_id,
        e.model,
        [(i, np.frombuffer(vector, dtype=np.float32)) for i, vector in e.vectors],
        e.replace,
    ),
    reply=lambda embedded, _: None,
    changes=lambda embedded, _: (),
)


class Backfill:
    def __init__(
        self, embedder: Embedder, readers: Readers, writer: Writer, *, replace: bool = False
    ) -> None:
        self._embedder = embedder
        # Vectors of another model than this one count as missing (None: only missing ones).
        self._model = embedder.name if replace else None
        self._retries: dict[AgentKey, asyncio.TimerHandle] = {}
        self.retry_s = RETRY_S
        self._readers = readers
        self._writer = writer
        self._agents: dict[AgentKey, None] = {}
        # Agents the start found vectors of another model in (with `replace`): only theirs are
        # searched for those, a query that visits every row of the agent (handlers/backfill.py);
        # a store deferred for the model leaves its memory without a vector, not another's.
        self._other_model: set[AgentKey] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None

    def start(self) -> None:
        """Begin with every agent that has a memory without a vector."""
        if self._embedder.name != "none":
            self._task = asyncio.create_task(self._run())

    def add(self, tenant: str, agent_id: str) -> None:
        self._agents[tenant, agent_id] = None
        self._wake.set()

    async def _run(self) -> None:
        try:
            for tenant, agent_id in await self._readers.run(
                lambda c: missing_vector_agents(c, self._model)
            ):
                if self._model is not None:
                    self._other_model.add((tenant, agent_id))
                self.add(tenant, agent_id)
        except Exception:
            log.exception("backfill.scan_failed")
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._agents:
                # Taken off before its batch, so that a store deferred meanwhile puts it back.
                key = next(iter(self._agents))
                del self._agents[key]
                try:
                    done = await self.fill_batch(*key)
                except Exception:
                    log.exception("backfill.failed", tenant=key[0], agent=key[1])
                    self._retry_later(key)
                    done = True
                if not done:  # to the back of the line: a long backlog starves nobody
                    self._agents[key] = None

    def _retry_later(self, key: AgentKey) -> None:
        if key not in self._retries:
            loop = asyncio.get_running_loop()
            self._retries[key] = loop.call_later(self.retry_s, self._retry, key)

    def _retry(self, key: AgentKey) -> None:
        del self._retries[key]
        self.add(*key)

    async def fill_batch(self, tenant: str, agent_id: str) -> bool:
        """Embed one batch of the agent's memories that lack a vector; True when there are no
        more, or none of this batch could be embedded (then the agent is retried in RETRY_S)."""
        model, replace = self._embedder.name, self._model is not None
        other = self._model if (tenant, agent_id) in self._other_model else None
        rows = await self._readers.run(lambda c: vectorless(c, tenant, agent_id, BATCH, other))
        if not rows:
            self._other_model.discard((tenant, agent_id))
            return True
        vectors = await self._embedder.embed([content for _, content in rows], query=False)
        found = [(i, v) for (i, _), v in zip(rows, vectors, strict=True) if v is not None]
        if not found:
            self._retry_later((tenant, agent_id))
            return True
        given = [(i, v.astype(np.float32).tobytes()) for i, v in found]
        embedded = Embedded(tenant, agent_id, model, replace, given)
        await self._writer.run(
            lambda c: decide_and_apply(
                c, EMBEDDED, EMBED, embedded, now=0, prepared=None, call=None
            )  # no audit row: a vector is not a change of what the agent remembers
        )
        if len(rows) < BATCH and len(found) == len(rows):
            self._other_model.discard((tenant, agent_id))
        return len(rows) < BATCH

    async def close(self) -> None:
        for handle in self._retries.values():
            handle.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
