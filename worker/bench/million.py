"""`memory-worker bench --million N`: one agent of N memories reached the way users reach it.

Three paths, each `--runs` times on a fresh file, with the NATS echo measured in the same run:
- `bus`: N memories stored through `memory.store` (64 in flight), the worker stopped (SIGTERM,
  or SIGKILL with `--million-stop kill`), started again, then recalled: the first recall after
  the restart, then sequential recalls (p50/p99) and the worker's RSS;
- `first-start`: N memories written straight into a file (worker/bench/synthetic.py), so that no
  snapshot of the agent exists, then a worker started on it: its first recall (which waits for
  whatever the index does about a large agent without a snapshot) and the recalls after it;
- `growth`: the same file opened from the agent's snapshot (a first start, a recall and a clean
  stop write it), then `--rate` stores a second for `--duration` seconds while a recall runs
  every 0.2 s: the recall p50 before, in each minute of the growth, and after.
Keywords only by default (`--embedder none`); `--embedder bus` gives 384-d vectors from the stub
`embedding.generate` (worker/bench/synthetic.py). The worker under test runs as a process of its
own, from `--worker-tree` when given (another checkout, for before/after figures); the same
tree then measures in-process (worker/bench/million_inprocess.py): the index's load or open and
the ranking alone, without the bus.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
from worker.bench.index_memory import rss_mb
from worker.bench.million_inprocess import in_process
from worker.bench.synthetic import Texts, fill
from worker.embedded import EmbeddedServer

AGENT = "bench-agent"
PATHS = ("bus", "first-start", "growth")
CHUNK = 10_000  # stores sent per `many` call (their replies are let go of between chunks)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--million", type=int, metavar="N",
        help="only one agent of N memories reached as users reach it: stored over the bus then "
        "a restart, a first start without a snapshot, growth after a restart (--million-paths)",
    )  # fmt: skip
    parser.add_argument(
        "--million-paths", default=",".join(PATHS), help=f"with --million: of {', '.join(PATHS)}"
    )
    parser.add_argument(
        "--million-stop", choices=["term", "kill"], default="term",
        help="with --million: how the worker stops after the stores (kill: SIGKILL)",
    )  # fmt: skip
    parser.add_argument("--rate", type=int, default=500, help="with --million: growth stores/s")
    parser.add_argument("--duration", type=float, default=600.0, help="with --million: growth s")
    parser.add_argument("--worker-tree", help="with --million: run the worker from this checkout")
    parser.add_argument(
        "--million-from", metavar="FILE",
        help="with --million: first-start and growth copy this file (its snapshots left out) "
        "instead of writing one (e.g. a file of a million stored over the bus)",
    )  # fmt: skip


class Worker:
    """A worker process on the bench's file, started from `tree` (None: this checkout)."""

    def __init__(self, env: dict[str, str], tree: str | None) -> None:
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "worker", "run"], env=env, cwd=tree, stdin=subprocess.DEVNULL
        )

    async def ready(self, nc: Any, timeout: float = 600.0) -> float:
        """Seconds from the spawn until the service answers its ping."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                await nc.request("$SRV.PING.memory", b"", timeout=1.0)
                return time.perf_counter() - self.started
            except Exception:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("the worker did not start") from None
                await asyncio.sleep(0.1)

    def rss(self, field: str = "VmRSS") -> float:
        return rss_mb(self.process.pid, field)

    def stop(self, *, kill: bool = False) -> float:
        """Seconds from the signal until the process ended."""
        started = time.perf_counter()
        self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        self.process.wait(timeout=600)
        return round(time.perf_counter() - started, 2)


async def echo_p50(nc: Any, count: int) -> float:
    client = BenchClient(nc)
    samples = [(await client.timed_at("bench.echo", {"x": 1}))[0] for _ in range(count)]
    return percentiles(samples)["p50_ms"]


async def recalls(client: BenchClient, queries: list[str]) -> dict[str, Any]:
    """The first recall, then each query once in turn: ms, p50/p99."""
    payloads = [{"agentId": AGENT, "query": query} for query in queries]
    first_ms, first = await client.timed("memory::recall", payloads[0])
    timed = [(await client.timed("memory::recall", p))[0] for p in payloads[1:]]
    return {"first_recall_ms": round(first_ms, 1), "recalled": len(first["memories"]),
            **percentiles(timed)}  # fmt: skip


async def store_over_bus(
    client: BenchClient, worker: Worker, count: int, seed: int = 7
) -> tuple[float, float]:
    """Stores per second of `count` memories at 64 in flight, and the worker's highest RSS
    since it started (VmHWM: samples between chunks missed peaks that lasted a second)."""
    texts = Texts(seed)
    started = time.perf_counter()
    for start in range(0, count, CHUNK):
        batch = texts.many(min(CHUNK, count - start), 8, 40)
        payloads = [{"agentId": AGENT, "content": text} for text in batch]
        await client.many("memory::store", payloads, concurrency=64)
    return round(count / (time.perf_counter() - started)), worker.rss("VmHWM")


async def paced_growth(
    client: BenchClient, queries: list[str], rate: int, duration: float
) -> dict[str, Any]:
    """`rate` stores a second for `duration` s, each of a text not stored before (a repeated
    one would be deduplicated: the agent would not grow), and a recall every 0.2 s meanwhile:
    recall p50 in each minute (and each half minute), the stores made and the time they took."""
    texts, limit = Texts(13), asyncio.Semaphore(64)
    pending: set[asyncio.Task[Any]] = set()

    async def store(text: str) -> None:
        async with limit:
            await client.timed("memory::store", {"agentId": AGENT, "content": text})

    async def storing() -> int:
        sent, started, batch = 0, time.monotonic(), texts.many(rate, 8, 40)
        while (elapsed := time.monotonic() - started) < duration:
            while sent < int(elapsed * rate):
                if sent and sent % rate == 0:  # new texts: a repeated one is deduplicated
                    batch = texts.many(rate, 8, 40)
                task = asyncio.create_task(store(batch[sent % rate]))
                pending.add(task)
                task.add_done_callback(pending.discard)
                sent += 1
            await asyncio.sleep(0.01)
        await asyncio.gather(*pending)
        return sent

    started = time.monotonic()
    growing = asyncio.create_task(storing())
    halves: dict[int, list[float]] = {}
    at = 0
    while not growing.done():
        query = {"agentId": AGENT, "query": queries[at % len(queries)]}
        at += 1
        ms, _ = await client.timed("memory::recall", query)
        halves.setdefault(int((time.monotonic() - started) // 30), []).append(ms)
        await asyncio.sleep(0.2)
    sent = await growing
    every = [ms for found in halves.values() for ms in found]
    return {
        "stored": sent,
        "stores_per_second": round(sent / (time.monotonic() - started)),
        "p50_by_minute": [
            percentiles(halves.get(2 * m, []) + halves.get(2 * m + 1, []))["p50_ms"]
            for m in range(1 + max(halves, default=0) // 2)
        ],
        "p50_by_half_minute": [percentiles(found)["p50_ms"] for _, found in sorted(halves.items())],
        **percentiles(every),
    }


async def one_run(
    path_name: str, url: str, env: dict[str, str], args: argparse.Namespace
) -> dict[str, Any]:
    queries = Texts(seed=99).many(args.recalls + 1, 3, 6)
    nc = await nats.connect(url)
    client = BenchClient(nc, timeout=900.0)
    db_path = Path(env["MEMORY_WORKER_DB_PATH"])
    found: dict[str, Any] = {}
    try:
        if path_name != "bus":
            started = time.perf_counter()
            if args.million_from:
                copy_file(Path(args.million_from), db_path)
            else:
                fill(db_path, AGENT, args.million, vectors=args.embedder == "bus",
                     now=int(time.time() * 1000))  # fmt: skip
            found["fill_s"] = round(time.perf_counter() - started, 1)
        if path_name == "bus":
            worker = Worker(env, args.worker_tree)
            await worker.ready(nc)
            rate, highest = await store_over_bus(client, worker, args.million)
            found["stores_per_second"], found["rss_storing_mb"] = rate, highest
            if args.embedder == "bus":
                found["without_vector"] = await client.wait_for_vectors(stall_s=60.0)
            found["stop_s"] = worker.stop(kill=args.million_stop == "kill")
        elif path_name == "growth":  # a first start and a recall write the snapshot
            worker = Worker(env, args.worker_tree)
            await worker.ready(nc)
            first = await recalls(client, queries[:2])
            found["no_snapshot_first_recall_ms"] = first["first_recall_ms"]
            found["snapshot_s"] = await snapshot_written(db_path)
            found["first_stop_s"] = worker.stop()
        found["snapshot_before_start"] = any(Path(f"{db_path}.index").glob("[!.]*"))
        worker = Worker(env, args.worker_tree)
        found["start_s"] = round(await worker.ready(nc), 2)
        found["rss_start_mb"] = worker.rss()
        found.update(await recalls(client, queries))
        found["echo_p50_ms"] = await echo_p50(nc, args.echo)
        found["rss_mb"] = worker.rss()
        if path_name == "growth":
            found["growth"] = await paced_growth(client, queries, args.rate, args.duration)
            after = await recalls(client, queries)
            found["after_p50_ms"], found["after_p99_ms"] = after["p50_ms"], after["p99_ms"]
            found["rss_after_mb"] = worker.rss()
        found["stop_s"] = worker.stop()
        found["in_process"] = in_process(
            db_path, args.worker_tree, queries, vectors=args.embedder == "bus",
            from_sqlite=path_name == "first-start",
        )  # fmt: skip
        return found
    finally:
        await nc.close()


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    paths = [name for name in args.million_paths.split(",") if name]
    results: dict[str, Any] = {"memories": args.million, "embedder": args.embedder}
    with tempfile.TemporaryDirectory(prefix="memory-million-") as scratch:
        server = EmbeddedServer(port=_free_port(), store_dir=Path(scratch) / "nats")
        await server.start()
        env = {
            **os.environ,
            "MEMORY_WORKER_NATS_URL": server.url,
            "MEMORY_WORKER_CONSOLIDATE_CRON": "",
            "MEMORY_WORKER_EVICT_CRON": "",
            "MEMORY_WORKER_LOG_LEVEL": "warning",
            "MEMORY_WORKER_EMBEDDER": args.embedder,
        }
        helpers = [subprocess.Popen([sys.executable, "-m", "worker.bench.echo", server.url])]
        if args.embedder == "bus":
            stub = [sys.executable, "-m", "worker.bench.synthetic", server.url]
            helpers.append(subprocess.Popen(stub))
        try:
            for name in paths:
                runs = []
                for run in range(args.runs):
                    run_env = {**env, "MEMORY_WORKER_DB_PATH": f"{scratch}/{name}-{run}.db"}
                    runs.append(await one_run(name, server.url, run_env, args))
                    print(json.dumps({name: runs[-1]}), file=sys.stderr, flush=True)
                    _remove(Path(run_env["MEMORY_WORKER_DB_PATH"]))
                results[name] = runs
        finally:
            for helper in helpers:
                helper.send_signal(signal.SIGTERM)
                helper.wait(timeout=20)
            server.stop()
    return results


async def snapshot_written(db_path: Path, timeout: float = 1800.0) -> float:
    """Seconds until the agent's snapshot is on disk (a large agent's load from SQLite goes on
    after the recalls that a stand-in answered)."""
    started = time.monotonic()
    while not any(Path(f"{db_path}.index").glob("[!.]*-*")):
        if time.monotonic() - started > timeout:
            raise RuntimeError("no snapshot written")
        await asyncio.sleep(0.5)
    return round(time.monotonic() - started, 1)


def copy_file(source: Path, target: Path) -> None:
    """A consistent copy of a database file (SQLite's backup, whoever writes it meanwhile)."""
    import apsw

    into, source_conn = apsw.Connection(str(target)), apsw.Connection(str(source))
    try:
        with into.backup("main", source_conn, "main") as backup:
            while not backup.done:
                backup.step(-1)
    finally:
        source_conn.close()
        into.close()


def _remove(db_path: Path) -> None:
    """A run's file and its snapshots: a million memories take a GB or two of disk."""
    import shutil

    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(f"{db_path}.index", ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
