"""`memory-worker bench --floor N`: recall against the NATS floor, as issue 33 states its goal
(the default mode's p50 at most 4x the echo's at 20 000 memories, `formula` at most 3x). One
round is the echo's round trips, then the sequential recalls; each round's p50s and their ratio,
and the medians over the rounds, so that a machine busy for a moment moves one round, not the
figure."""

from __future__ import annotations

import statistics
from typing import Any

from worker.bench.client import BenchClient, percentiles

ECHOES = 300


async def measure_floor(
    client: BenchClient, floor: BenchClient, queries: list[Any], rounds: int
) -> dict[str, Any]:
    """`rounds` rounds of ECHOES echo round trips then one recall of each query, in turn."""
    found = []
    for _ in range(rounds):
        echo = [(await floor.timed_at("bench.echo", {"x": 1}))[0] for _ in range(ECHOES)]
        recall = [(await client.timed("memory::recall", query))[0] for query in queries]
        echo_p50, recall_p50 = percentiles(echo)["p50_ms"], percentiles(recall)["p50_ms"]
        found.append(
            {"echo_p50_ms": echo_p50, "recall_p50_ms": recall_p50, "ratio": recall_p50 / echo_p50}
        )
    return {
        "rounds": found,
        "echo_p50_ms": round(statistics.median(r["echo_p50_ms"] for r in found), 3),
        "recall_p50_ms": round(statistics.median(r["recall_p50_ms"] for r in found), 3),
        "ratio": round(statistics.median(r["ratio"] for r in found), 2),
    }


def floor_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    if "floor" not in results:
        return []
    found = results["floor"]
    each = ", ".join(f"{r['ratio']:.2f}" for r in found["rounds"])
    return [
        (f"recall p50 / echo p50, median of {len(found['rounds'])} rounds", found["ratio"]),
        ("  their recall p50 / echo p50 ms", f"{found['recall_p50_ms']} / {found['echo_p50_ms']}"),
        ("  each round's ratio", each),
    ]
