"""`memory-worker bench --scale 100000,300000,1000000`: recall in one agent of N memories.

For each N the agent is written straight into a fresh file (worker/bench/synthetic.py), then a
worker is started on it three times: keywords only (`--embedder none`) twice, the second start
being the restart whose first recall is reported, and once with vectors (the stub embedder on
the bus, 384-d) twice more: with the vector index forced on (MEMORY_WORKER_VECTOR_INDEX=codes)
and forced off (`exact`). Each start reports its first recall, recall p50/p99 over sequential
recalls, recalls per second with 16 in flight, and the worker's RSS (and its growth from before
the first recall, per memory); the two runs with vectors also give the index's recall@10
against exact: the share of the exact top 10 that the index returned, per query, averaged over
the sequential recalls (the two runs are minutes apart, so recency moves a little between them:
a near tie may flip and count as a miss). The first start loads the agent from SQLite and
writes its snapshot beside the file (worker/recall_index/persist.py); the restarts open it.
"""

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
from worker.bench.synthetic import Texts, fill

AGENT = "bench-agent"


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def wait_for_service(nc: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            await nc.request("$SRV.PING.memory", b"{}", timeout=1.0)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise RuntimeError("the worker did not answer in time") from None
            await asyncio.sleep(0.1)


async def measure_start(
    url: str, env: dict[str, str], queries: list[str], *, recalls: int
) -> dict[str, Any]:
    """Start a worker on the file, time its first recall, then the steady figures."""
    worker = subprocess.Popen([sys.executable, "-m", "worker", "run"], env=env)
    nc = await nats.connect(url)
    try:
        await wait_for_service(nc)
        rss_before = _rss_mb(worker.pid)
        client = BenchClient(nc, timeout=300.0)
        payloads = [{"agentId": AGENT, "query": q} for q in queries]
        first_ms, _ = await client.timed("memory::recall", payloads[0])
        sequential = [await client.timed("memory::recall", p) for p in payloads[:recalls]]
        _, _, seconds = await client.many("memory::recall", payloads, concurrency=16)
        return {
            "first_recall_ms": round(first_ms, 1),
            **percentiles([ms for ms, _ in sequential]),
            "per_second_16_in_flight": round(len(payloads) / seconds),
            "rss_mb": _rss_mb(worker.pid),
            "rss_before_mb": rss_before,
            "top10": [[m["id"] for m in reply["memories"]] for _, reply in sequential],
        }
    finally:
        await nc.close()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=120)


async def measure_scale(
    url: str, base_env: dict[str, str], sizes: list[int], *, recalls: int
) -> list[dict[str, Any]]:
    queries = Texts(seed=99).many(4 * recalls, 3, 6)  # all of them 16 at a time
    results = []
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="memory-scale-") as scratch:
            path = Path(scratch) / "memory.db"
            started = time.perf_counter()
            fill(path, AGENT, size, vectors=True, now=int(time.time() * 1000))
            row: dict[str, Any] = {"memories": size, "fill_s": round(time.perf_counter() - started)}
            env = {**base_env, "MEMORY_WORKER_DB_PATH": str(path), "MEMORY_WORKER_EMBEDDER": "none"}
            row["keywords_first_start"] = await measure_start(url, env, queries, recalls=recalls)
            row["keywords"] = await measure_start(url, env, queries, recalls=recalls)
            stub = subprocess.Popen([sys.executable, "-m", "worker.bench.synthetic", url], env=env)
            try:
                env["MEMORY_WORKER_EMBEDDER"] = "bus"
                for mode in ("codes", "exact"):
                    env["MEMORY_WORKER_VECTOR_INDEX"] = mode
                    found = await measure_start(url, env, queries, recalls=recalls)
                    row["vectors" if mode == "codes" else "vectors_exact"] = found
                row["index_recall@10"] = top10_recall(
                    row["vectors"].pop("top10"), row["vectors_exact"].pop("top10")
                )
            finally:
                stub.send_signal(signal.SIGTERM)
                stub.wait(timeout=20)
            for name in ("keywords_first_start", "keywords"):
                del row[name]["top10"]
            row["db_mb"] = round(os.path.getsize(path) / 2**20)
            cache = Path(f"{path}.index")
            files = [f for f in cache.rglob("*") if f.is_file()] if cache.is_dir() else []
            # Blocks on disk (the room for appends is a hole in each file).
            row["index_mb"] = round(sum(f.stat().st_blocks * 512 for f in files) / 2**20)
            results.append(row)
    return results


def top10_recall(found: list[list[str]], exact: list[list[str]]) -> float:
    """The mean share of each exact top 10 that the other ranking returned too."""
    shares = [
        len(set(ours) & set(wanted)) / len(wanted)
        for ours, wanted in zip(found, exact, strict=True)
        if wanted
    ]
    return round(sum(shares) / max(1, len(shares)), 4)


def scale_rows(results: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for found in results:
        size = f"{found['memories']:,}"
        rows.append((f"{size}: database MB (with vectors)", found["db_mb"]))
        rows.append((f"{size}: persisted index MB on disk (with vectors)", found["index_mb"]))
        for name, label in (
            ("keywords_first_start", "keywords, first start"),
            ("keywords", "keywords, restarted"),
            ("vectors", "with vectors, index (codes)"),
            ("vectors_exact", "with vectors, exact"),
        ):
            part = found[name]
            rows.append(
                (
                    f"{size}: {label}: first recall ms / p50 / p99 ms / per s (16) / RSS MB",
                    f"{part['first_recall_ms']} / {part['p50_ms']} / {part['p99_ms']} / "
                    f"{part['per_second_16_in_flight']} / {part['rss_mb']}",
                )
            )
            grown = (part["rss_mb"] - part["rss_before_mb"]) * 2**20 / found["memories"]
            rows.append((f"{size}: {label}: RSS bytes per memory (after - before)", round(grown)))
        rows.append((f"{size}: vector index recall@10 against exact", found["index_recall@10"]))
    return rows
