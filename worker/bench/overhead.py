"""What the Python client costs per call: the same request sent as pre-encoded bytes with a
raw nats-py `nc.request`, and through a MemoryClient method (encode the struct, request,
check for an error reply, decode the reply struct), on one connection to the same worker.

The two are timed in alternation, so that a worker that warms up or a machine that gets busy
weighs on both alike.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from schema.life import GetRequest
from schema.memory import RecallRequest, StoreRequest
from worker.bench.client import percentiles
from worker.bench.corpus import Corpus
from worker.client import MemoryClient
from worker.config import load_config

CLIENT_AGENT = "bench-client"
MEMORIES = 50


async def measure_client_overhead(
    url: str, prefix: str, calls: int, tenant: str | None
) -> dict[str, Any]:
    """p50 and p99 of raw requests and client calls for memory::get of one id and
    memory::recall on an agent of MEMORIES memories, and the client's overhead per call."""
    config = load_config({}, nats_url=url, subject_prefix=prefix)
    extra: dict[str, Any] = {} if tenant is None else {"tenant": tenant}
    corpus = Corpus(seed=7)
    async with await MemoryClient.connect(url, config=config, timeout=60.0) as memory:
        ids = [
            (await memory.store(StoreRequest(agent_id=CLIENT_AGENT, content=text, **extra))).id
            for text in (corpus.text(8, 30) for _ in range(MEMORIES))
        ]
        assert isinstance(ids[0], str)
        get = GetRequest(agent_id=CLIENT_AGENT, ids=[ids[0]], **extra)
        recall = RecallRequest(agent_id=CLIENT_AGENT, query=corpus.text(3, 5), **extra)
        figures: dict[str, Any] = {"calls": calls}
        for name, trigger, request, method in (
            ("get", "memory::get", get, memory.get),
            ("recall", "memory::recall", recall, memory.recall),
        ):
            figures[name] = await _compare(memory, memory.subjects[trigger], request, method, calls)
    return figures


async def _compare(
    memory: MemoryClient,
    subject: str,
    request: Any,
    method: Callable[[Any], Awaitable[Any]],
    calls: int,
) -> dict[str, Any]:
    body = msgspec.json.encode(request)
    raw_ms: list[float] = []
    client_ms: list[float] = []
    for _ in range(max(10, calls // 10)):  # warm both paths up
        await memory.nc.request(subject, body, timeout=60.0)
        await method(request)
    for _ in range(calls):
        started = time.perf_counter()
        await memory.nc.request(subject, body, timeout=60.0)
        raw_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await method(request)
        client_ms.append((time.perf_counter() - started) * 1000)
    raw, client = percentiles(raw_ms), percentiles(client_ms)
    return {
        "raw": raw,
        "client": client,
        "overhead_us": round((client["p50_ms"] - raw["p50_ms"]) * 1000, 1),
        "ratio": round(client["p50_ms"] / raw["p50_ms"], 3) if raw["p50_ms"] else None,
    }


def client_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    if "client_overhead" not in results:
        return []
    figures = results["client_overhead"]
    rows: list[tuple[str, Any]] = []
    for name, trigger in (("get", "memory::get of one id"), ("recall", "memory::recall")):
        part = figures[name]
        rows.append(
            (
                f"{trigger}: raw nats-py p50 / p99 ms",
                f"{part['raw']['p50_ms']} / {part['raw']['p99_ms']}",
            )
        )
        rows.append(
            (
                f"{trigger}: MemoryClient p50 / p99 ms",
                f"{part['client']['p50_ms']} / {part['client']['p99_ms']}",
            )
        )
        rows.append(
            (
                f"{trigger}: client overhead p50 us (ratio)",
                f"{part['overhead_us']} ({part['ratio']})",
            )
        )
    return rows
