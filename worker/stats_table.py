"""`memory-worker stats`: a running worker's memory::stats reply as a readable table."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from handlers.stats import stats_of
from handlers.tables.registered import TABLES
from handlers.tables.table import Table


def _when(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{count} B"
        value /= 1024
    return f"{count} B"


def camel(key: str) -> str:
    """A reply's field as the wire spells it (`kv_keys` -> `kvKeys`)."""
    first, *rest = key.split("_")
    return first + "".join(word.capitalize() for word in rest)


def render(stats: dict[str, Any], tables: Sequence[Table] = TABLES) -> str:
    health = stats.get("health", "ok")
    lines = [f"{'health':<28} {health}" + (f": {stats['healthReason']}" if health != "ok" else "")]
    lines += ["", "trigger                      requests   errors   mean ms"]
    for trigger, figures in sorted(stats["triggers"].items()):
        lines.append(
            f"{trigger:<28} {figures['requests']:>8} {figures['errors']:>8} "
            f"{figures['meanMs']:>9.3f}"
        )
    lines.append("")
    # The reply's counts in its order, each labelled by the table that registers it
    # (handlers/tables/); null when the database is damaged.
    labels = {camel(stat.key): stat.label for stat in stats_of(tables)}
    labels |= {"inFlight": "requests in flight", "indexAgents": "agents in the recall index"}
    for key, value in stats.items():
        if key in labels:
            lines.append(f"{labels[key]:<28} {'?' if value is None else value:>8}")
    lines.append(f"{'database size':<28} {_size(stats['databaseBytes']):>8}")
    lines.append("")
    lines.append("job           cron            next fire                last fire (outcome)")
    for name, job in sorted(stats["schedule"].items()):
        last = _when(job["lastFire"])
        outcome = f" ({job['lastOutcome']})" if job["lastOutcome"] else ""
        cron = job["cron"] or "(off)"
        lines.append(f"{name:<13} {cron:<15} {_when(job['nextFire']):<24} {last}{outcome}")
    # .get: a worker of an earlier version has no lastRun
    runs = [(name, job.get("lastRun")) for name, job in sorted(stats["schedule"].items())]
    if any(run for _, run in runs):
        lines.append("")
        lines.append("job           last run                 source     counts")
        for name, run in runs:
            if run:
                figures = " ".join(f"{key}={value}" for key, value in run["counts"].items())
                figures += " (dry run)" if run["dryRun"] else ""
                lines.append(f"{name:<13} {_when(run['at']):<24} {run['source']:<10} {figures}")
    return "\n".join(lines)
