"""What maintenance did, told to operators whoever fired it (the schedule, `memory-worker fire`,
another service): a `maintenance.done` log line with the counts, and the job's last run in
memory::stats. Dispatch calls `report` after a success, so the counts are the reply's own."""

from __future__ import annotations

from typing import Any

import msgspec
import structlog

from schema.stats import RunFigures
from worker.services import JobRecord, MaintenanceRun, Services

log = structlog.get_logger()


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


def report(s: Services, trigger: str, source: str, reply: Any) -> None:
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
    record = s.jobs.setdefault(job, JobRecord(cron=""))  # fired by hand, not on the schedule
    record.last_run = MaintenanceRun(at=s.clock(), source=source, counts=figures, dry_run=dry_run)


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
