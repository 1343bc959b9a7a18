"""Scheduled maintenance (contract section 10), with an injected clock instead of sleeping."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from scheduler.jobs import CronJob, default_jobs
from scheduler.runner import Scheduler
from tests.support import Client
from worker.app import App
from worker.config import ConfigError, load_config
from worker.db import migrate, open_db
from worker.writer import Writer

UTC_ZONE = ZoneInfo("UTC")


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


class Clock:
    def __init__(self, start: str) -> None:
        self.now = ms(start)

    def __call__(self) -> int:
        return self.now

    def set(self, text: str) -> None:
        self.now = ms(text)


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[Writer]:
    conn = open_db(tmp_path / "memory.db")
    migrate(conn)
    shared = Writer(conn)
    shared.start()
    yield shared
    shared.stop()
    conn.close()


def scheduler_on(writer: Writer, clock: Clock, fired: list[str]) -> Scheduler:
    async def fire(trigger: str, request: bytes) -> object:
        fired.append(trigger)
        return None

    jobs = default_jobs("0 */6 * * *", "0 3 * * *")
    return Scheduler(jobs, tz=UTC_ZONE, writer=writer, fire=fire, clock=clock)


def test_default_expressions_and_fire_times() -> None:
    [consolidate, evict] = default_jobs("0 */6 * * *", "0 3 * * *")
    assert (consolidate.trigger, evict.trigger) == ("memory::consolidate", "memory::evict")
    now = ms("2026-11-22T05:59:59")
    assert consolidate.next_fire(now, UTC_ZONE) == ms("2026-11-22T06:00:00")
    assert consolidate.latest_fire(ms("2026-11-22T06:00:00"), UTC_ZONE) == ms("2026-11-22T06:00:00")
    assert evict.latest_fire(now, UTC_ZONE) == ms("2026-11-22T03:00:00")
    assert default_jobs("", "0 3 * * *")[0].name == "evict"


def test_the_merge_threshold_setting_goes_in_the_scheduled_consolidation_only() -> None:
    """MEMORY_WORKER_MERGE_THRESHOLD: off (0) by default, so the schedule's consolidation is the
    contract's; set, the consolidation asks for merging and eviction is unchanged."""
    assert load_config({}).merge_threshold == 0.0
    [plain, _] = default_jobs("0 */6 * * *", "0 3 * * *", load_config({}).merge_threshold)
    assert plain.request == b"{}"
    config = load_config({"MEMORY_WORKER_MERGE_THRESHOLD": "0.95"})
    [merging, evict] = default_jobs("0 */6 * * *", "0 3 * * *", config.merge_threshold)
    assert json.loads(merging.request) == {"mergeThreshold": 0.95} and evict.request == b"{}"
    with pytest.raises(ConfigError, match="MEMORY_WORKER_MERGE_THRESHOLD"):
        load_config({"MEMORY_WORKER_MERGE_THRESHOLD": "1.5"})


def test_cron_time_zone_is_honoured() -> None:
    job = CronJob("evict", "memory::evict", "0 3 * * *")
    berlin = ZoneInfo("Europe/Berlin")
    assert job.next_fire(ms("2026-11-22T00:00:00"), berlin) == ms("2026-11-22T02:00:00")


async def test_nothing_runs_on_first_start_then_each_fire_time_runs_once(writer: Writer) -> None:
    clock, fired = Clock("2026-11-22T04:00:00"), list[str]()
    scheduler = scheduler_on(writer, clock, fired)
    await scheduler.prepare()
    assert await scheduler.tick() == []
    clock.set("2026-11-22T06:00:00")
    assert await scheduler.tick() == ["consolidate"]
    assert await scheduler.tick() == []
    clock.set("2026-11-23T03:00:30")
    assert sorted(await scheduler.tick()) == ["consolidate", "evict"]
    assert fired.count("memory::evict") == 1


async def test_a_missed_fire_time_runs_once_at_the_next_start(writer: Writer) -> None:
    clock, fired = Clock("2026-11-22T01:00:00"), list[str]()
    first = scheduler_on(writer, clock, fired)
    await first.prepare()
    clock.set("2026-11-24T10:00:00")  # the worker was down for two days
    second = scheduler_on(writer, clock, fired)
    await second.prepare()
    assert sorted(await second.tick()) == ["consolidate", "evict"]
    assert await second.tick() == []
    assert sorted(fired) == ["memory::consolidate", "memory::evict"]


async def test_workers_sharing_a_database_run_each_fire_time_once(
    writer: Writer, tmp_path: Path
) -> None:
    other_conn = open_db(tmp_path / "memory.db")
    other_writer = Writer(other_conn)
    other_writer.start()
    try:
        clock, fired = Clock("2026-11-22T05:00:00"), list[str]()
        one = scheduler_on(writer, clock, fired)
        two = scheduler_on(other_writer, clock, fired)
        await one.prepare()
        await two.prepare()
        clock.set("2026-11-22T06:00:00")
        results = [await one.tick(), await two.tick()]
        assert sorted(results, key=len) == [[], ["consolidate"]]
        assert fired == ["memory::consolidate"]
    finally:
        other_writer.stop()
        other_conn.close()


async def test_run_loop_sleeps_until_the_next_fire_time(writer: Writer) -> None:
    clock, fired, sleeps = Clock("2026-11-22T05:59:00"), list[str](), list[float]()

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.now += int(seconds * 1000)
        if len(sleeps) == 2:
            raise RuntimeError("enough")

    async def fire(trigger: str, request: bytes) -> object:
        fired.append(trigger)
        return None

    jobs = default_jobs("0 */6 * * *", "0 3 * * *")
    scheduler = Scheduler(
        jobs, tz=UTC_ZONE, writer=writer, fire=fire, clock=clock, sleep=fake_sleep
    )
    with pytest.raises(RuntimeError, match="enough"):
        await scheduler.run()
    assert sleeps[0] == 60.0
    assert fired == ["memory::consolidate"]


async def test_scheduled_jobs_go_through_dispatch_and_are_logged(
    client: Client, worker: App, captured_logs: list[MutableMapping[str, Any]]
) -> None:
    assert worker.scheduler is not None
    await worker._fire("memory::evict", b"{}")
    [handled] = [entry for entry in captured_logs if entry["event"] == "trigger.handled"]
    assert handled["trigger"] == "memory::evict" and handled["source"] == "schedule"
    assert handled["outcome"] == "ok"
    assert worker.dispatcher is not None
    assert worker.dispatcher.stats["memory::evict"].requests == 1


async def test_start_logs_each_jobs_next_fire_time_in_iso_with_its_offset(
    writer: Writer, captured_logs: list[MutableMapping[str, Any]]
) -> None:
    """At start, `schedule.next` gives each job's next fire time as ISO 8601 in the cron's time
    zone, with the offset, beside the milliseconds."""
    clock = Clock("2026-11-22T05:59:00")

    async def stop_sleeping(seconds: float) -> None:
        raise RuntimeError("enough")

    async def fire(trigger: str, request: bytes) -> object:
        return None

    jobs = default_jobs("0 */6 * * *", "0 3 * * *")
    berlin = ZoneInfo("Europe/Berlin")
    scheduler = Scheduler(
        jobs, tz=berlin, writer=writer, fire=fire, clock=clock, sleep=stop_sleeping
    )
    with pytest.raises(RuntimeError, match="enough"):
        await scheduler.run()
    nexts = {e["job"]: e for e in captured_logs if e["event"] == "schedule.next"}
    assert nexts["consolidate"]["next_fire"] == "2026-11-22T12:00:00+01:00"
    assert nexts["evict"]["next_fire"] == "2026-11-23T03:00:00+01:00"
    assert nexts["evict"]["next_fire_ms"] == ms("2026-11-23T02:00:00")
    assert nexts["evict"]["cron"] == "0 3 * * *" and nexts["evict"]["tz"] == "Europe/Berlin"


async def test_schedule_fired_carries_iso_times(
    writer: Writer, captured_logs: list[MutableMapping[str, Any]]
) -> None:
    """`schedule.fired` gives the fire time and the job's next one in ISO 8601 with the offset,
    and still the fire time in milliseconds."""
    clock, fired = Clock("2026-11-22T04:00:00"), list[str]()
    scheduler = scheduler_on(writer, clock, fired)
    await scheduler.prepare()
    clock.set("2026-11-22T06:00:05")
    await scheduler.tick()
    [entry] = [e for e in captured_logs if e["event"] == "schedule.fired"]
    assert entry["job"] == "consolidate" and entry["trigger"] == "memory::consolidate"
    assert entry["fire_time"] == "2026-11-22T06:00:00+00:00"
    assert entry["fire_time_ms"] == ms("2026-11-22T06:00:00")
    assert entry["next_fire"] == "2026-11-22T12:00:00+00:00"


def test_importing_the_scheduler_does_not_import_the_worker_runtime() -> None:
    """The scheduler depends on a writer protocol and the telemetry's plain records, not on the
    worker's app, services, writer or dispatch: no import cycle through worker.app."""
    probe = (
        "import sys, scheduler.runner, scheduler.jobs; "
        "print(*sorted(m for m in sys.modules if m.split('.')[0] in ('worker', 'handlers')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == ["worker", "worker.telemetry"]
