"""The recall index's memory budget holds: an agent is counted as what it allocates, in
proportion to its size; eviction keeps the counted bytes, and what the agents really allocate
(tracemalloc: numpy's arrays and Python's objects), within the budget; writing a snapshot
counts what it allocates too, other agents leaving to make room."""

from __future__ import annotations

import gc
import threading
import tracemalloc
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest

from handlers.text import stem, tokens
from worker.db import migrate, open_db
from worker.readers import Readers
from worker.recall_index.changes import ChangeReader
from worker.recall_index.index import MemoryIndex
from worker.recall_index.release import Releaser, malloc_trim

DIM = 384
MB = 1 << 20


def fill(path: Path, agents: dict[str, int]) -> None:
    """Each agent's memories (a 384-d vector each, a few words) written straight into the file."""
    rng = np.random.default_rng(8)
    conn = open_db(path, synchronous="normal")
    migrate(conn)
    with conn:
        for agent, count in agents.items():
            vectors = rng.standard_normal((count, DIM)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            conn.executemany(
                "INSERT INTO memories (id, tenant, agent_id, role, content, hash, importance, "
                "confidence, last_accessed, timestamp, embedding, embedding_model, created_at) "
                "VALUES (?, '', ?, 'user', ?, ?, 0.5, 1.0, 1, 1, ?, 'bus', 1)",
                (
                    (f"{agent}-{n}", agent, content(agent, n), f"{agent}{n}", vectors[n].tobytes())
                    for n in range(count)
                ),
            )
    conn.close()


def content(agent: str, number: int) -> str:
    return f"note {number} of {agent} word{number % 97}"


def cache_stems(texts: Iterable[str]) -> None:
    """Stem the texts' words now: the stems are cached for the process (65 536 words at most,
    part of the worker's fixed overhead), not in an agent's index."""
    for text in texts:
        for token in tokens(text):
            stem(token)


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    yield
    tracemalloc.stop()


def allocated() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_an_agent_is_counted_as_what_it_allocates_in_proportion_to_its_size(
    tmp_path: Path, traced: None
) -> None:
    """An agent of one memory is counted as tens of KB (it was 6.7 MB: room for 4 097 rows of
    384-d vectors), of 2 000 memories as about 2 000 rows; each is at least what loading it
    allocated, and at most 1.5 times that (loaded a second time: the first fills the process's
    cache of word stems, which is not the agent's)."""
    small = [f"s{n}" for n in range(50)]
    fill(tmp_path / "memory.db", {**dict.fromkeys(small, 1), "big": 2000})
    index = MemoryIndex(Readers(tmp_path / "memory.db"), 1 << 40, lambda: 1, codes=True)
    for agent in [*small, "big"]:
        index.agent(("", agent))
    index.forget_all()
    before = allocated()
    for agent in small:
        index.agent(("", agent))
    grown = allocated() - before
    counted = sum(index.agent(("", agent)).nbytes() for agent in small)
    assert counted / len(small) < 64 * 1024
    assert grown <= counted <= 1.5 * grown
    before = allocated()
    big = index.agent(("", "big"))
    grown = allocated() - before
    assert grown <= big.nbytes() <= 1.5 * grown
    per_row = DIM * 4 + 8 * 11 + DIM // 8  # a vector, the columns, the code (about)
    assert big.nbytes() < 2000 * per_row * 1.5
    assert big.capacity() < 2 * 2000


def test_eviction_keeps_the_counted_and_the_allocated_bytes_within_the_budget(
    tmp_path: Path, traced: None
) -> None:
    """300 agents of one memory and a budget of 2 MB: after each load, the bytes counted and the
    bytes the loaded agents allocated are within the budget, and many agents share it."""
    agents = [f"a{n}" for n in range(300)]
    fill(tmp_path / "memory.db", dict.fromkeys(agents, 1))
    budget = 2 * MB
    index = MemoryIndex(Readers(tmp_path / "memory.db"), budget, lambda: 1, codes=True)
    for agent in agents:  # the words' stems cached, as a worker that ran a while has them
        index.agent(("", agent))
    index.forget_all()
    before = allocated()
    for number, agent in enumerate(agents):
        index.agent(("", agent))
        if number % 25 == 0 or number == len(agents) - 1:
            assert allocated() - before <= budget
            assert index.counted_bytes() <= budget
    assert index.loaded_agents() >= 30


def test_writing_a_snapshot_counts_what_it_allocates_and_other_agents_leave_for_it(
    tmp_path: Path, traced: None
) -> None:
    """An agent of 10 000 memories, a tenth of them deleted and 1 000 stored since it loaded,
    and ten agents of 1 000 filling a 40 MB budget: while a clean shutdown writes their
    snapshots (the first compacts the deleted rows away, merging its lists: copies of some 7
    MB), what the index allocates stays within the budget plus 2 MB, other agents leaving to
    make room for the writing."""
    fillers = [f"f{n}" for n in range(10)]
    path = tmp_path / "memory.db"
    fill(path, {"big": 10_000, **dict.fromkeys(fillers, 1000)})
    budget = 40 * MB
    index = MemoryIndex(Readers(path), budget, lambda: 1, cache_dir=tmp_path / "i", codes=True)
    writer = open_db(path)
    log = ChangeReader(writer)
    cache_stems(content(agent, n) for agent in ["big", *fillers] for n in range(10_000))
    cache_stems(f"fresh words{n} later{n}" for n in range(1000))
    before = allocated()
    index.agent(("", "big"))
    with writer:
        writer.execute("DELETE FROM memories WHERE agent_id = 'big' AND rowid % 10 = 0")
        writer.executemany(
            "INSERT INTO memories (id, tenant, agent_id, role, content, hash, importance, "
            "confidence, last_accessed, timestamp, created_at) "
            "VALUES (?, '', 'big', 'user', ?, ?, 0.5, 1.0, 1, 1, 1)",
            ((f"new-{n}", f"fresh words{n} later{n}", f"new{n}") for n in range(1000)),
        )
    index.apply(writer, log.take(writer))
    for agent in fillers:
        index.agent(("", agent))
    assert budget - 4 * MB < allocated() - before <= budget  # the budget is full
    tracemalloc.reset_peak()
    index.close()  # writes every agent loaded from SQLite, "big" first
    assert tracemalloc.get_traced_memory()[1] - before <= budget + 2 * MB
    assert index.loaded_agents() < 1 + len(fillers)
    writer.close()


def test_memory_freed_by_agents_leaving_is_given_back_once_enough_has_left(
    tmp_path: Path,
) -> None:
    """Agents leaving the index tell its releaser what they held; once that reaches its
    threshold, the releaser's thread gives the freed memory back (malloc_trim in a worker)."""
    fill(tmp_path / "memory.db", {f"a{n}": 1 for n in range(20)})
    trimmed = threading.Event()
    releaser = Releaser(trimmed.set, release_from=200_000)
    index = MemoryIndex(Readers(tmp_path / "memory.db"), 1, lambda: 1, releaser=releaser)
    index.agent(("", "a0"))
    assert not trimmed.is_set()
    for n in range(1, 20):
        index.agent(("", f"a{n}"))
    assert trimmed.wait(10)
    releaser.close()
    assert malloc_trim() is not None  # glibc, as in the worker's image
