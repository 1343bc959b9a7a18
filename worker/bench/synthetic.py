"""One agent of many memories written straight into a database file, and the vectors that go
with them, for `bench --scale`: storing a million memories through the bus would take most of
an hour with vectors, and it is recall that the scale bench measures, not stores.

Texts are the bench corpus's words (Zipf-distributed, so postings range from huge to tiny).
Vectors are 384-d like MiniLM's, clustered as a learned model's are (a random centre per
topic plus noise, normalised): uniform random vectors have no near neighbours, which would make
any vector index look both better and worse than on real embeddings. The stub embedder
(`python -m worker.bench.synthetic URL`) answers `embedding.generate` with a vector near the
centre its text hashes to, so that queries have neighbours among the memories.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import nats
import numpy as np
import numpy.typing as npt

from worker.bench.corpus import Corpus
from worker.db import migrate, open_db

DIM = 384
CENTRES = 4096
NOISE = 0.9  # per-dimension noise relative to a unit-variance centre: neighbours, not twins
MODEL = "bus"  # the name the worker gives vectors from `embedding.generate`
TENANT = ""
WEEK_MS = 604_800_000
BATCH = 20_000


def centres(seed: int = 11) -> npt.NDArray[np.float32]:
    return np.random.default_rng(seed).standard_normal((CENTRES, DIM)).astype(np.float32)


def near(centre: npt.NDArray[np.float32], rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """Rows near the given centres, normalised."""
    noisy = centre + NOISE * rng.standard_normal(centre.shape).astype(np.float32)
    noisy /= np.linalg.norm(noisy, axis=-1, keepdims=True)
    return noisy


def text_centre(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "little") % (
        CENTRES
    )


class Texts:
    """Corpus texts made fast: word indices drawn with numpy from the corpus's Zipf weights."""

    def __init__(self, seed: int) -> None:
        corpus = Corpus()
        self.words = np.asarray(corpus.words, dtype=object)
        weights = np.asarray(corpus.weights)
        self.p = weights / weights.sum()
        self.rng = np.random.default_rng(seed)

    def many(self, count: int, low: int, high: int) -> list[str]:
        lengths = self.rng.integers(low, high + 1, size=count)
        drawn = self.rng.choice(len(self.words), size=int(lengths.sum()), p=self.p)
        texts, at = [], 0
        for length in lengths:
            texts.append(" ".join(self.words[drawn[at : at + length]]))
            at += length
        return texts


def fill(path: Path, agent_id: str, count: int, *, vectors: bool, now: int, seed: int = 5) -> None:
    """Write `count` memories of one agent (timestamps over two years before `now`) into the
    file at `path`, migrated first, in batches of one transaction each."""
    conn = open_db(path, synchronous="normal")
    migrate(conn)
    texts, rng, centre = Texts(seed), np.random.default_rng(seed), centres()
    span = 104 * WEEK_MS
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        contents = texts.many(size, 8, 40)
        # Ordered by time, as an agent's memories arrive, with a jitter.
        stamps = now - span + (np.arange(start, start + size) * span) // max(1, count)
        importance = rng.random(size)
        confidence = 0.5 + 0.5 * rng.random(size)
        blobs: list[bytes | None] = [None] * size
        if vectors:
            rows = near(centre[rng.integers(0, CENTRES, size=size)], rng)
            blobs = [row.tobytes() for row in rows]
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO memories (id, tenant, agent_id, role, content, hash, importance, "
            "confidence, last_accessed, timestamp, embedding, embedding_model, created_at) "
            "VALUES (?, ?, ?, 'user', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (
                    f"m{start + i:09d}",
                    TENANT,
                    agent_id,
                    contents[i],
                    f"h{start + i:09d}",
                    float(importance[i]),
                    float(confidence[i]),
                    int(stamps[i]),
                    int(stamps[i]),
                    blobs[i],
                    MODEL if vectors else None,
                    int(stamps[i]),
                )
                for i in range(size)
            ),
        )
        conn.execute("COMMIT")
    conn.close()


class _Request(msgspec.Struct):
    text: str


async def serve(url: str) -> None:
    """The stub `embedding.generate`: a vector near the centre the text hashes to."""
    nc = await nats.connect(url)
    centre = centres()

    async def embed(msg: Any) -> None:
        text = msgspec.json.decode(msg.data, type=_Request).text
        rng = np.random.default_rng(text_centre(text) * 7919 + len(text))
        vector = near(centre[text_centre(text)], rng)
        await msg.respond(msgspec.json.encode({"embedding": vector.tolist()}))

    await nc.subscribe("embedding.generate", cb=embed)
    await nc.flush()
    await asyncio.Event().wait()


def fill_main(argv: list[str]) -> None:
    """`python -m worker.bench.synthetic fill PATH COUNT [--vectors]`: for trying by hand."""
    started = time.perf_counter()
    count = int(argv[1])
    fill(
        Path(argv[0]), "bench-agent", count, vectors="--vectors" in argv, now=int(time.time() * 1e3)
    )
    print(f"{count} memories in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    if sys.argv[1] == "fill":
        fill_main(sys.argv[2:])
    else:
        asyncio.run(serve(sys.argv[1]))
