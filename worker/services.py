"""What a route needs to execute a trigger: storage, index, embedder, outside services, clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from handlers.recall import KeywordMode
from worker.config import Config
from worker.embedders import Embedder
from worker.readers import Readers
from worker.recall_index.backfill import Backfill
from worker.recall_index.index import MemoryIndex
from worker.writer import Writer


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# Upper bounds (seconds) of the request latency histogram exported as Prometheus metrics.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


@dataclass
class TriggerStats:
    requests: int = 0
    errors: int = 0
    total_ms: float = 0.0
    errors_by_code: dict[str, int] = field(default_factory=dict)
    buckets: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))

    def record(self, duration_ms: float, error_code: str | None) -> None:
        self.requests += 1
        self.total_ms += duration_ms
        if error_code is not None:
            self.errors += 1
            self.errors_by_code[error_code] = self.errors_by_code.get(error_code, 0) + 1
        for at, bound in enumerate(LATENCY_BUCKETS):
            if duration_ms <= bound * 1000:
                self.buckets[at] += 1
                break


@dataclass(frozen=True)
class MaintenanceRun:
    """A maintenance trigger's last success, whoever fired it (worker/maintenance.py)."""

    at: int
    source: str
    counts: dict[str, int]
    dry_run: bool = False


@dataclass
class JobRecord:
    """One maintenance job: its cron ("" when disabled), the last fire time the schedule claimed
    with its outcome, and the last successful run by any source."""

    cron: str
    last_fire: int | None = None
    last_outcome: str | None = None
    last_run: MaintenanceRun | None = None


@dataclass
class Health:
    """Whether a trigger has met a damaged database since start-up (start-up refuses one).

    nats.micro answers $SRV.PING by itself, so a PING reply alone says only that the process
    runs. The service's metadata, which every PING reply carries, is this dict: `memory-worker
    check` (the liveness probe) reads the damage from it, and a restart then stops at the
    start-up check with a line saying why, instead of serving on guesswork."""

    metadata: dict[str, str] = field(default_factory=lambda: {"health": "ok"})

    @property
    def state(self) -> Literal["ok", "corrupt"]:
        return "corrupt" if self.metadata["health"] == "corrupt" else "ok"

    @property
    def reason(self) -> str | None:
        return self.metadata.get("reason")

    def corrupt(self, reason: str) -> None:
        """The first reason stays: later errors are usually the same damage seen again."""
        self.metadata["health"] = "corrupt"
        self.metadata.setdefault("reason", reason)


@dataclass
class Services:
    config: Config
    writer: Writer
    readers: Readers
    index: MemoryIndex
    embedder: Embedder
    nc: Any = None
    keyword_mode: KeywordMode = "share"
    backfill: Backfill | None = None
    clock: Callable[[], int] = wall_clock_ms
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    # Filled in by the app once dispatch and the scheduler exist; read by memory::stats.
    trigger_stats: dict[str, TriggerStats] = field(default_factory=dict)
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    next_fires: Callable[[], dict[str, int]] = dict
    in_flight: Callable[[], int] = lambda: 0
    health: Health = field(default_factory=Health)
