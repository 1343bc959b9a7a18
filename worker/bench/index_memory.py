"""`bench --index-memory N`: does the recall index's memory budget hold with many small agents?

N agents of one memory each (384-d vectors from the stub `embedding.generate` of
worker/bench/synthetic.py, over the bus as users store them) are stored, then each is recalled
once, so that every one is loaded into the index, which keeps them within
`MEMORY_WORKER_INDEX_MEMORY_MB` (`--budget`, least recently used agents leaving). The worker's
RSS is read after those recalls, after the index saver has written the snapshots it writes
(`<file>.index/` holds no more directories for two checks of the saver), and after a further
idle wait. The worker runs as a process of its own; its RSS before the first store is the
fixed overhead (the interpreter, numpy, the model-less embedder, the bus).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

from worker.bench.client import BenchClient
from worker.embedded import EmbeddedServer

SAVER_CHECK_S = 6.0  # a little more than the saver's own CHECK_S


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """The process's RSS now, or with `VmHWM` the highest it has had (a peak that lasted less
    than a second between two samples included)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no {field} for {pid}")


def snapshots(db_path: Path) -> int:
    """The agents' snapshot directories written so far, or -1 while one is being written."""
    root = Path(f"{db_path}.index")
    if not root.is_dir():
        return 0
    names = [path.name for path in root.iterdir()]
    return -1 if any(name.startswith(".tmp-") for name in names) else len(names)


async def until_saved(db_path: Path, timeout: float = 600.0) -> int:
    """Until the saver has written what it will: the same count of snapshots, none in the
    making, two checks of the saver apart."""
    deadline, last = time.monotonic() + timeout, -2
    while time.monotonic() < deadline:
        await asyncio.sleep(SAVER_CHECK_S)
        found = snapshots(db_path)
        if found >= 0 and found == last:
            return found
        last = found
    raise RuntimeError("the index saver did not settle in time")


async def _wait_for_service(nc: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            await nc.request("$SRV.PING.memory", b"", timeout=1.0)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _run_once(url: str, env: dict[str, str], agents: int, idle_s: float) -> dict[str, Any]:
    worker = subprocess.Popen([sys.executable, "-m", "worker", "run"], env=env)
    nc = await nats.connect(url)
    try:
        await _wait_for_service(nc)
        client = BenchClient(nc, timeout=300.0)
        figures: dict[str, Any] = {"rss_start_mb": rss_mb(worker.pid)}
        names = [f"small-{n:06d}" for n in range(agents)]
        stores = [{"agentId": name, "content": f"note {n} about the deploy"} for n, name in
                  enumerate(names)]  # fmt: skip
        await client.many("memory::store", stores, concurrency=64)
        figures["without_vector"] = await client.wait_for_vectors()
        figures["rss_stored_mb"] = rss_mb(worker.pid)
        recalls = [{"agentId": name, "query": "the deploy note"} for name in names]
        replies, _, _ = await client.many("memory::recall", recalls, concurrency=16)
        if any(len(reply["memories"]) != 1 for reply in replies):
            raise RuntimeError("an agent did not recall its one memory")
        figures["rss_loaded_mb"] = rss_mb(worker.pid)
        figures["snapshots"] = await until_saved(Path(env["MEMORY_WORKER_DB_PATH"]))
        figures["rss_saved_mb"] = rss_mb(worker.pid)
        await asyncio.sleep(idle_s)
        figures["rss_idle_mb"] = rss_mb(worker.pid)
        _, stats = await client.timed("memory::stats", {})
        figures["agents_loaded"] = stats.get("indexAgents")
        return figures
    finally:
        await nc.close()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=120)


async def measure(
    agents: int, budget_mb: int, *, runs: int = 3, idle_s: float = 20.0
) -> dict[str, Any]:
    """`runs` fresh workers (each on a new file) through the scenario; every run's figures."""
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as scratch:
        server = EmbeddedServer(port=_free_port(), store_dir=Path(scratch) / "nats")
        await server.start()
        base = {
            **os.environ,
            "MEMORY_WORKER_NATS_URL": server.url,
            "MEMORY_WORKER_EMBEDDER": "bus",
            "MEMORY_WORKER_CONSOLIDATE_CRON": "",
            "MEMORY_WORKER_EVICT_CRON": "",
            "MEMORY_WORKER_LOG_LEVEL": "warning",
            "MEMORY_WORKER_INDEX_MEMORY_MB": str(budget_mb),
        }
        stub = subprocess.Popen([sys.executable, "-m", "worker.bench.synthetic", server.url])
        try:
            for run in range(runs):
                env = {**base, "MEMORY_WORKER_DB_PATH": str(Path(scratch) / f"run{run}.db")}
                results.append(await _run_once(server.url, env, agents, idle_s))
        finally:
            stub.send_signal(signal.SIGTERM)
            stub.wait(timeout=20)
            server.stop()
    return {"agents": agents, "budget_mb": budget_mb, "runs": results}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--index-memory", type=int, metavar="N",
        help="only the index's memory budget: N agents of one memory with vectors, budget "
        "--budget MB; RSS after loading them, after the index saver, idle (medians of --runs)",
    )  # fmt: skip
    parser.add_argument("--budget", type=int, default=512, help="with --index-memory: MB")
    parser.add_argument(
        "--runs", type=int, default=3, help="with --index-memory, --stores, --million"
    )
    parser.add_argument(
        "--idle", type=float, default=20.0, help="with --index-memory: seconds idle after the saver"
    )


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    runs = results["runs"]
    found: list[tuple[str, Any]] = [
        ("agents of one memory (384-d vectors), budget MB", f"{results['agents']}, "
         f"{results['budget_mb']}"),
    ]  # fmt: skip
    for name, label in (
        ("rss_start_mb", "RSS at start MB"),
        ("rss_stored_mb", "RSS after the stores MB"),
        ("rss_loaded_mb", "RSS after every agent's recall (loaded) MB"),
        ("rss_saved_mb", "RSS after the index saver MB"),
        ("rss_idle_mb", "RSS idle MB"),
    ):
        values = [run[name] for run in runs]
        runs_text = ", ".join(map(str, values))
        found.append((f"{label}: median (runs)", f"{median(values)} ({runs_text})"))
    found.append(("snapshots written; agents loaded at the end",
                  f"{runs[-1]['snapshots']}; {runs[-1]['agents_loaded']}"))  # fmt: skip
    return found
