"""Fires due jobs through dispatch, at most once per fire time across every worker on the file.

A fire time is claimed in the database (an UPDATE only one worker can win) before it runs, so
several workers sharing the database do not run it twice, and a worker that starts after a
missed fire time runs it once. A worker that dies after its claim and before the job finishes
does not run it again: the next fire time does the work (evict and consolidate are resumable).
The clock and the sleep are injected so tests need not wait.

It depends on the worker only through what it is handed: something that runs a function on
the database's writer (`Writes`), the fire function (dispatch), and the job records of the
worker's telemetry (plain records in worker/telemetry.py), so importing the scheduler does not
import the worker's runtime (tests/test_scheduler.py checks).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import Protocol, TypeVar
from zoneinfo import ZoneInfo

import apsw
import structlog

from scheduler.jobs import CronJob
from worker.telemetry import JobRecord

log = structlog.get_logger()
Fire = Callable[[str, bytes], Awaitable[object]]
T = TypeVar("T")


class Writes(Protocol):
    """The database's single writer (worker/writer.py `Writer`): runs fn in one transaction."""

    async def run(self, fn: Callable[[apsw.Connection], T], *, durable: bool = True) -> T: ...


def remember_start(conn: apsw.Connection, job: str, fire_ms: int) -> None:
    """First start on this file: nothing was missed before now."""
    conn.execute(
        "INSERT INTO schedule_claims (job, last_fire) VALUES (?, ?) ON CONFLICT (job) DO NOTHING",
        (job, fire_ms),
    )


def claim(conn: apsw.Connection, job: str, fire_ms: int) -> bool:
    conn.execute(
        "UPDATE schedule_claims SET last_fire = ? WHERE job = ? AND last_fire < ?",
        (fire_ms, job, fire_ms),
    )
    return conn.changes() == 1


class Claims(Protocol):
    """Where fire times are remembered and claimed: the database's writer here; a shard logs
    its claims in the partition's log (worker/shards/cron.py), so that a new owner after a
    failover does not run a fire time again."""

    async def remember(self, job: str, fire_ms: int) -> None: ...

    async def claim(self, job: str, fire_ms: int) -> bool: ...


class WriterClaims:
    def __init__(self, writer: Writes) -> None:
        self._writer = writer

    async def remember(self, job: str, fire_ms: int) -> None:
        await self._writer.run(partial(remember_start, job=job, fire_ms=fire_ms))

    async def claim(self, job: str, fire_ms: int) -> bool:
        return await self._writer.run(partial(claim, job=job, fire_ms=fire_ms))


class Scheduler:
    def __init__(
        self,
        jobs: list[CronJob],
        *,
        tz: ZoneInfo,
        writer: Writes | None = None,
        fire: Fire,
        clock: Callable[[], int],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        records: dict[str, JobRecord] | None = None,
        claims: Claims | None = None,
    ) -> None:
        """Fire times are claimed through `claims`, or on `writer` when it is not given."""
        self.jobs = jobs
        self._tz = tz
        if claims is None:
            assert writer is not None, "a scheduler needs a writer or its claims"
            claims = WriterClaims(writer)
        self._claims = claims
        self._fire = fire
        self._clock = clock
        self._sleep = sleep
        self.records = records if records is not None else {}
        for job in jobs:  # a run fired by hand before the scheduler existed may have made one
            self.records.setdefault(job.name, JobRecord(cron=job.expression)).cron = job.expression

    async def prepare(self) -> None:
        now = self._clock()
        for job in self.jobs:
            fire_ms = job.latest_fire(now, self._tz)
            await self._claims.remember(job.name, fire_ms)

    async def tick(self) -> list[str]:
        """Run each job whose latest fire time no worker has claimed yet; return their names."""
        now = self._clock()
        fired = []
        for job in self.jobs:
            fire_ms = job.latest_fire(now, self._tz)
            won = await self._claims.claim(job.name, fire_ms)
            if won:
                log.info(
                    "schedule.fired",
                    job=job.name,
                    trigger=job.trigger,
                    fire_time=self.iso(fire_ms),
                    fire_time_ms=fire_ms,
                    next_fire=self.iso(job.next_fire(now, self._tz)),
                )
                outcome = await self._fire(job.trigger, job.request)
                error = getattr(outcome, "error", None)
                record = self.records[job.name]
                record.last_fire = fire_ms
                record.last_outcome = "ok" if error is None else str(error.code)
                fired.append(job.name)
        return fired

    def iso(self, ms: int) -> str:
        """ISO 8601 in the cron's time zone, with its offset: what an operator compares with
        the cron expression (`0 3 * * *` in Europe/Berlin is `03:00:00+01:00`)."""
        return datetime.fromtimestamp(ms / 1000, self._tz).isoformat()

    def log_next_fires(self) -> None:
        for job in self.jobs:
            fire_ms = job.next_fire(self._clock(), self._tz)
            log.info(
                "schedule.next",
                job=job.name,
                trigger=job.trigger,
                cron=job.expression,
                tz=self._tz.key,
                next_fire=self.iso(fire_ms),
                next_fire_ms=fire_ms,
            )

    async def run(self) -> None:
        """Catch up on missed fire times, then sleep until each next one, until cancelled."""
        if not self.jobs:
            return
        await self.prepare()
        self.log_next_fires()
        while True:
            try:
                await self.tick()
            except Exception as error:
                log.error("schedule.failed", error=type(error).__name__)
            wake = min(job.next_fire(self._clock(), self._tz) for job in self.jobs)
            await self._sleep(max(0.0, (wake - self._clock()) / 1000))
