"""memory::stats, `memory-worker stats` and `$SRV.STATS` count a known number of requests."""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import msgspec
import nats
from nats.micro.service import Endpoint, EndpointConfig, Service

from tests.conftest import worker_config
from tests.support import Client
from tests.test_cli import free_port
from worker.app import App
from worker.bus import MICRO_ENDPOINT_COUNTERS, MICRO_STATS_PATCHED_FOR


async def test_stats_count_requests_errors_and_contents(client: Client, worker: App) -> None:
    for index in range(7):
        await client.store("a" if index < 5 else "b", f"note {index}", sessionId="s")
    await client.recall("a", "note")
    await client.call("memory::recall", {"agentId": "a", "limit": 0})
    stats = await client.ok("memory::stats")
    assert stats["triggers"]["memory::store"]["requests"] == 7
    assert stats["triggers"]["memory::store"]["errors"] == 0
    assert stats["triggers"]["memory::recall"] == {
        "requests": 2,
        "errors": 1,
        "meanMs": stats["triggers"]["memory::recall"]["meanMs"],
    }
    assert stats["memories"] == 7 and stats["agents"] == 2 and stats["sessions"] == 2
    assert stats["memoriesWithoutVector"] == 7  # the tests' embedder is `none`
    assert stats["databaseBytes"] > 0 and stats["inFlight"] == 1


async def test_micro_stats_count_errors_and_processing_time(client: Client, worker: App) -> None:
    await client.store("a", "one")
    await client.call("memory::store", {"agentId": "a"})
    msg = await client.nc.request("$SRV.STATS.memory", b"", timeout=5)
    endpoints = {e["name"]: e for e in msgspec.json.decode(msg.data)["endpoints"]}
    store = endpoints["store"]
    assert store["num_requests"] == 2 and store["num_errors"] == 1
    assert store["processing_time"] > 0 and "400" in store["last_error"]
    assert endpoints["recall"]["num_requests"] == 0


async def test_stats_command_prints_a_table_or_json(nats_url: str, client: Client) -> None:
    await client.store("a", "one")
    command = [sys.executable, "-m", "worker", "stats", "--nats-url", nats_url]
    table = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    assert table.returncode == 0, table.stderr
    assert "memory::store" in table.stdout and "memories" in table.stdout
    raw = await asyncio.to_thread(
        subprocess.run, [*command, "--json"], capture_output=True, text=True
    )
    assert json.loads(raw.stdout)["memories"] == 1


async def test_metrics_endpoint_counts_requests_and_contents(nats_url: str, tmp_path: Path) -> None:
    app = App(worker_config(nats_url, tmp_path / "memory.db", metrics_port=free_port()))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        for index in range(3):
            await client.store("a", f"metric {index}")
        await client.call("memory::recall", {"agentId": "a", "limit": 0})
        assert app.metrics is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", app.metrics.port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        response = (await reader.read()).decode()
        writer.close()
    finally:
        await nc.close()
        await app.stop()
    assert response.startswith("HTTP/1.1 200")
    assert 'memory_worker_requests_total{trigger="memory::store"} 3' in response
    assert (
        'memory_worker_errors_total{trigger="memory::recall",code="invalid_request"} 1' in response
    )
    assert 'memory_worker_request_duration_seconds_count{trigger="memory::store"} 3' in response
    assert "memory_worker_memories 3" in response
    assert "memory_worker_agents 1" in response
    assert "memory_worker_audit_events 3" in response  # the three stores
    assert "memory_worker_memories_pinned 0" in response
    assert 'memory_worker_tenant_memories{tenant=""} 3' in response


async def test_stats_show_each_maintenance_jobs_last_run_with_source_and_counts(
    nats_url: str, tmp_path: Path
) -> None:
    """memory::stats gives each maintenance job's last run (when, source, the reply's counts),
    also for a job the schedule does not run, and `memory-worker stats` prints it."""
    config = worker_config(nats_url, tmp_path / "memory.db", evict_cron="0 3 * * *")
    app = App(config)
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        before = (await client.ok("memory::stats"))["schedule"]
        assert before["evict"]["lastRun"] is None and "consolidate" not in before
        await client.store("a", "old", importance=0.1, timestamp=1_000)
        await app._fire("memory::evict", b"{}")
        await client.ok("memory::consolidate", {"decayRate": 0.5})
        schedule = (await client.ok("memory::stats"))["schedule"]
        command = [sys.executable, "-m", "worker", "stats", "--nats-url", nats_url]
        table = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    finally:
        await nc.close()
        await app.stop()
    evict, consolidate = schedule["evict"], schedule["consolidate"]
    assert evict["cron"] == "0 3 * * *" and evict["lastRun"]["source"] == "schedule"
    counts = {"evicted": 1, "purged": 0, "stale": 1, "lowConfidence": 0, "overCap": 0}
    assert evict["lastRun"]["counts"] == counts
    assert evict["lastRun"]["dryRun"] is False and evict["lastRun"]["at"] > 0
    assert consolidate["cron"] == "" and consolidate["lastRun"]["source"] == "bus"
    assert consolidate["lastRun"]["counts"] == {"memoriesDecayed": 0, "memoriesMerged": 0}
    assert "evicted=1 purged=0 stale=1" in table.stdout and "memoriesDecayed=0" in table.stdout


def test_the_micro_stats_patch_is_for_the_installed_nats_py() -> None:
    """count_in_micro_stats writes nats.micro's private endpoint counters; another nats-py
    release, or a counter renamed, fails here before $SRV.STATS silently goes wrong."""
    installed = importlib.metadata.version("nats-py")
    assert installed == MICRO_STATS_PATCHED_FOR, (
        f"nats-py {installed} is installed, count_in_micro_stats was checked against "
        f"{MICRO_STATS_PATCHED_FOR}: re-read nats/micro/service.py (Endpoint's counters, "
        "Service._endpoints, whether the public API now allows it), then update "
        "MICRO_STATS_PATCHED_FOR in worker/bus.py"
    )

    async def handler(request: Any) -> None:
        return None

    endpoint = Endpoint(cast(Any, None), EndpointConfig(name="probe", handler=handler))
    missing = [name for name in MICRO_ENDPOINT_COUNTERS if not hasattr(endpoint, name)]
    assert not missing, f"nats.micro's Endpoint lost {missing}: re-check count_in_micro_stats"
    assert "self._endpoints" in inspect.getsource(Service.__init__)
