"""MEMORY_WORKER_EMBEDDER=bus: ask another service on `embedding.generate` for each text."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import msgspec
import numpy as np
import structlog

from worker.embedders import Vector, normalise

log = structlog.get_logger()


class EmbeddingReply(msgspec.Struct, frozen=True):
    embedding: list[float]


class BusEmbedder:
    name = "bus"

    def __init__(self, nc: Any, *, timeout: float, subject: str = "embedding.generate") -> None:
        self._nc = nc
        self._timeout = timeout
        self._subject = subject
        self._decode = msgspec.json.Decoder(EmbeddingReply).decode
        self._in_flight = 0

    async def _one(self, text: str) -> Vector | None:
        try:
            msg = await self._nc.request(
                self._subject, msgspec.json.encode({"text": text}), timeout=self._timeout
            )
            if msg.headers and msg.headers.get("Nats-Service-Error-Code"):
                raise RuntimeError(msg.headers.get("Nats-Service-Error", "error reply"))
            values = self._decode(msg.data).embedding
            if not values or not all(math.isfinite(v) for v in values):
                raise ValueError("empty or non-finite embedding")
            vector: Vector = normalise(np.asarray(values, dtype=np.float32))[0]
            return vector
        except Exception as error:
            log.warning("embedding.failed", service=self._subject, error=type(error).__name__)
            return None

    async def embed(self, texts: list[str], *, query: bool) -> list[Vector | None]:
        self._in_flight += len(texts)
        try:
            return list(await asyncio.gather(*(self._one(text) for text in texts)))
        finally:
            self._in_flight -= len(texts)

    def backlog(self) -> int:
        return self._in_flight

    async def close(self) -> None:
        return None
