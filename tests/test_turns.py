"""Fair turns (worker/turns.py) and the queues that take them: the reader threads and the model's
query lanes serve one key after another, not in arrival order."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from worker.db import migrate, open_db
from worker.embedders.local import QUERY_BATCH_CHARS, BatchingEmbedder
from worker.readers import Readers
from worker.turns import TURN, QueueFull, Turns, fair_order


async def test_waiting_keys_take_free_turns_one_each_in_turn() -> None:
    """One turn, held by A; A1-A3 then B1 and C1 wait: they are served A1, B1, C1, A2, A3."""
    turns = Turns(1)
    served: list[str] = []
    await turns.acquire("A")

    async def wait(key: str, name: str) -> None:
        async with turns.turn(key):
            served.append(name)
            await asyncio.sleep(0)

    waiting = [
        asyncio.ensure_future(wait(key, name))
        for key, name in (("A", "A1"), ("A", "A2"), ("A", "A3"), ("B", "B1"), ("C", "C1"))
    ]
    await asyncio.sleep(0)
    assert served == [] and turns.waiting("A") == 3
    turns.release("A")
    await asyncio.gather(*waiting)
    assert served == ["A1", "B1", "C1", "A2", "A3"]
    assert turns.running("A") == 0 and turns.waiting("A") == 0


async def test_a_key_at_its_own_bound_waits_while_another_key_goes_ahead() -> None:
    """per_key=2: A's third waits for one of its two; B's first goes at once."""
    turns = Turns(None, per_key=2)
    await turns.acquire("A")
    await turns.acquire("A")
    third = asyncio.ensure_future(turns.acquire("A"))
    await asyncio.wait_for(turns.acquire("B"), 1)
    assert not third.done()
    turns.release("A")
    await asyncio.wait_for(third, 1)
    assert turns.running("A") == 2 and turns.running("B") == 1


async def test_past_its_queue_a_key_is_refused_at_once_and_others_are_not() -> None:
    """queue=2: A's fourth (one running, two waiting) raises QueueFull with the description."""
    turns = Turns(1, per_key=1, queue=2, describe=lambda key: f"{key} is full")
    await turns.acquire("A")
    waiting = [asyncio.ensure_future(turns.acquire("A")) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(QueueFull, match="A is full"):
        await turns.acquire("A")
    other = asyncio.ensure_future(turns.acquire("B"))  # waits for the one turn, not refused
    await asyncio.sleep(0)
    assert turns.waiting("B") == 1
    for _ in range(3):
        turns.release("A" if turns.running("A") else "B")
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*waiting, other), 1)


async def test_a_waiter_given_up_leaves_no_trace_and_a_turn_given_up_is_handed_on() -> None:
    """Cancelled while waiting: gone from the queue. Cancelled once granted: released."""
    turns = Turns(1)
    await turns.acquire("A")
    gone = asyncio.ensure_future(turns.acquire("B"))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    assert turns.waiting("B") == 0
    granted = asyncio.ensure_future(turns.acquire("C"))
    later = asyncio.ensure_future(turns.acquire("D"))
    await asyncio.sleep(0)
    turns.release("A")  # C's turn is given, then C gives up before it runs
    granted.cancel()
    await asyncio.gather(granted, return_exceptions=True)
    await asyncio.wait_for(later, 1)
    assert turns.running("C") == 0 and turns.running("D") == 1


def test_fair_order_takes_one_item_per_key_in_turn_starting_after_the_last_served() -> None:
    keys = ["A", "A", "A", "B", "C", "A"]
    assert list(fair_order(keys, None)) == [0, 3, 4, 1, 2, 5]
    assert list(fair_order(keys, "A")) == [3, 4, 0, 1, 2, 5]
    assert list(fair_order(keys, "C")) == [0, 3, 4, 1, 2, 5]  # C was last: A's turn again
    assert list(fair_order(keys, "gone")) == [0, 3, 4, 1, 2, 5]


async def test_a_keys_read_runs_while_another_key_holds_its_share_of_the_reader_threads(
    tmp_path: Path,
) -> None:
    """Two reader threads and a spare: A's ten reads, blocked, hold two; B's read runs on the
    third at once (before, B waited behind all ten of A's in arrival order)."""
    conn = open_db(tmp_path / "memory.db")
    migrate(conn)
    readers = Readers(tmp_path / "memory.db", threads=2)
    release = threading.Event()
    started = threading.Semaphore(0)

    def blocked(_: object) -> int:
        started.release()
        assert release.wait(30)
        return 1

    try:
        TURN.set("A")
        held = [asyncio.ensure_future(readers.run(blocked)) for _ in range(10)]
        for _ in range(2):
            assert await asyncio.to_thread(started.acquire, True, 30)
        TURN.set("B")
        assert await asyncio.wait_for(readers.run(lambda _: 2), 5) == 2
        assert not any(read.done() for read in held)
        release.set()
        assert await asyncio.wait_for(asyncio.gather(*held), 30) == [1] * 10
    finally:
        release.set()
        readers.close()
        conn.close()


class OrderedModel:
    """Records the texts of each call in order; 20 ms per call; two lanes and more."""

    name = "ordered"
    lanes = 3

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        time.sleep(0.02)
        self.calls.append(list(texts))
        return np.ones((len(texts), 4), dtype=np.float32) / 2

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self.embed_queries(texts)


async def test_a_keys_short_query_is_embedded_beside_another_keys_queue_of_long_ones() -> None:
    """A's ten 16 KiB queries are embedded one per call, on one query lane at a time; B's
    short query, asked after them, goes on the other lane at once, before A's second (before,
    it waited for all of A's batched ahead of it)."""
    model = OrderedModel()
    embedder = BatchingEmbedder(model)
    long = "word " * 3300
    try:
        TURN.set("A")
        floods = [
            asyncio.ensure_future(embedder.embed([f"{n} {long}"], query=True)) for n in range(10)
        ]
        await asyncio.sleep(0)
        TURN.set("B")
        [row] = await asyncio.wait_for(embedder.embed(["where?"], query=True), 5)
        assert row is not None
        await asyncio.wait_for(asyncio.gather(*floods), 30)
    finally:
        await embedder.close()
    order = [text[:6] for call in model.calls for text in call]
    assert order.index("where?") <= 1, order
    assert all(len(call) == 1 for call in model.calls if len(call[0]) > QUERY_BATCH_CHARS)
