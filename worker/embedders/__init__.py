"""Embedders behind one small interface; the worker picks one from MEMORY_WORKER_EMBEDDER.

An embedder turns a batch of texts into unit-length float32 vectors, or None for a text it could
not embed (the memory is then stored without a vector and the store still succeeds). `name` is
stored beside every vector: vectors of different names never compare (their cosine is 0).
Queries and stored passages are told apart because some models (e5) embed them differently.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]


class Embedder(Protocol):
    name: str

    async def embed(self, texts: list[str], *, query: bool) -> list[Vector | None]: ...

    def backlog(self) -> int:
        """Texts asked for and not yet embedded: past a batch, stores stop waiting for vectors."""
        ...

    def recalling(self) -> contextlib.AbstractContextManager[None]:
        """Entered around a whole recall: an embedder sharing the machine's cores with it may
        hold its stored texts back meanwhile."""
        ...

    async def close(self) -> None: ...


class NoEmbedder:
    """MEMORY_WORKER_EMBEDDER=none: no vectors; recall is keywords, recency and scores alone."""

    name = "none"

    async def embed(self, texts: list[str], *, query: bool) -> list[Vector | None]:
        return [None] * len(texts)

    def backlog(self) -> int:
        return 0

    def recalling(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    async def close(self) -> None:
        return None


def normalise(matrix: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Rows scaled to unit length (zero rows stay zero), as float32. The length is taken in
    float64: squaring a tiny float32 (1e-38) underflows to 0 and would leave its row unscaled."""
    rows: npt.NDArray[Any] = np.asarray(matrix, dtype=np.float32).astype(np.float64)
    if rows.ndim == 1:
        rows = rows[None, :]
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: npt.NDArray[np.float32] = (rows / norms).astype(np.float32)
    return unit
