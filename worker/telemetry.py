"""What the worker has observed since start-up: per-trigger figures, the requests in flight,
the maintenance jobs' last fires and runs, and the database's health.

Built first, before anything that writes or reads it, and handed explicitly to dispatch (which
counts every request), the scheduler (each fire), the maintenance report (each run), the
metrics endpoint and memory::stats (which read it). Plain records and the standard library
only, so that the scheduler can depend on it without depending on the worker's runtime.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

# Upper bounds (seconds) of the request latency histogram exported as Prometheus metrics.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
_BOUNDS_MS = tuple(bound * 1000 for bound in LATENCY_BUCKETS)


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
        at = bisect_left(_BOUNDS_MS, duration_ms)  # the first bound at or above it
        if at < len(_BOUNDS_MS):
            self.buckets[at] += 1


@dataclass(frozen=True)
class MaintenanceRun:
    """A maintenance trigger's last success, whoever fired it (worker/triggers/maintenance.py)."""

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
    # The last run that acted in one tenant only, by tenant: what that tenant's memory::stats
    # shows (a run over every tenant, the schedule's, is the operators' alone).
    runs_by_tenant: dict[str, MaintenanceRun] = field(default_factory=dict)


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


def no_fires(now_ms: int) -> dict[str, int]:
    return {}


@dataclass
class SanitizerCounts:
    """What the sanitiser did to stored and updated texts since start (memory::stats, the
    metrics): replacements by placeholder type, memories by flag."""

    redactions: dict[str, int] = field(default_factory=dict)
    flags: dict[str, int] = field(default_factory=dict)

    def count(self, redactions: dict[str, int], flags: list[str]) -> None:
        for kind, times in redactions.items():
            self.redactions[kind] = self.redactions.get(kind, 0) + times
        for flag in flags:
            self.flags[flag] = self.flags.get(flag, 0) + 1


@dataclass
class Telemetry:
    """`next_fires(now_ms)` is the cron table's (scheduler/jobs.py `Schedule.next_fires`), known
    from the configuration before anything starts; `jobs` has a record for each of its jobs."""

    next_fires: Callable[[int], dict[str, int]] = no_fires
    triggers: dict[str, TriggerStats] = field(default_factory=dict)
    # Under tenancy: each tenant caller's own figures, tenant -> trigger -> figures.
    by_tenant: dict[str, dict[str, TriggerStats]] = field(default_factory=dict)
    in_flight: int = 0
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    health: Health = field(default_factory=Health)
    sanitizer: SanitizerCounts = field(default_factory=SanitizerCounts)
    # The same, by the tenant of the texts: what a tenant's memory::stats shows.
    sanitizer_by_tenant: dict[str, SanitizerCounts] = field(default_factory=dict)

    def sanitized(self, tenant: str, redactions: dict[str, int], flags: list[str]) -> None:
        """What the sanitiser did to one stored or updated text of `tenant` (most texts: nothing,
        which counts nothing; every store passes here)."""
        if not redactions and not flags:
            return
        self.sanitizer.count(redactions, flags)
        counts = self.sanitizer_by_tenant.get(tenant)
        if counts is None:
            self.sanitizer_by_tenant[tenant] = counts = SanitizerCounts()
        counts.count(redactions, flags)

    def count(
        self, trigger: str, duration_ms: float, error_code: str | None, tenant: str | None = None
    ) -> None:
        """`tenant`: the caller's account under tenancy, counted apart as well (bounded: one
        entry per account the operator configured, never per agent)."""
        stats = self.triggers.get(trigger)
        if stats is not None:
            stats.record(duration_ms, error_code)
            if tenant is not None:
                per_trigger = self.by_tenant.setdefault(tenant, {})
                per_trigger.setdefault(trigger, TriggerStats()).record(duration_ms, error_code)
