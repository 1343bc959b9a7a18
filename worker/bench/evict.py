"""The bench's eviction figure: memories that sit in sessions, evicted while another agent keeps
storing. Eviction shares the single writer with every store, so its cost shows twice: how fast it
removes memories, and how long a store arriving meanwhile waits."""

from __future__ import annotations

import asyncio
from typing import Any

from worker.bench.client import BenchClient, percentiles
from worker.bench.corpus import Corpus

EVICT_AGENT = "bench-evict"
BYSTANDER = "bench-bystander"
SESSIONS = 10


async def measure_eviction(
    client: BenchClient, corpus: Corpus, memories: int, concurrency: int
) -> dict[str, Any]:
    """Store `memories` into SESSIONS sessions of one agent, then evict them all (cap 0) while a
    bystander stores one memory at a time; the bystander's latencies are the stall figure."""
    payloads = [
        {
            "agentId": EVICT_AGENT,
            "sessionId": f"session-{n % SESSIONS}",
            "content": f"{n} {corpus.text(8, 40)}",
        }
        for n in range(memories)
    ]
    await client.many("memory::store", payloads, concurrency=concurrency)
    # Loaded, as an agent in use is: eviction then also updates its recall index.
    await client.timed("memory::recall", {"agentId": EVICT_AGENT, "query": corpus.text(3, 6)})
    evicting = asyncio.create_task(
        client.timed("memory::evict", {"agentId": EVICT_AGENT, "cap": 0})
    )
    stalls: list[float] = []
    while not evicting.done():
        write = {"agentId": BYSTANDER, "content": corpus.text(8, 40)}
        stalls.append((await client.timed("memory::store", write))[0])
    elapsed_ms, reply = await evicting
    seconds = elapsed_ms / 1000
    return {
        "evicted": reply["evicted"],
        "seconds": round(seconds, 3),
        "per_second": round(reply["evicted"] / max(seconds, 1e-9)),
        "stores_during": len(stalls),
        "store_during": {**percentiles(stalls), "max_ms": round(max(stalls, default=0.0), 3)},
    }


def eviction_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    if "eviction" not in results:
        return []
    figure = results["eviction"]
    during = figure["store_during"]
    return [
        (f"evicted from sessions ({figure['evicted']}) in s", figure["seconds"]),
        ("memories in sessions evicted per second", figure["per_second"]),
        (
            f"store p50 / p99 / max ms during eviction ({figure['stores_during']})",
            f"{during['p50_ms']} / {during['p99_ms']} / {during['max_ms']}",
        ),
    ]
