"""`memory-worker bench`: store and recall figures, the NATS floor they are compared to, RSS,
and (with --locomo) retrieval quality. Performance claims live here, not in timed unit tests.

The worker under test and the echo responder run as processes of their own, so the client's
load does not share their event loop.
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

from worker.bench import index_memory
from worker.bench.client import BenchClient, percentiles
from worker.bench.corpus import Corpus
from worker.bench.evict import measure_eviction
from worker.bench.fact_store import fact_store_rows, run_fact_store
from worker.bench.facts import run_facts
from worker.bench.fairness import fairness_rows, run_fairness
from worker.bench.filtered import measure_filtered
from worker.bench.floor import measure_floor
from worker.bench.locomo import measure_locomo
from worker.bench.mcp_trip import measure_mcp_round_trip
from worker.bench.merge import run_merge
from worker.bench.million import measure as measure_million
from worker.bench.million_report import million_rows
from worker.bench.overhead import measure_client_overhead
from worker.bench.report import rows_text, table
from worker.bench.sanitize import find_locomo, run_sanitize
from worker.bench.scale import measure_scale, scale_rows
from worker.bench.sharded import measure_sharded, sharded_rows
from worker.bench.state import measure_state
from worker.bench.stores import run_stores, stores_rows
from worker.bench.topic_cost import run_topic_cost, topic_cost_rows
from worker.bench.topics import run_topics
from worker.bench.vector_quality import measure_vector_index, vector_index_rows
from worker.bench.waiting import free_port, wait_for_responder, wait_for_workers
from worker.embedded import EmbeddedServer
from worker.tenancy import REQUEST_INFO, caller_of

AGENT = "bench-agent"
TENANT_HEADERS = {REQUEST_INFO: json.dumps({"acc": "BENCH", "user": "bench", "rtt": 150000})}


def request_info_parse_us() -> float:
    """The median time to read the caller from a tenant request's `Nats-Request-Info`."""
    samples = []
    for _ in range(20):
        started = time.perf_counter()
        for _ in range(1000):
            caller_of(TENANT_HEADERS, "MEMORY")
        samples.append((time.perf_counter() - started) * 1000)  # ms per 1000 = us each
    return round(sorted(samples)[len(samples) // 2], 3)


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


async def measure(args: argparse.Namespace, url: str, worker_pid: int | None) -> dict[str, Any]:
    nc = await nats.connect(url)
    # Under tenancy the bench's requests carry the header a tenant's imported request has (the
    # embedded server has no accounts; the worker believes it as it would the server's).
    headers = TENANT_HEADERS if args.tenancy == "account" else None
    client = BenchClient(nc, args.subject_prefix, headers=headers)
    await wait_for_responder(nc, "$SRV.PING.memory")
    await wait_for_responder(nc, "bench.echo")
    if args.state:
        return await _measure_state_only(args, client, nc)
    results: dict[str, Any] = {
        "memories": args.memories,
        "concurrency": args.concurrency,
        "tenancy": args.tenancy,
        "request_info_parse_us": request_info_parse_us(),
    }
    floor_client = BenchClient(nc)  # the echo's subject has no prefix
    echo = [(await floor_client.timed_at("bench.echo", {"x": 1}))[0] for _ in range(args.echo)]
    floor = percentiles(echo)
    results["echo"] = floor
    results["rss_before_mb"] = rss_mb(worker_pid)

    corpus = Corpus()
    payloads = [{"agentId": AGENT, "content": corpus.text(8, 40)} for _ in range(args.memories)]
    started = time.perf_counter()
    latencies, seconds = await client.sent("memory::store", payloads, concurrency=args.concurrency)
    results["store"] = {**percentiles(latencies), "per_second": round(len(payloads) / seconds)}
    if args.embedder != "none":
        # Past the model's backlog stores reply before their vector: the sustained rate is
        # the one at which every memory also has its vector.
        results["store"]["without_vector"] = await client.wait_for_vectors()
        embedded_s = time.perf_counter() - started
        results["store"]["embedded_per_second"] = round(len(payloads) / embedded_s)

    queries = [{"agentId": AGENT, "query": corpus.text(3, 6)} for _ in range(args.recalls)]
    first_ms, _ = await client.timed("memory::recall", queries[0])
    results["first_recall_ms"] = round(first_ms, 3)
    sequential = [(await client.timed("memory::recall", q))[0] for q in queries]
    results["recall"] = percentiles(sequential)
    if args.floor:
        results["floor"] = await measure_floor(client, floor_client, queries, args.floor)
    # The same queries as memory::context, which an agent framework calls: recall plus rendering.
    results["context"] = percentiles(
        [(await client.timed("memory::context", q))[0] for q in queries]
    )
    if args.embedder == "builtin":
        results["query_embed"] = query_embed_percentiles([q["query"] for q in queries])
    _, _, seconds = await client.many("memory::recall", queries * 4, concurrency=16)
    results["recall"]["per_second_16_in_flight"] = round(len(queries) * 4 / seconds)
    results["recall_while_storing"] = await _mixed(client, corpus, queries, args.concurrency)
    if args.embedder != "none":
        await client.wait_for_vectors()
    for name in ("store", "recall", "recall_while_storing"):
        results[name]["p50_vs_echo"] = round(results[name]["p50_ms"] / floor["p50_ms"], 2)
    results["rss_after_mb"] = rss_mb(worker_pid)
    if args.evict:
        results["eviction"] = await measure_eviction(client, corpus, args.evict, args.concurrency)
    if args.filtered:
        results["filtered"] = await measure_filtered(
            client, corpus, args.filtered, args.concurrency
        )
    if args.client:
        tenant = "BENCH" if args.tenancy == "account" else None  # administrative, for BENCH
        results["client_overhead"] = await measure_client_overhead(
            url, args.subject_prefix, args.client, tenant
        )
    if args.mcp:
        if not args.client:  # the agent it searches is the one the client bench fills
            results["client_overhead"] = await measure_client_overhead(
                url, args.subject_prefix, 10, None
            )
        results["mcp"] = await measure_mcp_round_trip(url, args.subject_prefix, args.mcp)
    if args.locomo:
        results["locomo"] = await measure_locomo(
            client, Path(args.locomo), embedded=args.embedder != "none"
        )
    await nc.close()
    return results


async def _measure_state_only(
    args: argparse.Namespace, client: BenchClient, nc: Any
) -> dict[str, Any]:
    """`--state`: section 14's figures alone, against the bench's workers on one file."""
    state = await measure_state(client, Path(args.db_path), args.usage_records)
    await nc.close()
    return {"state": state, "workers": args.workers, "tenancy": args.tenancy}


async def _mixed(
    client: BenchClient, corpus: Corpus, queries: list[Any], concurrency: int
) -> dict[str, float]:
    """Sequential recalls while stores keep arriving: the index must stay cheap to update."""
    writes = [{"agentId": AGENT, "content": corpus.text(8, 40)} for _ in range(len(queries) * 8)]
    storing = asyncio.create_task(client.many("memory::store", writes, concurrency=concurrency))
    latencies = []
    for query in queries:
        if storing.done():
            break
        latencies.append((await client.timed("memory::recall", query))[0])
    await storing
    return {**percentiles(latencies), "recalls": len(latencies)}


def query_embed_percentiles(queries: list[str]) -> dict[str, float]:
    """The builtin model's time for one query, in this process while the worker is idle: the
    part of a recall's latency that is the model's, for the target 'embedding time + 5 ms'."""
    from worker.embedders.configured import builtin_model

    model = builtin_model(os.environ.get("MEMORY_WORKER_BUILTIN_MODEL", "minilm"))
    model.embed_queries(queries[:1])
    latencies = []
    for query in queries:
        started = time.perf_counter()
        model.embed_queries([query])
        latencies.append((time.perf_counter() - started) * 1000)
    return percentiles(latencies)


def _spawn(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)


async def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    # The state triggers embed nothing: --state spares its workers the model.
    default = "none" if args.state else "builtin"
    args.embedder = args.embedder or os.environ.get("MEMORY_WORKER_EMBEDDER", default)
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as scratch:
        server = None
        url = args.nats_url
        if not url:
            server = EmbeddedServer(port=free_port(), store_dir=Path(scratch) / "nats")
            await server.start()
            url = server.url
        env = {
            **os.environ,
            "MEMORY_WORKER_NATS_URL": url,
            "MEMORY_WORKER_DB_PATH": str(Path(scratch) / "memory.db"),
            "MEMORY_WORKER_CONSOLIDATE_CRON": "",
            "MEMORY_WORKER_EVICT_CRON": "",
            "MEMORY_WORKER_LOG_LEVEL": "warning",
        }
        env["MEMORY_WORKER_EMBEDDER"] = args.embedder
        env["MEMORY_WORKER_TENANCY"] = args.tenancy
        if args.keyword:
            env["MEMORY_WORKER_KEYWORD"] = args.keyword
        if args.recall:
            env["MEMORY_WORKER_RECALL"] = args.recall
        echo = _spawn([sys.executable, "-m", "worker.bench.echo", url], env)
        worker = None if args.nats_url else _spawn([sys.executable, "-m", "worker", "run"], env)
        args.db_path = env["MEMORY_WORKER_DB_PATH"]
        extra: list[subprocess.Popen[bytes]] = []
        try:
            if args.state:
                if args.nats_url:
                    raise SystemExit("bench --state runs its own workers: leave out --nats-url")
                # More workers on the same file, once the first has migrated it: claims must
                # stay single across them.
                await wait_for_workers(url, 1)
                extra = [
                    _spawn([sys.executable, "-m", "worker", "run"], env)
                    for _ in range(args.workers - 1)
                ]
                await wait_for_workers(url, args.workers)
            results = await measure(args, url, None if worker is None else worker.pid)
            results["embedder"] = args.embedder
            return results
        finally:
            for process in (worker, *extra, echo):
                if process is not None:
                    process.send_signal(signal.SIGTERM)
                    process.wait(timeout=20)
            if server is not None:
                server.stop()


async def run_scale(args: argparse.Namespace) -> list[dict[str, Any]]:
    sizes = [int(size) for size in args.scale.split(",")]
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as scratch:
        server = EmbeddedServer(port=free_port(), store_dir=Path(scratch) / "nats")
        await server.start()
        env = {
            **os.environ,
            "MEMORY_WORKER_NATS_URL": server.url,
            "MEMORY_WORKER_CONSOLIDATE_CRON": "",
            "MEMORY_WORKER_EVICT_CRON": "",
            "MEMORY_WORKER_LOG_LEVEL": "warning",
            "MEMORY_WORKER_INDEX_MEMORY_MB": "8192",
        }
        try:
            return await measure_scale(server.url, env, sizes, recalls=args.recalls)
        finally:
            server.stop()


def main(args: argparse.Namespace) -> int:
    if args.fact_store:
        found = asyncio.run(run_fact_store(args))
        print(json.dumps(found) if args.json else rows_text(fact_store_rows(found)))
        return 0
    if args.sanitize:
        return run_sanitize(args)
    if args.facts_extraction:
        return run_facts(args)
    if args.topics:
        return run_topics(args)
    if args.topic_cost:
        cost = asyncio.run(run_topic_cost(args))
        print(json.dumps(cost) if args.json else rows_text(topic_cost_rows(cost)))
        return 0
    if args.merge is not None:
        return run_merge(args)
    if args.sharded:
        sharded = asyncio.run(measure_sharded())
        print(json.dumps(sharded) if args.json else rows_text(sharded_rows(sharded)))
        return 0
    if args.vector_index:
        shortlists = [int(size) for size in args.vector_index.split(",")]
        locomo = find_locomo(args.locomo)
        if locomo is None:
            raise SystemExit("bench --vector-index: no LoCoMo file; give one with --locomo")
        quality = asyncio.run(measure_vector_index(locomo, shortlists))
        print(json.dumps(quality) if args.json else rows_text(vector_index_rows(quality)))
        return 0
    if args.index_memory:
        found = asyncio.run(
            index_memory.measure(args.index_memory, args.budget, runs=args.runs, idle_s=args.idle)
        )
        print(json.dumps(found) if args.json else rows_text(index_memory.rows(found)))
        return 0
    if args.fairness:
        fairness = run_fairness(args)
        print(json.dumps(fairness) if args.json else rows_text(fairness_rows(fairness)))
        return 0
    if args.stores:
        found = run_stores(args)
        print(json.dumps(found) if args.json else rows_text(stores_rows(found)))
        return 0
    if args.million:
        args.embedder = args.embedder or "none"
        million = asyncio.run(measure_million(args))
        print(json.dumps(million) if args.json else rows_text(million_rows(million)))
        return 0
    if args.scale:
        scale = asyncio.run(run_scale(args))
        print(json.dumps(scale) if args.json else rows_text(scale_rows(scale)))
        return 0
    results = asyncio.run(run_bench(args))
    print(json.dumps(results) if args.json else table(results))
    return 0
