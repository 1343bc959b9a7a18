"""`bench --sharded`: stores per second and recall p50 through 1, 2 and 3 shards on a loopback
3-node cluster (R3 logs, sync_interval: always), the time every agent takes to answer again
after one of 3 shards is killed with -9, and the cost of the log against single mode.

Every process shares this machine's cores: the cluster's three servers, every shard, and the
client. More shards cannot show more throughput here; they show what routing and the log cost,
and that nothing is lost. README "More than one machine" says how to read the figures."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

from worker.bench.client import BenchClient, percentiles
from worker.embedded import EmbeddedServer
from worker.shards.loopback import free_port, running_cluster

PARTITIONS = 16
AGENTS = [f"bench-agent-{n}" for n in range(64)]
STORES = 3000
IN_FLIGHT = 64
RECALLS = 300
LEASE_TTL = 10.0


def _env(**settings: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    return {
        **clean,
        "MEMORY_WORKER_EMBEDDER": "none",
        "MEMORY_WORKER_LOG_LEVEL": "warning",
        "MEMORY_WORKER_CONSOLIDATE_CRON": "",
        "MEMORY_WORKER_EVICT_CRON": "",
        **{f"MEMORY_WORKER_{key.upper()}": value for key, value in settings.items()},
    }


def _spawn(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "worker", "run"], env=env, stdin=subprocess.DEVNULL
    )


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


async def _answering(client: BenchClient, timeout: float) -> float:
    """Seconds until a recall of every agent succeeds."""
    started = time.monotonic()
    pending = set(AGENTS)
    while pending:
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{len(pending)} agents still unanswered after {timeout:g}s")
        for agent in sorted(pending):
            try:
                await client.timed("memory::recall", {"agentId": agent, "query": "note"})
            except Exception:
                continue
            pending.discard(agent)
        if pending:
            await asyncio.sleep(0.1)
    return round(time.monotonic() - started, 2)


async def _load(client: BenchClient) -> dict[str, Any]:
    stores = [
        {"agentId": AGENTS[n % len(AGENTS)], "content": f"note {n} about topic {n % 97}"}
        for n in range(STORES)
    ]
    _, latencies, seconds = await client.many("memory::store", stores, concurrency=IN_FLIGHT)
    recalls = []
    for n in range(RECALLS):
        body = {"agentId": AGENTS[n % len(AGENTS)], "query": f"topic {n % 97}"}
        recalls.append((await client.timed("memory::recall", body))[0])
    return {
        "stores_per_second": round(STORES / seconds),
        "store": percentiles(latencies),
        "recall": percentiles(recalls),
    }


async def _single(scratch: Path) -> dict[str, Any]:
    server = EmbeddedServer(port=free_port(), store_dir=scratch / "single-nats")
    await server.start()
    worker = _spawn(_env(nats_url=server.url, db_path=str(scratch / "single.db")))
    try:
        nc = await nats.connect(server.url)
        client = BenchClient(nc)
        await _answering(client, 60)
        figures = await _load(client)
        await nc.close()
        return figures
    finally:
        _stop([worker])
        server.stop()


async def _sharded(scratch: Path, shards: int, *, failover: bool) -> dict[str, Any]:
    async with running_cluster(scratch / f"cluster-{shards}", PARTITIONS) as cluster:
        processes = [
            _spawn(
                _env(
                    mode="sharded",
                    nats_url=cluster.urls,
                    shard_name=f"s{n}",
                    data_dir=str(scratch / f"shards-{shards}" / f"s{n}"),
                    partitions=str(PARTITIONS),
                    replicas="3",
                    lease_ttl=str(LEASE_TTL),
                )
            )
            for n in range(1, shards + 1)
        ]
        try:
            nc = await nats.connect(cluster.urls.split(","), max_reconnect_attempts=-1)
            client = BenchClient(nc, timeout=30.0)
            await _answering(client, 120)
            await asyncio.sleep(LEASE_TTL / 2)  # partitions handed to their first-ranked shards
            figures = await _load(client)
            if failover:
                processes[0].kill()
                processes[0].wait()
                figures["failover_s"] = await _answering(client, 6 * LEASE_TTL)
            await nc.close()
            return figures
        finally:
            _stop(processes)


async def measure_sharded() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memory-bench-sharded-") as scratch:
        root = Path(scratch)
        single = await _single(root)
        sharded = {str(n): await _sharded(root, n, failover=n == 3) for n in (1, 2, 3)}
    one = sharded["1"]["stores_per_second"]
    return {
        "partitions": PARTITIONS,
        "lease_ttl_s": LEASE_TTL,
        "single": single,
        "sharded": sharded,
        "log_cost": round(single["stores_per_second"] / max(1, one), 2),
    }


def sharded_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    single = results["single"]
    rows: list[tuple[str, Any]] = [
        ("partitions / lease TTL s", f"{results['partitions']} / {results['lease_ttl_s']}"),
        (
            "single mode: stores/s, recall p50 ms",
            f"{single['stores_per_second']}, {single['recall']['p50_ms']}",
        ),
    ]
    for count, figures in results["sharded"].items():
        rows.append(
            (
                f"{count} shard(s), R3 log: stores/s, store p50 ms, recall p50 ms",
                f"{figures['stores_per_second']}, {figures['store']['p50_ms']}, "
                f"{figures['recall']['p50_ms']}",
            )
        )
    rows.append(("every agent answers again after kill -9 of 1 of 3 shards, s",
                 results["sharded"]["3"]["failover_s"]))  # fmt: skip
    rows.append(("single-mode stores/s over 1 shard's", results["log_cost"]))
    return rows
