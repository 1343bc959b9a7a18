"""`memory-worker bench --fact-store`: what facts cost (contract section 19). memory::fact::query
p50 at 10 000 facts in one agent beside the NATS echo's p50 measured in the same run, and
stores per second with extraction on (`MEMORY_WORKER_FACTS=extract`) against `off`: two
workers, one of each, storing the same texts at the same time on files of their own (so both
meet the same load from whatever else runs), no embedder (so extraction's share of a store is
its largest).

Each worker and the echo responder run as processes of their own, as in the main bench."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

from worker.bench.client import BenchClient, percentiles
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


def texts(count: int) -> list[str]:
    """Stored texts, one in three stating where its speaker lives."""
    said = []
    for n in range(count):
        city = CITIES[n % len(CITIES)]
        if n % 3 == 0:
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


async def stores_side_by_side(
    url: str, envs: dict[str, dict[str, str]], said: list[str]
) -> dict[str, float]:
    """Stores per second of each worker (one per mode, on a subject prefix of its own), both
    storing `said` at once, counted until the first is done: the same load on the machine for
    both, whatever else runs on it."""
    workers = [await _running(url, env) for env in envs.values()]
    nc = await nats.connect(url)
    try:
        done = asyncio.Event()
        counts = dict.fromkeys(envs, 0)

        async def store(mode: str) -> None:
            client = BenchClient(nc, envs[mode]["MEMORY_WORKER_SUBJECT_PREFIX"])
            cursor = iter(enumerate(said))

            async def lane() -> None:
                for n, text in cursor:
                    if done.is_set():
                        return
                    body = {"agentId": f"bench-store-{n % 8}", "content": text}
                    _, reply = await client.timed("memory::store", body)
                    assert reply["stored"]
                    counts[mode] += 1 if not done.is_set() else 0

            await asyncio.gather(*(lane() for _ in range(32)))
            done.set()

        for env in envs.values():  # a fresh worker's first stores are slower: not timed
            warm = BenchClient(nc, env["MEMORY_WORKER_SUBJECT_PREFIX"])
            for n in range(WARM_UP):
                await warm.timed("memory::store", {"agentId": "warm-up", "content": f"warm {n}"})
        started = time.perf_counter()
        await asyncio.gather(*(store(mode) for mode in envs))
        seconds = time.perf_counter() - started
        if not all(counts.values()):
            # One worker stored everything before the other answered once: no ratio to give.
            raise SystemExit(
                f"bench --fact-store: too few stores to compare ({counts}); raise --fact-stores"
            )
        return {mode: count / seconds for mode, count in counts.items()}
    finally:
        await nc.close()
        for worker in workers:
            _stop(worker)


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
            said = texts(args.fact_stores)
            rates: dict[str, list[float]] = {"extract": [], "off": []}
            for round_ in range(args.fact_rounds):
                envs = {mode: dict(env) for mode in ("off", "extract")}
                for mode, mode_env in envs.items():
                    mode_env["MEMORY_WORKER_FACTS"] = mode
                    mode_env["MEMORY_WORKER_INGEST"] = "false"
                    mode_env["MEMORY_WORKER_SUBJECT_PREFIX"] = f"{mode}."
                    mode_env["MEMORY_WORKER_DB_PATH"] = str(Path(scratch) / f"{mode}-{round_}.db")
                found = await stores_side_by_side(server.url, envs, said)
                for mode, rate in found.items():
                    rates[mode].append(rate)
            # Each round's two workers shared the machine's load: their ratio is the figure.
            ratios = [on / off for on, off in zip(rates["extract"], rates["off"], strict=True)]
            results["stores_per_second"] = {
                "extract": round(statistics.median(rates["extract"])),
                "off": round(statistics.median(rates["off"])),
                "ratio": round(statistics.median(ratios), 3),
                "ratios": [round(ratio, 3) for ratio in ratios],
                "rounds": args.fact_rounds, "stores": args.fact_stores,
            }  # fmt: skip
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
            f"{stores['rounds']} rounds of {stores['stores']}: {stores['ratios']})",
        ),
    ]
