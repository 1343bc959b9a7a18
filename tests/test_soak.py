"""Soak: 32 concurrent clients of mixed load for two minutes, maintenance fired during it.

Marked slow; CI runs it. Set MEMORY_WORKER_SOAK_SECONDS to change the duration.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
import nats
import pytest

from tests.support import Client, wait_for_service
from worker.bench.command import rss_mb

CLIENTS = 32
SECONDS = float(os.environ.get("MEMORY_WORKER_SOAK_SECONDS", "120"))


async def client_loop(
    client: Client, number: int, deadline: float, acknowledged: dict[str, str], errors: list[str]
) -> int:
    chooser = random.Random(number)
    requests = 0
    agent = f"soak-agent-{number % 8}"
    while time.monotonic() < deadline:
        action = chooser.random()
        content = f"soak {number} {requests} {chooser.randrange(10**9)}"
        if action < 0.5:
            payload: dict[str, Any] = {"agentId": agent, "content": content, "importance": 0.9}
            if chooser.random() < 0.3:
                payload["sessionId"] = f"session-{number}"
            reply = await client.call("memory::store", payload)
            if reply.ok:
                acknowledged[content] = reply.body["id"]
        elif action < 0.9:
            reply = await client.call(
                "memory::recall", {"agentId": agent, "query": f"soak {number}", "limit": 10}
            )
        elif action < 0.97:
            reply = await client.call("memory::stats")
        else:
            reply = await client.call("memory::store", {"agentId": agent})  # refused on purpose
            if reply.code == "400":
                requests += 1
                continue
        if not reply.ok:
            errors.append(f"{reply.code}: {reply.description}")
        requests += 1
    return requests


@pytest.mark.slow(seconds=SECONDS)
@pytest.mark.timeout(SECONDS + 300)
async def test_mixed_load_for_two_minutes_has_no_errors_and_loses_nothing(
    nats_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "memory.db"
    env = {
        **os.environ,
        "MEMORY_WORKER_NATS_URL": nats_url,
        "MEMORY_WORKER_DB_PATH": str(db),
        "MEMORY_WORKER_EMBEDDER": "builtin",
        "MEMORY_WORKER_LOG_LEVEL": "warning",
    }
    worker = subprocess.Popen([sys.executable, "-m", "worker", "run"], env=env)
    nc = await nats.connect(nats_url)
    client = Client(nc)
    try:
        await wait_for_service(nc, timeout=30)
        rss_start = rss_mb(worker.pid)
        acknowledged: dict[str, str] = {}
        errors: list[str] = []
        deadline = time.monotonic() + SECONDS

        async def maintenance() -> int:
            fired = 0
            while time.monotonic() < deadline:
                await asyncio.sleep(SECONDS / 6)  # the load's shape: maintenance now and then
                for trigger in ("memory::evict", "memory::consolidate"):
                    reply = await client.call(trigger, {"minImportance": 0.5}
                                              if trigger == "memory::evict" else {})  # fmt: skip
                    if not reply.ok:
                        errors.append(f"{trigger} {reply.code}: {reply.description}")
                    fired += 1
            return fired

        counts = await asyncio.gather(
            maintenance(),
            *(client_loop(client, n, deadline, acknowledged, errors) for n in range(CLIENTS)),
        )
        rss_end = rss_mb(worker.pid)
    finally:
        await nc.close()
        worker.terminate()
        worker.wait(timeout=20)
    assert worker.returncode == 0
    conn = apsw.Connection(str(db))
    on_disk = {str(row[0]): row[1] for row in conn.execute("SELECT content, id FROM memories")}
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()
    lost = [c for c, memory_id in acknowledged.items() if on_disk.get(c) != memory_id]
    requests = sum(counts[1:])
    print(
        f"\nsoak: {SECONDS:.0f} s, {CLIENTS} clients, {requests} requests "
        f"({requests / SECONDS:.0f}/s), {len(errors)} errors, {counts[0]} maintenance runs, "
        f"{len(acknowledged)} stores acknowledged, {len(lost)} lost, "
        f"RSS {rss_start} -> {rss_end} MB"
    )
    assert errors == []
    assert lost == []
