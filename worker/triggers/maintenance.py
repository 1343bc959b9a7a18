"""Maintenance and what operators read: memory::evict, consolidate, stats and audit.

Evict and consolidate are flows that apply their decisions in chunks on the writer
(worker/triggers/chunked.py). Whoever fired them (the schedule, `memory-worker fire`, another
service), operators are told what they did: dispatch calls the row's `report` after a success,
which logs `maintenance.done` with the reply's counts and keeps the job's last run in the
telemetry, for memory::stats. Each may omit the agent (every agent, every partition in sharded
mode: their counts add up) and, from an administrator, the tenant (every tenant).
"""

from __future__ import annotations

from collections.abc import Callable
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import msgspec
import structlog
from msgspec import UNSET

from handlers import audit
from handlers.stats import COUNTED, reply_counts, table_counts
from handlers.switch import switched_off
from handlers.tables.facts import STATUS_SQL, fact_counts
from handlers.tables.table import CountScope
from schema.base import agent_of
from schema.life import AuditReply, AuditRequest
from schema.memory import ConsolidateReply, ConsolidateRequest, EvictReply, EvictRequest
from schema.stats import (
    FactCounts,
    JobFigures,
    RunFigures,
    SanitizerFigures,
    StatsReply,
    StatsRequest,
    TriggerFigures,
)
from worker.db import DAMAGED
from worker.route import Route, agent_or_every
from worker.services import Context, Services
from worker.shards.fanout import audit_pages, counts_added_up
from worker.telemetry import JobRecord, MaintenanceRun, SanitizerCounts, Telemetry
from worker.triggers import chunked

log = structlog.get_logger()


async def stats(s: Services, req: StatsRequest) -> StatsReply:
    """Answers even when the database is damaged: that is when an operator asks."""
    t = s.telemetry
    counts: dict[str, int | None]
    facts: FactCounts | None
    sanitised = t.sanitizer
    enabled = None
    tenant = req.tenant if isinstance(req.tenant, str) else None
    grants = req.grants if isinstance(req.grants, list) else None
    try:
        now = s.clock()
        counts = dict(await s.readers.run(lambda c: table_counts(c, tenant, grants, now=now)))
        facts = FactCounts(**{status: counts[f"facts_{status}"] or 0 for status in STATUS_SQL})
        if req.agent_id is not UNSET:
            agent = agent_of(req)
            enabled = not await s.readers.run(lambda conn: switched_off(conn, agent))
            scope = CountScope(tenant, grants, now)
            facts = FactCounts(
                **await s.readers.run(lambda conn: fact_counts(conn, scope, agent[1]))
            )
    except DAMAGED as error:
        t.health.corrupt(f"memory::stats: {type(error).__name__}: {error}")
        counts, facts = dict.fromkeys(COUNTED), None
    if tenant is not None:  # the tenant's own texts only
        sanitised = t.sanitizer_by_tenant.get(tenant, SanitizerCounts())
    path = Path(s.config.db_path)
    on_disk = sum(
        candidate.stat().st_size
        for candidate in (path, path.with_name(path.name + "-wal"))
        if candidate.exists()
    )
    return StatsReply(
        health=t.health.state,
        health_reason=t.health.reason,
        triggers={
            trigger: TriggerFigures(
                requests=figures.requests,
                errors=figures.errors,
                mean_ms=round(figures.total_ms / max(1, figures.requests), 3),
            )
            for trigger, figures in (
                t.triggers.items() if tenant is None else t.by_tenant.get(tenant, {}).items()
            )
        },
        **reply_counts(counts),
        facts=facts,
        database_bytes=on_disk,
        in_flight=t.in_flight,
        index_agents=s.index.loaded_agents(tenant, granted(grants)),
        schedule=schedule_figures(t, tenant, s.clock()),
        sanitizer=SanitizerFigures(
            redactions=dict(sorted(sanitised.redactions.items())),
            flags=dict(sorted(sanitised.flags.items())),
        ),
        enabled=enabled,
    )


def granted(grants: list[str] | None) -> Callable[[str], bool] | None:
    """Whether an agent id is one of those the grants match; None when no grants limit."""
    if grants is None:
        return None
    return lambda agent_id: any(fnmatchcase(agent_id, pattern) for pattern in grants)


def schedule_figures(t: Telemetry, tenant: str | None, now: int) -> dict[str, JobFigures]:
    """The maintenance jobs as a tenant sees them (None: an operator over every tenant): the
    schedule, and the last run that acted in that tenant alone (an operator: the last run of
    any). A job nobody scheduled shows only to a tenant that ran it."""
    next_fires = t.next_fires(now)
    figures = {}
    for name, record in t.jobs.items():
        run = record.last_run if tenant is None else record.runs_by_tenant.get(tenant)
        if tenant is not None and not record.cron and run is None:
            continue  # run by hand in another tenant
        figures[name] = JobFigures(
            cron=record.cron,
            next_fire=next_fires.get(name, 0),
            last_fire=record.last_fire,
            last_outcome=record.last_outcome,
            last_run=None if run is None else run_figures(run),
        )
    return figures


def counts(reply: msgspec.Struct) -> dict[str, int]:
    """The reply's integer fields (evicted, stale, ..., memories_decayed), by their Python
    names: the same words as the reply's keys, so a log line and a reply read alike."""
    return {
        name: value
        for name, value in msgspec.structs.asdict(reply).items()
        if isinstance(value, int) and not isinstance(value, bool)
    }


def job_name(trigger: str) -> str:
    """The scheduler's name for a maintenance trigger (scheduler/jobs.py): its last part."""
    return trigger.rsplit("::", 1)[-1]


def report(s: Context, trigger: str, source: str, request: Any, reply: Any) -> None:
    figures = counts(reply)
    dry_run = bool(getattr(reply, "dry_run", False))
    job = job_name(trigger)
    log.info(
        "maintenance.done",
        trigger=trigger,
        job=job,
        source=source,
        dry_run=dry_run,
        duration_ms=getattr(reply, "duration_ms", None),
        **figures,
    )
    record = s.telemetry.jobs.setdefault(
        job, JobRecord(cron="")
    )  # fired by hand, not on the schedule
    run = MaintenanceRun(at=s.clock(), source=source, counts=figures, dry_run=dry_run)
    record.last_run = run
    if isinstance(request.tenant, str):  # it acted in that tenant only
        record.runs_by_tenant[request.tenant] = run


def run_figures(run: MaintenanceRun) -> RunFigures:
    """The counts under the reply's own camelCase keys, as the wire spells them."""
    return RunFigures(
        at=run.at,
        source=run.source,
        counts={_camel(name): value for name, value in run.counts.items()},
        dry_run=run.dry_run,
    )


def _camel(name: str) -> str:
    head, *tail = name.split("_")
    return head + "".join(part.title() for part in tail)


EVICT = Route(
    "memory::evict",
    EvictRequest,
    reply_type=EvictReply,
    flow=chunked.evict,
    write=chunked.EVICT_CHUNK,
    also_logs={chunked.AUDIT_RETENTION: chunked.PURGE_AUDIT},
    scope=agent_or_every(counts_added_up),
    timed=True,
    report=report,
    all_tenants=True,
)
CONSOLIDATE = Route(
    "memory::consolidate",
    ConsolidateRequest,
    reply_type=ConsolidateReply,
    flow=chunked.consolidate,
    write=chunked.DECAY,
    also_logs={chunked.MERGE: chunked.MERGE_CHUNK},
    scope=agent_or_every(counts_added_up),
    timed=True,
    report=report,
    all_tenants=True,
)
STATS = Route(
    "memory::stats",
    StatsRequest,
    reply_type=StatsReply,
    flow=stats,
    scope=agent_or_every(counts_added_up),
    all_tenants=True,
)
AUDIT = Route(
    "memory::audit",
    AuditRequest,
    reply_type=AuditReply,
    read=audit.audit_events,
    scope=agent_or_every(audit_pages),
    all_tenants=True,
)
ROUTES: tuple[Route[Any, Any], ...] = (EVICT, CONSOLIDATE, STATS, AUDIT)
