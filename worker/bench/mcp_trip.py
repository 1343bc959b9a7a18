"""The MCP server's round trip: `memory_search` called over stdio by the official SDK's client,
against the same recall sent with the Python client, on the agent the client overhead bench
filled (worker/bench/overhead.py)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from schema.memory import RecallRequest
from worker.bench.client import percentiles
from worker.bench.overhead import CLIENT_AGENT
from worker.client import MemoryClient
from worker.config import load_config

QUERY = "people market interest"


async def measure_mcp_round_trip(url: str, prefix: str, calls: int) -> dict[str, Any]:
    from mcp import Client, StdioServerParameters

    env = {
        **os.environ,
        "MEMORY_WORKER_SUBJECT_PREFIX": prefix,
        "MEMORY_WORKER_LOG_LEVEL": "warning",
    }
    command = ["-m", "worker", "mcp", "--agent", CLIENT_AGENT, "--nats-url", url, "--timeout", "60"]
    parameters = StdioServerParameters(command=sys.executable, args=command, env=env)
    arguments = {"query": QUERY, "limit": 5}
    tool_ms: list[float] = []
    async with Client(parameters, cache=None) as client:
        for _ in range(max(10, calls // 10)):
            await client.call_tool("memory_search", arguments)
        for _ in range(calls):
            started = time.perf_counter()
            result = await client.call_tool("memory_search", arguments)
            tool_ms.append((time.perf_counter() - started) * 1000)
            if result.is_error:
                raise RuntimeError(f"memory_search: {result.content}")
    config = load_config({}, nats_url=url, subject_prefix=prefix)
    request = RecallRequest(agent_id=CLIENT_AGENT, query=QUERY, limit=5)
    client_ms: list[float] = []
    async with await MemoryClient.connect(url, config=config, timeout=60.0) as memory:
        for _ in range(calls):
            started = time.perf_counter()
            await memory.recall(request)
            client_ms.append((time.perf_counter() - started) * 1000)
    tool, direct = percentiles(tool_ms), percentiles(client_ms)
    return {
        "calls": calls,
        "memory_search": tool,
        "client_recall": direct,
        "added_ms": round(tool["p50_ms"] - direct["p50_ms"], 3),
    }


def mcp_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    if "mcp" not in results:
        return []
    figures = results["mcp"]
    tool, direct = figures["memory_search"], figures["client_recall"]
    return [
        ("MCP memory_search over stdio p50 / p99 ms", f"{tool['p50_ms']} / {tool['p99_ms']}"),
        (
            "the same recall by MemoryClient p50 / p99 ms",
            f"{direct['p50_ms']} / {direct['p99_ms']}",
        ),
        ("MCP adds p50 ms", figures["added_ms"]),
    ]
