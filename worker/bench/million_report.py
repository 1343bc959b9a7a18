"""What `bench --million` prints: per path, each figure's median over the runs (and the runs),
and the recall p50s as multiples of the NATS echo measured in the same run."""

from __future__ import annotations

from typing import Any

FIGURES = (
    ("stores_per_second", "stores per second (64 in flight)"),
    ("rss_storing_mb", "worker RSS while storing, highest (VmHWM) MB"),
    ("without_vector", "memories without a vector after the stores"),
    ("fill_s", "file written straight, s"),
    ("no_snapshot_first_recall_ms", "first start without a snapshot: first recall ms"),
    ("snapshot_s", "after the first recalls, until the snapshot is on disk, s"),
    ("first_stop_s", "first stop, s"),
    ("stop_s", "stop, s"),
    ("start_s", "start until the service answers, s"),
    ("first_recall_ms", "first recall ms"),
    ("p50_ms", "warm recall p50 ms"),
    ("p99_ms", "warm recall p99 ms"),
    ("echo_p50_ms", "NATS echo p50 ms"),
    ("p50_vs_echo", "warm recall p50 / echo p50"),
    ("rss_start_mb", "worker RSS at start MB"),
    ("rss_mb", "worker RSS after the recalls MB"),
    ("growth_p50_ms", "recall p50 during the growth ms"),
    ("growth_worst_minute_ms", "recall p50 in the growth's worst minute ms"),
    ("growth_vs_before", "recall p50 during the growth / before"),
    ("growth_stores_per_second", "growth: stores per second made"),
    ("after_p50_ms", "recall p50 after the growth ms"),
    ("rss_after_mb", "worker RSS after the growth MB"),
    ("load_ms", "in process: the index's load (or open) ms"),
    ("rank_p50_ms", "in process: warm ranking p50 ms"),
    ("rank_vs_echo", "in process: warm ranking p50 / echo p50"),
    ("max_rss_mb", "in process: peak RSS MB"),
)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def flat(run: dict[str, Any]) -> dict[str, Any]:
    """One run's figures in one level, with the ratios."""
    found = {k: v for k, v in run.items() if not isinstance(v, dict)}
    found.update(run.get("in_process", {}))
    echo = run["echo_p50_ms"]
    found["p50_vs_echo"] = round(run["p50_ms"] / echo, 1)
    found["rank_vs_echo"] = round(found["rank_p50_ms"] / echo, 1)
    growth = run.get("growth")
    if growth:
        found["growth_p50_ms"] = growth["p50_ms"]
        found["growth_worst_minute_ms"] = max(growth["p50_by_minute"])
        found["growth_vs_before"] = round(growth["p50_ms"] / run["p50_ms"], 2)
        found["growth_stores_per_second"] = growth["stores_per_second"]
    return found


def million_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = [
        ("memories in one agent, embedder", f"{results['memories']:,}, {results['embedder']}")
    ]
    for path in ("bus", "first-start", "growth"):
        runs = [flat(run) for run in results.get(path, [])]
        for name, label in FIGURES:
            values = [run[name] for run in runs if isinstance(run.get(name), int | float)]
            if len(values) == len(runs) and values:
                every = ", ".join(str(value) for value in values)
                rows.append((f"{path}: {label}: median (runs)", f"{median(values)} ({every})"))
        if runs:
            before = runs[0]["snapshot_before_start"]
            rows.append((f"{path}: a snapshot on disk before the start", before))
    return rows
