"""`memory-worker bench --fact-store`: what facts cost (contract section 19). memory::fact::query
p50 at 10 000 facts in one agent beside the NATS echo's p50 measured in the same run, and
stores per second with extraction on (`MEMORY_WORKER_FACTS=extract`) against `off`, and each
worker's CPU per store: rounds alternating the two modes, each a fresh worker alone on a file of
its own, no embedder (so extraction's share of a store is its largest).

Each worker and the echo responder run as processes of their own, as in the main bench."""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import nats

from worker.bench.client import BenchClient, percentiles
from worker.bench.stores import cpu_seconds
from worker.bench.waiting import free_port, wait_for_responder, wait_for_workers
from worker.embedded import EmbeddedServer

AGENT = "bench-facts"
SUBJECTS = 1000  # each with 5 places in turn and 5 likes: 10 facts a subject
QUERIES = 500
CITIES = ("Lisbon", "Porto", "Berlin", "Paris", "Oslo", "Rome", "Vienna", "Prague")
DAY = 86_400_000
WARM_UP = 50


def _spawn(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


def asserts(count: int) -> list[dict[str, Any]]:
    """`count` facts of one agent: per subject a timeline of places and a set of likes."""
    bodies = []
    for n in range(count):
        subject, k = f"person {n // 10}", n % 10
        predicate, obj = ("lives_in", CITIES[k]) if k < 5 else ("likes", f"thing {k}")
        body = {"agentId": AGENT, "subject": subject, "predicate": predicate, "object": obj}
        bodies.append(body | {"validFrom": (k % 5 + 1) * DAY})
    return bodies


def texts(count: int, every: int = 3) -> list[str]:
    """Stored texts, one in `every` stating where its speaker lives (three by default; in
    LoCoMo's dev split 36 turns in 2080 state a fact, one in 58)."""
    said = []
    for n in range(count):
        city = CITIES[n % len(CITIES)]
        if n % every == 0:
            said.append(f"Quick update {n}: I moved to {city}, and the flat is lovely.")
        else:
            said.append(f"Note {n}: the build for {city} finished in {n % 97} seconds, all green.")
    return said


async def _running(url: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A worker, once the endpoints the bench calls answer (a ping may come first)."""
    prefix = env.get("MEMORY_WORKER_SUBJECT_PREFIX", "")
    worker = _spawn([sys.executable, "-m", "worker", "run"], env)
    await wait_for_workers(url, 1)
    nc = await nats.connect(url)
    try:
        for subject in ("memory.store", "memory.fact.assert", "memory.fact.query"):
            await wait_for_responder(nc, prefix + subject)
    finally:
        await nc.close()
    return worker


async def measure_query(url: str, env: dict[str, str], facts: int, echoes: int) -> dict[str, Any]:
    """The echo's p50, then memory::fact::query's by subject and with `asOf` over `facts`."""
    worker = await _running(url, env)
    nc = await nats.connect(url)
    try:
        client = BenchClient(nc)
        await client.many("memory::fact::assert", asserts(facts), concurrency=64)
        rng = random.Random(19)
        echo = [(await client.timed_at("bench.echo", {"x": 1}))[0] for _ in range(echoes)]
        # The floor of any read trigger: a key-value get, the smallest read there is.
        await client.timed("memory::kv::set", {"agentId": AGENT, "key": "k", "value": 1})
        kv_get = [
            (await client.timed("memory::kv::get", {"agentId": AGENT, "key": "k"}))[0]
            for _ in range(QUERIES)
        ]
        by_subject, as_of = [], []
        for _ in range(QUERIES):
            subject = f"person {rng.randrange(facts // 10)}"
            body: dict[str, Any] = {"agentId": AGENT, "subject": subject}
            by_subject.append((await client.timed("memory::fact::query", body))[0])
            body["asOf"] = rng.randrange(1, 6) * DAY
            as_of.append((await client.timed("memory::fact::query", body))[0])
        floor = percentiles(echo)
        query = percentiles(by_subject)
        return {
            "facts": facts,
            "echo": floor,
            "kv_get": percentiles(kv_get),
            "query_by_subject": query
            | {"p50_vs_echo": round(query["p50_ms"] / floor["p50_ms"], 2)},
            "query_as_of": percentiles(as_of),
        }
    finally:
        await nc.close()
        _stop(worker)


async def stores_alone(url: str, env: dict[str, str], said: list[str]) -> dict[str, float]:
    """One worker storing `said` (32 in flight, eight agents) after a warm-up: stores per second
    and its process's CPU per store (user and system, all threads) over the timed stores."""
    worker = await _running(url, env)
    nc = await nats.connect(url)
    try:
        client = BenchClient(nc, env["MEMORY_WORKER_SUBJECT_PREFIX"])
        for n in range(WARM_UP):  # a fresh worker's first stores are slower: not timed
            await client.timed("memory::store", {"agentId": "warm-up", "content": f"warm {n}"})
        bodies = [
            {"agentId": f"bench-store-{n % 8}", "content": text} for n, text in enumerate(said)
        ]
        cpu = cpu_seconds(worker.pid)
        replies, _, seconds = await client.many("memory::store", bodies, concurrency=32)
        cpu = cpu_seconds(worker.pid) - cpu
        assert all(reply["stored"] for reply in replies)
        return {"per_second": len(said) / seconds, "cpu_us": cpu / len(said) * 1e6}
    finally:
        await nc.close()
        _stop(worker)


async def stores_alternating(
    url: str, env: dict[str, str], said: list[str], rounds: int, scratch: Path, every: int
) -> dict[str, Any]:
    """Each round one worker per mode, alone, one after the other (off first in even rounds,
    extract first in odd ones, so a drift in the machine's load favours neither), each on a
    file and subject prefix of its own: the figures are medians of the rounds' ratios, which
    compare runs seconds apart, and the workers' CPU per store, which load changes least."""
    runs: dict[str, list[dict[str, float]]] = {"extract": [], "off": []}
    for round_ in range(rounds):
        for mode in ("off", "extract") if round_ % 2 == 0 else ("extract", "off"):
            mode_env = env | {
                "MEMORY_WORKER_FACTS": mode,
                "MEMORY_WORKER_INGEST": "false",
                "MEMORY_WORKER_SUBJECT_PREFIX": f"{mode}{round_}.",
                "MEMORY_WORKER_DB_PATH": str(scratch / f"{mode}-{round_}.db"),
            }
            runs[mode].append(await stores_alone(url, mode_env, said))
    on, off = runs["extract"], runs["off"]
    ratios = [a["per_second"] / b["per_second"] for a, b in zip(on, off, strict=True)]
    cpu_ratios = [a["cpu_us"] / b["cpu_us"] for a, b in zip(on, off, strict=True)]
    median = statistics.median
    return {
        "extract": round(median(run["per_second"] for run in on)),
        "off": round(median(run["per_second"] for run in off)),
        "ratio": round(median(ratios), 3),
        "ratios": [round(ratio, 3) for ratio in ratios],
        "cpu_us_extract": round(median(run["cpu_us"] for run in on), 1),
        "cpu_us_off": round(median(run["cpu_us"] for run in off), 1),
        "cpu_ratio": round(median(cpu_ratios), 3),
        "cpu_ratios": [round(ratio, 3) for ratio in cpu_ratios],
        "rounds": rounds,
        "stores": len(said),
        "fact_every": every,
    }


async def run_fact_store(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as scratch:
        server = EmbeddedServer(port=free_port(), store_dir=Path(scratch) / "nats")
        await server.start()
        env = {
            **os.environ,
            "MEMORY_WORKER_NATS_URL": server.url,
            "MEMORY_WORKER_EMBEDDER": "none",
            "MEMORY_WORKER_CONSOLIDATE_CRON": "",
            "MEMORY_WORKER_EVICT_CRON": "",
            "MEMORY_WORKER_LOG_LEVEL": "warning",
        }
        echo = _spawn([sys.executable, "-m", "worker.bench.echo", server.url], env)
        try:
            nc = await nats.connect(server.url)
            await wait_for_responder(nc, "bench.echo")
            await nc.close()
            query_env = env | {"MEMORY_WORKER_DB_PATH": str(Path(scratch) / "facts.db")}
            results = await measure_query(server.url, query_env, args.fact_count, args.echo)
            said = texts(args.fact_stores, args.fact_every)
            results["stores_per_second"] = await stores_alternating(
                server.url, env, said, args.fact_rounds, Path(scratch), args.fact_every
            )
            return results
        finally:
            _stop(echo)
            server.stop()


def fact_store_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    query, echo, stores = results["query_by_subject"], results["echo"], results["stores_per_second"]
    return [
        ("facts in one agent", results["facts"]),
        ("echo p50 ms", echo["p50_ms"]),
        ("kv::get p50 ms (a read's floor)", results["kv_get"]["p50_ms"]),
        ("fact::query by subject p50 ms", f"{query['p50_ms']} ({query['p50_vs_echo']}x echo)"),
        ("fact::query asOf p50 ms", results["query_as_of"]["p50_ms"]),
        (
            "stores/s extract vs off",
            f"{stores['extract']} vs {stores['off']} (median ratio {stores['ratio']}x of "
            f"{stores['rounds']} alternating rounds of {stores['stores']}, one in "
            f"{stores['fact_every']} stating a fact: {stores['ratios']})",
        ),
        (
            "worker CPU us per store extract vs off",
            f"{stores['cpu_us_extract']} vs {stores['cpu_us_off']} (median ratio "
            f"{stores['cpu_ratio']}x: {stores['cpu_ratios']})",
        ),
    ]
