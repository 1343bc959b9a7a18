"""`bench --stores`: stores over the bus alone, at `--in-flight` stores in flight, and one at a
time, with the NATS echo measured in the same run.

Each of `--runs` runs starts a fresh worker on a fresh file (the defaults: sanitiser, audit,
write decisions, durable group commit), times `--memories` stores at `--in-flight`, then 300
stores one at a time (their p50 is the latency a lone caller sees); the figures printed are the
medians over the runs. `--embedder none` measures the write path without the model.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

from worker.bench.client import BenchClient, percentiles
from worker.bench.corpus import Corpus
from worker.embedded import EmbeddedServer

AGENT = "bench-agent"
SEQUENTIAL = 300


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stores",
        action="store_true",
        help="only stores over the bus: stores/s at --in-flight and p50 at 1 in flight, "
        "beside the NATS echo (medians of --runs fresh workers)",
    )
    parser.add_argument("--in-flight", type=int, default=64, help="with --stores: stores in flight")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _until_answered(nc: Any, subject: str, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            await nc.request(subject, b"{}", timeout=1.0)
            return
        except Exception:
            if loop.time() > deadline:
                raise RuntimeError(f"nothing answered on {subject} in time") from None
            await asyncio.sleep(0.2)


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """The process's user and system CPU so far (all its threads), or one thread's."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(
    url: str, args: argparse.Namespace, worker: int, server: int
) -> dict[str, float]:
    nc = await nats.connect(url)
    try:
        await _until_answered(nc, "$SRV.PING.memory")
        await _until_answered(nc, "bench.echo")
        client, floor = BenchClient(nc, args.subject_prefix), BenchClient(nc)
        echo = [(await floor.timed_at("bench.echo", {"x": 1}))[0] for _ in range(args.echo)]
        corpus = Corpus()
        payloads = [{"agentId": AGENT, "content": corpus.text(8, 40)} for _ in range(args.memories)]
        cpu, own, nats_cpu = cpu_seconds(worker), time.process_time(), cpu_seconds(server)
        loop_cpu = cpu_seconds(worker, worker)  # the main thread: the event loop
        _, seconds = await client.sent("memory::store", payloads, concurrency=args.in_flight)
        cpu = cpu_seconds(worker) - cpu
        loop_cpu = cpu_seconds(worker, worker) - loop_cpu
        own = time.process_time() - own
        nats_cpu = cpu_seconds(server) - nats_cpu
        alone = [{"agentId": AGENT, "content": corpus.text(8, 40)} for _ in range(SEQUENTIAL)]
        latencies, _ = await client.sent("memory::store", alone, concurrency=1)
        return {
            "echo_p50_ms": percentiles(echo)["p50_ms"],
            "per_second": round(len(payloads) / seconds),
            "worker_cpu_us": round(cpu / len(payloads) * 1e6, 1),
            "loop_cpu_us": round(loop_cpu / len(payloads) * 1e6, 1),
            "client_cpu_us": round(own / len(payloads) * 1e6, 1),
            "nats_cpu_us": round(nats_cpu / len(payloads) * 1e6, 1),
            "alone_p50_ms": percentiles(latencies)["p50_ms"],
        }
    finally:
        await nc.close()


async def _run_once(args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as scratch:
        server = EmbeddedServer(port=_free_port(), store_dir=Path(scratch) / "nats")
        await server.start()
        env = {
            **os.environ,
            "MEMORY_WORKER_NATS_URL": server.url,
            "MEMORY_WORKER_DB_PATH": str(Path(scratch) / "memory.db"),
            "MEMORY_WORKER_CONSOLIDATE_CRON": "",
            "MEMORY_WORKER_EVICT_CRON": "",
            "MEMORY_WORKER_LOG_LEVEL": "warning",
            "MEMORY_WORKER_EMBEDDER": args.embedder
            or os.environ.get("MEMORY_WORKER_EMBEDDER", "builtin"),
        }
        processes = [
            subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
            for command in (
                [sys.executable, "-m", "worker.bench.echo", server.url],
                [sys.executable, "-m", "worker", "run"],
            )
        ]
        try:
            return await _measure(server.url, args, processes[1].pid, server.pid)
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
            server.stop()


def run_stores(args: argparse.Namespace) -> dict[str, Any]:
    runs = [asyncio.run(_run_once(args)) for _ in range(max(1, args.runs))]
    median = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
    return {
        "in_flight": args.in_flight,
        "memories": args.memories,
        "embedder": args.embedder or os.environ.get("MEMORY_WORKER_EMBEDDER", "builtin"),
        "runs": runs,
        "median": median,
        "alone_p50_vs_echo": round(median["alone_p50_ms"] / median["echo_p50_ms"], 2),
    }


def stores_rows(found: dict[str, Any]) -> list[tuple[str, Any]]:
    median, runs = found["median"], found["runs"]
    each = ", ".join(str(run["per_second"]) for run in runs)
    return [
        ("embedder", found["embedder"]),
        ("stores per run", found["memories"]),
        (f"stores per second ({found['in_flight']} in flight), median", median["per_second"]),
        ("stores per second, each run", each),
        ("worker CPU us per store (in flight), median", median["worker_cpu_us"]),
        ("  of which its event loop's thread, median", median["loop_cpu_us"]),
        ("bench client CPU us per store (in flight), median", median["client_cpu_us"]),
        ("nats-server CPU us per store (in flight), median", median["nats_cpu_us"]),
        ("store p50 ms (1 in flight), median", median["alone_p50_ms"]),
        ("NATS echo p50 ms, median", median["echo_p50_ms"]),
        ("store p50 (1 in flight) / echo p50", found["alone_p50_vs_echo"]),
    ]
