"""`memory-worker bench --topic-cost`: what topics cost over the bus (contract section 21).

Store p50 with the topic step (`MEMORY_WORKER_TOPICS=assign`) against without (`off`): two
workers, one of each, on files of their own, each message of the test set's sessions stored
into its session on both in turn (which goes first alternates), so both meet the same load
from whatever else runs; then `memory::session::resume` p50 on one session of
`--resume-messages` messages, with and without a query. The NATS echo's p50 is measured in
each round beside them. No embedder unless `--embedder` names one (keywords only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import nats

from worker.bench.client import BenchClient, percentiles
from worker.bench.fact_store import _running, _spawn, _stop
from worker.bench.stores import cpu_seconds
from worker.bench.topics import TEST_SET, load_sessions
from worker.bench.waiting import free_port, wait_for_responder
from worker.embedded import EmbeddedServer

AGENT = "bench-topics"
MODES = ("assign", "off")
WARM_UP = 30
RESUMES = 100


def messages(count: int) -> list[dict[str, Any]]:
    """The test set's messages in order, session by session, as store bodies (cycled, in
    sessions of a later pass, when `count` is more than the set holds)."""
    sessions = load_sessions(TEST_SET)
    said: list[dict[str, Any]] = []
    while len(said) < count:
        for session in sessions:
            for m in session["messages"]:
                session_id = f"{session['id']}-{len(said) // 2000}"
                said.append({"content": m["text"], "role": m["role"], "sessionId": session_id})
    return said[:count]


async def stores_in_turn(
    nc: Any,
    prefixes: dict[str, str],
    said: list[dict[str, Any]],
    echoes: int,
    pids: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Each message stored on each mode's worker in turn; the p50 of each, and the echo's; with
    `pids` (each mode's worker process), each worker's CPU per store (all its threads: a shared
    machine's waits are not counted, as they are in the p50)."""
    clients = {mode: BenchClient(nc, prefix) for mode, prefix in prefixes.items()}
    for client in clients.values():  # a fresh worker's first stores are slower: not timed
        for n in range(WARM_UP):
            await client.timed("memory::store", {"agentId": "warm-up", "content": f"warm {n}"})
    floor = BenchClient(nc)
    echo = [(await floor.timed_at("bench.echo", {"x": 1}))[0] for _ in range(echoes)]
    times: dict[str, list[float]] = {mode: [] for mode in clients}
    cpu = {mode: cpu_seconds(pid) for mode, pid in (pids or {}).items()}
    for n, body in enumerate(said):
        order = list(clients) if n % 2 == 0 else list(reversed(clients))
        for mode in order:
            agent = f"{AGENT}-{body['sessionId']}"  # an agent a session: repeats are not merged
            took, reply = await clients[mode].timed("memory::store", {"agentId": agent, **body})
            assert ("topicId" in reply) == (mode == "assign"), reply
            times[mode].append(took)
    found: dict[str, Any] = {"echo": percentiles(echo)}
    for mode in clients:
        found[mode] = percentiles(times[mode])
        if mode in cpu:
            spent = cpu_seconds((pids or {})[mode]) - cpu[mode]
            found[mode]["cpu_us"] = round(spent * 1e6 / max(len(said), 1), 1)
    return found


async def resume_long_session(nc: Any, prefix: str, count: int) -> dict[str, Any]:
    """One session of `count` messages (the test set's, in order), then resume's p50 without
    a query (the active topic) and with one naming a thread."""
    client = BenchClient(nc, prefix)
    for body in messages(count):
        body = body | {"sessionId": "long"}
        await client.timed("memory::store", {"agentId": AGENT + "-long", **body})
    asked = {"agentId": AGENT + "-long", "sessionId": "long"}
    active = [(await client.timed("memory::session::resume", asked))[0] for _ in range(RESUMES)]
    query = asked | {"query": "where were we with the Japan rail pass?"}
    named = [(await client.timed("memory::session::resume", query))[0] for _ in range(RESUMES)]
    _, reply = await client.timed("memory::session::resume", query)
    return {
        "messages": count,
        "active": percentiles(active),
        "query": percentiles(named),
        "chars": len(reply["text"]),
    }


async def run_topic_cost(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as scratch:
        server = EmbeddedServer(port=free_port(), store_dir=Path(scratch) / "nats")
        await server.start()
        env = {
            **os.environ,
            "MEMORY_WORKER_NATS_URL": server.url,
            "MEMORY_WORKER_EMBEDDER": args.embedder or "none",
            "MEMORY_WORKER_CONSOLIDATE_CRON": "",
            "MEMORY_WORKER_EVICT_CRON": "",
            "MEMORY_WORKER_LOG_LEVEL": "warning",
            "MEMORY_WORKER_INGEST": "false",
        }
        echo = _spawn([sys.executable, "-m", "worker.bench.echo", server.url], env)
        nc = await nats.connect(server.url)
        try:
            await wait_for_responder(nc, "bench.echo")
            said = messages(args.topic_stores)
            rounds: list[dict[str, Any]] = []
            resume: dict[str, Any] = {}
            for round_ in range(args.topic_rounds):
                envs = {
                    mode: env
                    | {
                        "MEMORY_WORKER_TOPICS": mode,
                        "MEMORY_WORKER_SUBJECT_PREFIX": f"{mode}.",
                        "MEMORY_WORKER_DB_PATH": str(Path(scratch) / f"{mode}-{round_}.db"),
                    }
                    for mode in MODES
                }
                workers = [await _running(server.url, mode_env) for mode_env in envs.values()]
                try:
                    prefixes = {mode: f"{mode}." for mode in MODES}
                    pids = {mode: worker.pid for mode, worker in zip(MODES, workers, strict=True)}
                    rounds.append(await stores_in_turn(nc, prefixes, said, args.echo, pids))
                    if round_ == 0:
                        resume = await resume_long_session(nc, "assign.", args.resume_messages)
                finally:
                    for worker in workers:
                        _stop(worker)
            ratios = [r["assign"]["p50_ms"] / r["off"]["p50_ms"] for r in rounds]
            cpu_ratios = [r["assign"]["cpu_us"] / max(r["off"]["cpu_us"], 1e-9) for r in rounds]
            echo_p50 = round(statistics.median(r["echo"]["p50_ms"] for r in rounds), 3)
            return {
                "embedder": env["MEMORY_WORKER_EMBEDDER"],
                "stores": len(said),
                "rounds": len(rounds),
                "echo_p50_ms": echo_p50,
                "store_p50_ms": {
                    mode: round(statistics.median(r[mode]["p50_ms"] for r in rounds), 3)
                    for mode in MODES
                },
                "ratio": round(statistics.median(ratios), 3),
                "ratios": [round(ratio, 3) for ratio in ratios],
                "cpu_us_per_store": {
                    mode: round(statistics.median(r[mode]["cpu_us"] for r in rounds), 1)
                    for mode in MODES
                },
                "cpu_ratio": round(statistics.median(cpu_ratios), 3),
                "cpu_ratios": [round(ratio, 3) for ratio in cpu_ratios],
                "resume": resume | {"p50_vs_echo": round(resume["active"]["p50_ms"] / echo_p50, 2)},
            }
        finally:
            await nc.close()
            _stop(echo)
            server.stop()


def topic_cost_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    stores, resume = results["store_p50_ms"], results["resume"]
    cpus = results["cpu_us_per_store"]
    return [
        ("embedder", results["embedder"]),
        ("echo p50 ms (median of rounds)", results["echo_p50_ms"]),
        (
            "store p50 ms with topics vs off",
            f"{stores['assign']} vs {stores['off']} (median ratio {results['ratio']}x of "
            f"{results['rounds']} rounds of {results['stores']}: {results['ratios']})",
        ),
        (
            "worker CPU us per store with topics vs off",
            f"{cpus['assign']} vs {cpus['off']} (median ratio {results['cpu_ratio']}x: "
            f"{results['cpu_ratios']})",
        ),
        (
            f"session::resume p50 ms, {resume['messages']} messages",
            f"{resume['active']['p50_ms']} active, {resume['query']['p50_ms']} with a query "
            f"({resume['p50_vs_echo']}x echo)",
        ),
    ]
