"""What the memory browser's pages cost on the server (`python -m worker.bench.browser`): the
agent page (20 memories shown) for an agent of 100 000 memories, and the agents page when the
tenant has 10 000 agents, each the median of many requests, beside the one trigger call each
page is built on (memory::list, memory::agents) measured in the same run.

The memories are written straight into the file (worker/bench/synthetic.py); a worker serves it
on an embedded nats-server, and the browser's application runs in this process, asked through
httpx2's ASGI transport: a page's time is from request to the last byte of its HTML, the
worker's round trip over NATS included, the network to a person's browser not.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2

from schema.agents import AgentsRequest
from schema.life import ListRequest
from worker.app import App
from worker.bench.synthetic import fill
from worker.client import MemoryClient
from worker.config import load_config
from worker.embedded import EmbeddedServer
from worker.ui.access import Sessions
from worker.ui.server import Link, make_app

NOW = 1_795_000_000_000
BIG = "zz-big"  # listed after the small agents: the agents page's first page is theirs


def small_agents(db: Path, agents: int) -> None:
    from worker.db import open_db

    conn = open_db(db, synchronous="normal")
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO memories (id, agent_id, role, content, hash, importance, confidence, "
        "last_accessed, timestamp, created_at) VALUES (?, ?, 'user', ?, ?, 0.5, 1, ?, ?, ?)",
        (
            (f"s{k:06d}", f"agent-{k:05d}", f"memory {k}", f"s{k}", NOW - k, NOW - k, NOW - k)
            for k in range(agents)
        ),
    )
    conn.execute("COMMIT")
    conn.close()


async def median_ms(call: Callable[[], Awaitable[Any]], runs: int) -> float:
    await call()  # warm
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


async def measure(memories: int = 100_000, agents: int = 10_000, runs: int = 31) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memory-bench-ui-") as scratch:
        db = Path(scratch) / "memory.db"
        fill(db, BIG, memories, vectors=False, now=NOW)
        small_agents(db, agents)
        server = EmbeddedServer(port=_free_port(), store_dir=Path(scratch) / "nats")
        await server.start()
        config = load_config(
            {}, nats_url=server.url, db_path=str(db), embedder="none", log_level="warning",
            evict_cron="", consolidate_cron="",
        )  # fmt: skip
        app = App(config)
        await app.start()
        try:
            async with await MemoryClient.connect(server.url, config=config) as client:
                ui = make_app(Link.of(client), Sessions(None))
                transport = httpx2.ASGITransport(app=ui)
                async with httpx2.AsyncClient(transport=transport, base_url="http://l") as http:
                    agent_page = await http.get("/agent", params={"agent": BIG})
                    assert agent_page.text.count('<article class="memory') == 20
                    first = await http.get("/")
                    assert first.text.count('href="/agent?agent=agent-') == 50

                    async def page(path: str, **params: str) -> None:
                        answer = await http.get(path, params=params)
                        assert answer.status_code == 200

                    async def listing() -> None:
                        await client.list_memories(ListRequest(agent_id=BIG, limit=20))

                    async def agents_call() -> None:
                        await client.agents(AgentsRequest(limit=50))

                    figures = {
                        "agent_page_ms": await median_ms(lambda: page("/agent", agent=BIG), runs),
                        "memory_list_ms": await median_ms(listing, runs),
                        "agents_page_ms": await median_ms(lambda: page("/"), runs),
                        "memory_agents_ms": await median_ms(agents_call, runs),
                        "agents_page_with_big_agent_ms": await median_ms(
                            lambda: page("/", prefix="zz"), runs
                        ),
                    }
        finally:
            await app.stop()
            server.stop()
    return {"memories": memories, "agents": agents, "runs": runs, **figures}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    sizes = [int(arg) for arg in sys.argv[1:3]]
    print(json.dumps(asyncio.run(measure(*sizes))))
