"""memory::recall with MEMORY_WORKER_RECALL=expanded over the bus: the turn after a strong hit in
its session comes before a newer turn of another session, which the formula ranks above it."""

from __future__ import annotations

from pathlib import Path

import nats

from tests.conftest import worker_config
from tests.support import Client
from worker.app import App


async def test_expanded_recall_lifts_a_neighbour_over_the_bus(
    nats_url: str, tmp_path: Path
) -> None:
    orders = {}
    for mode in ("formula", "expanded"):
        app = App(worker_config(nats_url, tmp_path / f"{mode}.db", recall=mode))
        await app.start()
        nc = await nats.connect(nats_url)
        try:
            client = Client(nc)
            for content, at, session in (
                ("what did you paint last week", 1_000, "s1"),
                ("oh a lake at dawn", 2_000, "s1"),
                ("the weather was nice", 10_000, "s2"),
            ):
                await client.store("a", content, timestamp=at, sessionId=session)
            memories = await client.recall("a", "paint")
            orders[mode] = [memory["content"] for memory in memories]
            scores = [memory["score"] for memory in memories]
            assert scores == sorted(scores, reverse=True)
        finally:
            await nc.close()
            await app.stop()
    assert orders["formula"][1:] == ["the weather was nice", "oh a lake at dawn"]
    assert orders["expanded"][1:] == ["oh a lake at dawn", "the weather was nice"]
