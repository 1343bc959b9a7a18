"""What `memory-worker bench` prints: its figures as a table of rows, one figure a row."""

from __future__ import annotations

from typing import Any

from worker.bench.evict import eviction_rows
from worker.bench.filtered import filtered_rows
from worker.bench.floor import floor_rows
from worker.bench.mcp_trip import mcp_rows
from worker.bench.overhead import client_rows
from worker.bench.quality import locomo_rows
from worker.bench.state import state_rows


def table(results: dict[str, Any]) -> str:
    if "state" in results:
        return rows_text(state_rows(results))
    rows = [
        ("embedder", results["embedder"]),
        ("memories in one agent", results["memories"]),
        ("tenancy", results["tenancy"]),
        ("Nats-Request-Info parse us (median)", results["request_info_parse_us"]),
        ("NATS echo p50 / p99 ms", f"{results['echo']['p50_ms']} / {results['echo']['p99_ms']}"),
        ("store p50 / p99 ms", f"{results['store']['p50_ms']} / {results['store']['p99_ms']}"),
        ("store p50 / echo p50", results["store"]["p50_vs_echo"]),
        (f"stores per second ({results['concurrency']} in flight)", results["store"]["per_second"]),
        *(
            [("stores per second, vectors included", results["store"]["embedded_per_second"])]
            if "embedded_per_second" in results["store"]
            else []
        ),
        ("first recall (loads the index) ms", results["first_recall_ms"]),
        ("recall p50 / p99 ms", f"{results['recall']['p50_ms']} / {results['recall']['p99_ms']}"),
        ("recall p50 / echo p50", results["recall"]["p50_vs_echo"]),
        *floor_rows(results),
        (
            "context p50 / p99 ms",
            f"{results['context']['p50_ms']} / {results['context']['p99_ms']}",
        ),
        *(
            [
                ("query embedding p50 ms (builtin)", results["query_embed"]["p50_ms"]),
                (
                    "recall p50 minus embedding p50 ms",
                    round(results["recall"]["p50_ms"] - results["query_embed"]["p50_ms"], 3),
                ),
            ]
            if "query_embed" in results
            else []
        ),
        ("recalls per second (16 in flight)", results["recall"]["per_second_16_in_flight"]),
        (
            "recall p50 / p99 ms while storing",
            f"{results['recall_while_storing']['p50_ms']} / "
            f"{results['recall_while_storing']['p99_ms']}",
        ),
        ("worker RSS before / after MB", f"{results['rss_before_mb']} / {results['rss_after_mb']}"),
        *eviction_rows(results),
        *filtered_rows(results),
        *client_rows(results),
        *mcp_rows(results),
    ]
    if "locomo" in results:
        rows.extend(locomo_rows(results["locomo"], results["embedder"]))
    return rows_text(rows)


def rows_text(rows: list[tuple[str, Any]]) -> str:
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)
