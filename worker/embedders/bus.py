"""MEMORY_WORKER_EMBEDDER=bus: ask another service on `embedding.generate` for each text."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgspec
import numpy as np
import structlog

from worker.embedders import Vector, normalise
from worker.outgoing import CallFailed, call

log = structlog.get_logger()


class EmbeddingReply(msgspec.Struct, frozen=True):
    embedding: list[float]


class BusEmbedder:
    name = "bus"

    def __init__(self, nc: Any, *, timeout: float, subject: str = "embedding.generate") -> None:
        self._nc = nc
        self._timeout = timeout
        self._subject = subject
        self._in_flight = 0

    async def _one(self, text: str) -> Vector | None:
        try:
            reply = await call(
                self._nc, self._subject, {"text": text}, EmbeddingReply, self._timeout
            )
            # As float32 first: 1e39 is finite in JSON and infinite as the float32 it is kept as.
            with np.errstate(over="ignore"):
                values = np.asarray(reply.embedding, dtype=np.float32)
            if not len(values) or not np.isfinite(values).all():
                raise ValueError("empty or non-finite embedding")
            vector: Vector = normalise(values)[0]
            return vector
        except Exception as error:
            reason = error.reason if isinstance(error, CallFailed) else type(error).__name__
            log.warning("embedding.failed", service=self._subject, error=reason)
            return None

    async def embed(self, texts: list[str], *, query: bool) -> list[Vector | None]:
        self._in_flight += len(texts)
        try:
            return list(await asyncio.gather(*(self._one(text) for text in texts)))
        finally:
            self._in_flight -= len(texts)

    def backlog(self) -> int:
        return self._in_flight

    def recalling(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # the model runs elsewhere: nothing here to hold back

    async def close(self) -> None:
        return None
