"""A small local embedder: hashed word and character-trigram features, no model file.

It stands in for a learned model where none is installed: it captures shared words and word
pieces, not meaning. The learned builtin model replaces it as the default (see README).
"""

from __future__ import annotations

import hashlib

import numpy as np

from handlers.text import tokens
from worker.embedders import Vector, normalise

DIM = 256


def _bucket(feature: str) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % DIM, 1.0 if value >> 63 else -1.0


class HashingModel:
    name = "hash-256-v1"
    dim = DIM
    lanes = 2  # pure numpy: a query runs beside a batch of stored texts

    def _embed(self, texts: list[str]) -> np.ndarray:
        matrix = np.zeros((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in tokens(text):
                index, sign = _bucket("w:" + token)
                matrix[row, index] += sign
                padded = f"#{token}#"
                for start in range(max(1, len(padded) - 2)):
                    index, sign = _bucket("c:" + padded[start : start + 3])
                    matrix[row, index] += 0.5 * sign
        return normalise(matrix)

    def embed_queries(self, texts: list[str]) -> Vector:
        return self._embed(texts)

    def embed_passages(self, texts: list[str]) -> Vector:
        return self._embed(texts)
