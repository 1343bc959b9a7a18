"""`memory-worker bench --fairness`: what one tenant's flood costs another (issue 31 item 7).

A nats-server with accounts (MEMORY for the worker, TEAM_A and TEAM_B importing the triggers
with `share: true`, as deploy/nats/nats-server.conf does) and a worker with
MEMORY_WORKER_TENANCY=account. The backfill fills a backlog of memories stored without their
vector, measured alone, then while TEAM_B's probe alternates a 3-word recall and a store, one at
a time. All of it is measured quiet, then while TEAM_A keeps `--flood` recalls of `--query-kib`
KiB queries in flight (a process of its own, worker/bench/flood.py). A NATS echo through the
same import is the floor, timed in the same run: on a shared machine the ratios are the figures
to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

from worker.bench.client import BenchClient, percentiles
from worker.bench.corpus import Corpus
from worker.embedded import server_binary

PROBE_AGENT = "b-probe"
BACKLOG_AGENT = "b-backlog"
FLOOD_AGENT = "a-flood"
PASSWORD = "bench-secret"  # a throwaway server on loopback
TRIGGERS = ("memory.store", "memory.recall", "memory.stats", "bench.echo")


def accounts_conf(port: int) -> str:
    """MEMORY (the worker, an operator, the echo) exports the triggers the bench uses; each
    tenant imports them with `share: true`, so its requests carry `Nats-Request-Info`."""
    exports = ", ".join(f'{{service: "{subject}"}}' for subject in TRIGGERS)
    imports = ", ".join(
        f'{{service: {{account: MEMORY, subject: "{subject}"}}, share: true}}'
        for subject in TRIGGERS
    )
    tenants = "\n".join(
        f"  {account} {{ users: [{{user: {user}, password: {PASSWORD}}}], imports: [{imports}] }}"
        for account, user in (("TEAM_A", "alice"), ("TEAM_B", "carol"))
    )
    return (
        f"listen: 127.0.0.1:{port}\n"
        "accounts {\n"
        f"  MEMORY {{ users: [{{user: worker, password: {PASSWORD}}}], exports: [{exports}] }}\n"
        f"{tenants}\n}}\n"
    )


def user_url(port: int, user: str) -> str:
    return f"nats://{user}:{PASSWORD}@127.0.0.1:{port}"


class Stack:
    """The server, the echo and the worker (restarted with another embedder between steps)."""

    def __init__(self, scratch: Path, port: int, embedder: str) -> None:
        self.port = port
        self.embedder = embedder
        self.env = {
            **os.environ,
            "MEMORY_WORKER_NATS_URL": f"nats://127.0.0.1:{port}",
            "MEMORY_WORKER_NATS_USER": "worker",
            "MEMORY_WORKER_NATS_PASSWORD": PASSWORD,
            "MEMORY_WORKER_TENANCY": "account",
            "MEMORY_WORKER_INGEST": "false",
            "MEMORY_WORKER_DB_PATH": str(scratch / "memory.db"),
            "MEMORY_WORKER_CONSOLIDATE_CRON": "",
            "MEMORY_WORKER_EVICT_CRON": "",
            "MEMORY_WORKER_LOG_LEVEL": "warning",
        }
        conf = scratch / "nats.conf"
        conf.write_text(accounts_conf(port), encoding="utf-8")
        self.processes: list[subprocess.Popen[bytes]] = [
            subprocess.Popen(
                [server_binary(), "-c", str(conf)],
                stdin=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        ]
        self.worker: subprocess.Popen[bytes] | None = None
        until_listening(port)

    def spawn(self, *command: str, output: bool = False, **env: str) -> subprocess.Popen[bytes]:
        """A Python process with the worker's environment (and `env`); `output`: its stdout
        piped to us."""
        process = subprocess.Popen(
            [sys.executable, *command],
            env={**self.env, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if output else None,
        )
        self.processes.append(process)
        return process

    async def start_worker(self, embedder: str) -> None:
        self.worker = self.spawn("-m", "worker", "run", MEMORY_WORKER_EMBEDDER=embedder)
        await until_answered(user_url(self.port, "worker"), "$SRV.PING.memory")

    def stop_worker(self) -> None:
        if self.worker is not None:
            stop(self.worker)
            self.worker = None

    def close(self) -> None:
        for process in reversed(self.processes):
            stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def until_listening(port: int, timeout: float = 10.0) -> None:
    """Until the server started on port accepts connections."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no NATS server listening on {port}") from None
            time.sleep(0.02)


async def until_answered(url: str, subject: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            nc = await nats.connect(url, allow_reconnect=False)
            try:
                await nc.request(subject, b"{}", timeout=1.0)
                return
            finally:
                await nc.close()
        except Exception:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing answered on {subject} in time") from None
            await asyncio.sleep(0.2)


async def store_all(client: BenchClient, agent: str, count: int, corpus: Corpus) -> None:
    payloads = [{"agentId": agent, "content": corpus.text(8, 40)} for _ in range(count)]
    await client.many("memory::store", payloads, concurrency=64)


async def missing_vectors(operator: BenchClient) -> int:
    _, stats = await operator.timed("memory::stats", {})
    return int(stats["memoriesWithoutVector"])


async def probe(carol: BenchClient, corpus: Corpus, seconds: float) -> dict[str, Any]:
    """TEAM_B, one request at a time for `seconds` (the last one is waited for): recall, store.
    A request without a reply in the client's timeout counts as that long, and as a timeout."""
    times: dict[str, list[float]] = {"recall": [], "store": []}
    timeouts = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for trigger, body in (
            ("recall", {"agentId": PROBE_AGENT, "query": corpus.text(3, 3)}),
            ("store", {"agentId": PROBE_AGENT, "content": corpus.text(8, 40)}),
        ):
            try:
                times[trigger].append((await carol.timed(f"memory::{trigger}", body))[0])
            except TimeoutError:
                times[trigger].append(carol.timeout * 1000)
                timeouts += 1
    return {
        "recall": percentiles(times["recall"]),
        "store": percentiles(times["store"]),
        "rounds": len(times["recall"]),
        "timeouts": timeouts,
    }


async def phase(
    carol: BenchClient, operator: BenchClient, corpus: Corpus, seconds: float, embedding: bool
) -> dict[str, Any]:
    """The backfill's vectors a second, alone for half of `seconds` (None without an
    embedder), then over the probe's `seconds` while TEAM_B's requests are answered too."""
    rates = {}
    if embedding:
        missing = await missing_vectors(operator)
        started = time.monotonic()
        await asyncio.sleep(seconds / 2)
        left = await missing_vectors(operator)
        rates["backfill_alone_per_second"] = round(
            (missing - left) / (time.monotonic() - started), 1
        )
    missing = await missing_vectors(operator)
    started = time.monotonic()
    found = await probe(carol, corpus, seconds)
    elapsed = time.monotonic() - started
    left = await missing_vectors(operator)
    found["backfill_per_second"] = round((missing - left) / elapsed, 1) if embedding else None
    found["backlog_left"] = left
    found |= rates
    echo = [(await carol.timed_at("bench.echo", {"x": 1}))[0] for _ in range(50)]
    found["echo_after"] = percentiles(echo)
    return found


async def measure_fairness(args: Any) -> dict[str, Any]:
    seconds, lanes, kib = args.seconds, args.flood, args.query_kib
    embedding = args.embedder != "none"
    corpus = Corpus(seed=11)
    results: dict[str, Any] = {"flood": lanes, "query_kib": kib, "embedder": args.embedder}
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as scratch:
        port = free_port()
        stack = Stack(Path(scratch), port, args.embedder)
        try:
            stack.spawn("-m", "worker.bench.echo", user_url(port, "worker"))
            # The probe's and the flood's agents with their vectors, then a backlog without.
            await stack.start_worker(args.embedder)
            carol_nc = await nats.connect(user_url(port, "carol"))
            alice_nc = await nats.connect(user_url(port, "alice"))
            operator_nc = await nats.connect(user_url(port, "worker"))
            carol, operator = BenchClient(carol_nc), BenchClient(operator_nc)
            await until_answered(user_url(port, "carol"), "bench.echo")
            await store_all(carol, PROBE_AGENT, args.fair_memories, corpus)
            await store_all(BenchClient(alice_nc), FLOOD_AGENT, args.fair_memories, corpus)
            if embedding:
                await operator.wait_for_vectors()
            stack.stop_worker()
            await stack.start_worker("none")
            await store_all(carol, BACKLOG_AGENT, args.backlog, corpus)
            stack.stop_worker()
            await stack.start_worker(args.embedder)
            echo = [(await carol.timed_at("bench.echo", {"x": 1}))[0] for _ in range(args.echo)]
            results["echo"] = percentiles(echo)
            await carol.timed("memory::recall", {"agentId": PROBE_AGENT, "query": "warm up"})
            results["quiet"] = await phase(carol, operator, corpus, seconds, embedding)
            flood = stack.spawn(
                "-m", "worker.bench.flood", user_url(port, "alice"), FLOOD_AGENT, str(lanes),
                str(kib), "0.1", output=True,
            )  # fmt: skip
            await flooding(flood)
            await asyncio.sleep(args.settle)
            results["flooded"] = await phase(carol, operator, corpus, seconds, embedding)
            results["flood_counts"] = await flood_counts(flood)
            for nc in (carol_nc, alice_nc, operator_nc):
                await nc.close()
        finally:
            stack.close()
    return with_ratios(results)


async def flooding(flood: subprocess.Popen[bytes]) -> None:
    """Until the flood's lanes run (its first line): its start-up can take seconds on a loaded
    machine, and a flood stopped before it set up its SIGTERM handler died printing no counts
    (the flooded phase having been measured without a flood)."""
    assert flood.stdout is not None
    line = await asyncio.to_thread(flood.stdout.readline)
    if line.strip() != b"flooding":
        raise RuntimeError(f"the flood did not start (exit {flood.poll()}): {line!r}")
    print("flooding", file=sys.stderr, flush=True)


async def flood_counts(flood: subprocess.Popen[bytes]) -> dict[str, Any]:
    """What the flood got while it ran: answers, 503s, other errors, timeouts."""
    flood.send_signal(signal.SIGTERM)
    output, _ = await asyncio.to_thread(flood.communicate, None, 120)
    counts: dict[str, Any] = json.loads(output.decode().strip().splitlines()[-1])
    return counts


def with_ratios(results: dict[str, Any]) -> dict[str, Any]:
    floor = results["echo"]["p50_ms"]
    for name in ("quiet", "flooded"):
        found = results[name]
        found["recall_p50_vs_echo"] = round(found["recall"]["p50_ms"] / floor, 2)
        found["store_p50_vs_echo"] = round(found["store"]["p50_ms"] / floor, 2)
    return results


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def add_fairness_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fairness",
        action="store_true",
        help="only issue 31's fairness: a tenant's recall and store, and the backfill, quiet "
        "and while another tenant floods with long recalls",
    )
    parser.add_argument("--flood", type=int, default=300, help="with --fairness: in flight")
    parser.add_argument("--query-kib", type=int, default=16, help="with --fairness: query size")
    parser.add_argument("--seconds", type=float, default=20.0, help="with --fairness: per phase")
    parser.add_argument("--settle", type=float, default=3.0, help="with --fairness: flood first")
    parser.add_argument("--backlog", type=int, default=10000, help="with --fairness: no vector")
    parser.add_argument(
        "--fair-memories", type=int, default=1000, help="with --fairness: per probed agent"
    )


def run_fairness(args: argparse.Namespace) -> dict[str, Any]:
    args.embedder = args.embedder or "builtin"
    return asyncio.run(measure_fairness(args))


def fairness_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = [
        ("embedder", results["embedder"]),
        ("NATS echo p50 / p99 ms (TEAM_B, through its import)", _pair(results["echo"])),
    ]
    for name, label in (("quiet", "quiet"), ("flooded", f"{results['flood']} in flight")):
        found = results[name]
        rows += [
            (f"{label}: TEAM_B recall p50 / p99 ms", _pair(found["recall"])),
            (f"{label}: TEAM_B store p50 / p99 ms", _pair(found["store"])),
            (f"{label}: recall p50 / echo p50", found["recall_p50_vs_echo"]),
            (f"{label}: store p50 / echo p50", found["store_p50_vs_echo"]),
            (
                f"{label}: TEAM_B rounds (recall + store), timed out",
                f"{found['rounds']}, {found['timeouts']}",
            ),
            (f"{label}: backfill vectors a second, alone", found.get("backfill_alone_per_second")),
            (f"{label}: backfill vectors a second, beside TEAM_B", found["backfill_per_second"]),
            (f"{label}: echo p50 ms after the probe", found["echo_after"]["p50_ms"]),
        ]
    rows.append(("the flood: answered / 503 / other / timeouts", _counts(results)))
    return rows


def _pair(found: dict[str, float]) -> str:
    return f"{found['p50_ms']} / {found['p99_ms']}"


def _counts(results: dict[str, Any]) -> str:
    counts = results["flood_counts"]
    return " / ".join(str(counts[k]) for k in ("answered", "refused", "failed", "timeouts"))
