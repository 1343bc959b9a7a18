"""The cron table: which trigger fires when, with its default request."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import msgspec
from croniter import croniter


@dataclass(frozen=True)
class CronJob:
    name: str
    trigger: str
    expression: str
    request: bytes = b"{}"

    def latest_fire(self, now_ms: int, tz: ZoneInfo) -> int:
        """The last fire time at or before now_ms (ms since the epoch)."""
        now = datetime.fromtimestamp(now_ms / 1000, tz)
        upcoming = croniter(self.expression, now - timedelta(milliseconds=1)).get_next(datetime)
        if _ms(upcoming) <= now_ms:
            return _ms(upcoming)
        return _ms(croniter(self.expression, now).get_prev(datetime))

    def next_fire(self, now_ms: int, tz: ZoneInfo) -> int:
        """The first fire time strictly after now_ms."""
        now = datetime.fromtimestamp(now_ms / 1000, tz)
        return _ms(croniter(self.expression, now).get_next(datetime))


@dataclass(frozen=True)
class Schedule:
    """The cron table with its time zone: what the configuration says, before anything runs."""

    jobs: tuple[CronJob, ...]
    tz: ZoneInfo

    def next_fires(self, now_ms: int) -> dict[str, int]:
        """Each job's first fire time strictly after now_ms."""
        return {job.name: job.next_fire(now_ms, self.tz) for job in self.jobs}


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def default_jobs(
    consolidate_cron: str, evict_cron: str, merge_threshold: float = 0.0
) -> list[CronJob]:
    """The maintenance jobs of contract section 10; an empty expression disables one. A merge
    threshold above 0 (MEMORY_WORKER_MERGE_THRESHOLD) goes in each consolidation's request."""
    consolidate = b"{}"
    if merge_threshold > 0:
        consolidate = msgspec.json.encode({"mergeThreshold": merge_threshold})
    jobs = [
        CronJob("consolidate", "memory::consolidate", consolidate_cron, consolidate),
        CronJob("evict", "memory::evict", evict_cron),
    ]
    return [job for job in jobs if job.expression]
