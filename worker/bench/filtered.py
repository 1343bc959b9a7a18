"""The bench's figures for a memory's life at scale: recall with a filter that passes 1% of an
agent's memories against recall without one, and paging through the whole agent with
memory::list."""

from __future__ import annotations

import time
from typing import Any

from worker.bench.client import BenchClient, percentiles
from worker.bench.corpus import Corpus

FILTER_AGENT = "bench-filtered"
RECALLS = 100
PAGE = 1000


async def measure_filtered(
    client: BenchClient, corpus: Corpus, memories: int, concurrency: int
) -> dict[str, Any]:
    """Store `memories` into one agent, 1% tagged `{"tag": "rare"}`; then recall p50 without a
    filter, with the metadata filter, and with a time window; then list every page."""
    payloads = [
        {
            "agentId": FILTER_AGENT,
            "content": f"{n} {corpus.text(8, 40)}",
            "timestamp": 1_700_000_000_000 + n,
            **({"metadata": {"tag": "rare"}} if n % 100 == 0 else {}),
        }
        for n in range(memories)
    ]
    await client.many("memory::store", payloads, concurrency=concurrency)
    queries = [corpus.text(3, 6) for _ in range(RECALLS)]
    plain = {"agentId": FILTER_AGENT}
    await client.timed("memory::recall", {**plain, "query": queries[0]})  # loads the index
    figures: dict[str, Any] = {"memories": memories}
    window = {"since": 1_700_000_000_000, "until": 1_700_000_000_000 + memories // 100}
    for name, extra in (
        ("recall", {}),
        ("recall_metadata_1pct", {"metadata": {"tag": "rare"}}),
        ("recall_window_1pct", window),
    ):
        latencies = [
            (await client.timed("memory::recall", {**plain, "query": q, **extra}))[0]
            for q in queries
        ]
        figures[name] = percentiles(latencies)
    started = time.perf_counter()
    listed, cursor = 0, None
    while True:
        body = {**plain, "limit": PAGE, **({"cursor": cursor} if cursor else {})}
        _, reply = await client.timed("memory::list", body)
        listed += len(reply["memories"])
        cursor = reply["nextCursor"]
        if cursor is None:
            break
    seconds = time.perf_counter() - started
    figures["list"] = {"memories": listed, "per_second": round(listed / max(seconds, 1e-9))}
    return figures


def filtered_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    if "filtered" not in results:
        return []
    figure = results["filtered"]
    base = figure["recall"]["p50_ms"]

    def row(name: str) -> str:
        p50 = figure[name]["p50_ms"]
        return f"{p50} / {figure[name]['p99_ms']} ({round(p50 / max(base, 1e-9), 2)}x)"

    return [
        (f"recall p50 / p99 ms, {figure['memories']} memories, no filter", f"{base} / "
         f"{figure['recall']['p99_ms']}"),
        ("recall p50 / p99 ms, metadata filter passing 1%", row("recall_metadata_1pct")),
        ("recall p50 / p99 ms, time window passing 1%", row("recall_window_1pct")),
        (f"memory::list memories per second ({figure['list']['memories']} in pages of {PAGE})",
         figure["list"]["per_second"]),
    ]  # fmt: skip
