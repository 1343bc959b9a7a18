"""The bench's figures for section 14's state: kv set and get p50 over the bus, claims per
second with 32 concurrent claimers (through every worker on the file) and how many tasks were
claimed twice, and usage::query p50 over a million usage records."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from pathlib import Path
from typing import Any

import apsw

from handlers.usage import rebuild_days
from worker.bench.client import BenchClient, percentiles

KV_AGENT = "bench-kv"
KV_REQUESTS = 1000
TASKS = 2000
CLAIMERS = 32
USAGE_AGENTS = 100
USAGE_MODELS = ("gpt-4o", "gpt-4o-mini", "claude-sonnet", "claude-haiku", "llama-70b")
USAGE_DAYS = 90
QUERIES = 50
START = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY_MS = 86_400_000


async def measure_kv(client: BenchClient) -> dict[str, Any]:
    sets, gets = [], []
    for n in range(KV_REQUESTS):
        body = {"agentId": KV_AGENT, "key": f"key-{n % 100}", "value": {"n": n, "note": "x" * 64}}
        sets.append((await client.timed("memory::kv::set", body))[0])
    for n in range(KV_REQUESTS):
        body = {"agentId": KV_AGENT, "key": f"key-{n % 100}"}
        gets.append((await client.timed("memory::kv::get", body))[0])
    return {"set": percentiles(sets), "get": percentiles(gets), "requests": KV_REQUESTS}


async def measure_claims(client: BenchClient) -> dict[str, Any]:
    posts = [{"title": f"task {n}", "createdBy": "bench-poster"} for n in range(TASKS)]
    await client.many("memory::task::post", posts, concurrency=64)

    async def claimer(agent: str) -> list[str]:
        taken: list[str] = []
        while True:
            _, reply = await client.timed("memory::task::claim", {"agentId": agent})
            if reply["task"] is None:
                return taken
            taken.append(reply["task"]["taskId"])

    started = time.perf_counter()
    claims = await asyncio.gather(*(claimer(f"bench-claimer-{n}") for n in range(CLAIMERS)))
    seconds = time.perf_counter() - started
    every = [task for taken in claims for task in taken]
    return {
        "tasks": TASKS,
        "claimers": CLAIMERS,
        "claimed": len(every),
        "double_claims": len(every) - len(set(every)),
        "claims_per_second": round(len(every) / seconds),
    }


def fill_usage(db_path: Path, records: int) -> float:
    """Write `records` usage rows straight into the file, then their day totals; seconds."""
    rng = random.Random(14)
    agents = [f"bench-usage-{n}" for n in range(USAGE_AGENTS)]
    started = time.perf_counter()
    conn = apsw.Connection(str(db_path))
    conn.setbusytimeout(60_000)
    try:
        with conn:
            conn.executemany(
                "INSERT INTO usage (tenant, id, agent_id, model, prompt_tokens, "
                "completion_tokens, cost_usd, timestamp) VALUES ('', ?, ?, ?, ?, ?, ?, ?)",
                (
                    (uuid.UUID(int=rng.getrandbits(128)).hex, rng.choice(agents),
                     rng.choice(USAGE_MODELS), rng.randrange(4000), rng.randrange(1000),
                     rng.random() / 100, START + rng.randrange(USAGE_DAYS * DAY_MS))
                    for _ in range(records)
                ),
            )  # fmt: skip
            rebuild_days(conn, [("", agent) for agent in agents])
    finally:
        conn.close()
    return time.perf_counter() - started


async def measure_usage(client: BenchClient, db_path: Path, records: int) -> dict[str, Any]:
    fill_s = fill_usage(db_path, records)
    rng = random.Random(7)
    shapes: dict[str, list[dict[str, Any]]] = {"whole range by model": [], "by day, one agent": [],
                                               "30 days at any ms by agent": []}  # fmt: skip
    for _ in range(QUERIES):
        shapes["whole range by model"].append({"groupBy": "model"})
        shapes["by day, one agent"].append(
            {"groupBy": "day", "agentId": f"bench-usage-{rng.randrange(USAGE_AGENTS)}"}
        )
        since = START + rng.randrange((USAGE_DAYS - 30) * DAY_MS)
        shapes["30 days at any ms by agent"].append(
            {"groupBy": "agent", "since": since, "until": since + 30 * DAY_MS}
        )
    figures: dict[str, Any] = {"records": records, "fill_seconds": round(fill_s, 1)}
    for name, bodies in shapes.items():
        await client.timed("memory::usage::query", bodies[0])  # warm the page cache
        latencies = [(await client.timed("memory::usage::query", b))[0] for b in bodies]
        figures[name] = percentiles(latencies)
    _, whole = await client.timed("memory::usage::query", {"groupBy": "model"})
    figures["events_counted"] = whole["total"]["events"]
    return figures


async def measure_state(client: BenchClient, db_path: Path, usage_records: int) -> dict[str, Any]:
    return {
        "kv": await measure_kv(client),
        "claims": await measure_claims(client),
        "usage": await measure_usage(client, db_path, usage_records),
    }


def state_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    figure = results["state"]
    kv, claims, usage = figure["kv"], figure["claims"], figure["usage"]
    rows: list[tuple[str, Any]] = [
        ("workers sharing the database", results["workers"]),
        ("kv::set p50 / p99 ms", f"{kv['set']['p50_ms']} / {kv['set']['p99_ms']}"),
        ("kv::get p50 / p99 ms", f"{kv['get']['p50_ms']} / {kv['get']['p99_ms']}"),
        (f"task claims per second ({claims['claimers']} concurrent claimers, "
         f"{claims['tasks']} tasks)", claims["claims_per_second"]),
        ("tasks claimed / claimed twice", f"{claims['claimed']} / {claims['double_claims']}"),
        (f"usage records (written directly, {usage['fill_seconds']} s)", usage["records"]),
    ]  # fmt: skip
    for name in ("whole range by model", "by day, one agent", "30 days at any ms by agent"):
        rows.append(
            (f"usage::query p50 / p99 ms, {name}",
             f"{usage[name]['p50_ms']} / {usage[name]['p99_ms']}")
        )  # fmt: skip
    return rows
