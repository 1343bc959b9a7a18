"""The cron schedule on a shard: each owner runs the jobs for the partitions it owns, over their
agents, and claims each fire time in the partition's log (SCALE.md "Across agents"), so the
claim moves with the partition: a new owner after a failover does not run a fire time again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from handlers.audit import Call
from scheduler.jobs import Schedule
from scheduler.runner import Scheduler, claim, remember_start
from schema.errors import WorkerError
from worker.audit import CALL
from worker.services import Services
from worker.telemetry import JobRecord
from worker.writes import Write, commit

REMEMBERED = "memory::schedule:remember"
CLAIMED = "memory::schedule:claim"


class FireTime(msgspec.Struct, frozen=True):
    job: str
    fire_ms: int


REMEMBER: Write[FireTime, None] = Write(
    decision=FireTime,
    decide=lambda conn, fire, now, _: fire,
    apply=lambda conn, f: remember_start(conn, f.job, f.fire_ms),
    reply=lambda fire, _: None,
    changes=lambda fire, _: (),
)
CLAIM: Write[FireTime, bool] = Write(
    decision=FireTime,
    decide=lambda conn, fire, now, _: fire,
    apply=lambda conn, f: claim(conn, f.job, f.fire_ms),
    reply=lambda fire, won: won,
    changes=lambda fire, won: (),
)
CRON_WRITES: dict[str, Write[Any, Any]] = {REMEMBERED: REMEMBER, CLAIMED: CLAIM}


class LoggedClaims:
    """The scheduler's claims (scheduler/runner.py Claims) as writes of the partition."""

    def __init__(self, services: Services) -> None:
        self._services = services

    async def remember(self, job: str, fire_ms: int) -> None:
        await commit(self._services, REMEMBERED, REMEMBER, FireTime(job, fire_ms))

    async def claim(self, job: str, fire_ms: int) -> bool:
        won: bool = await commit(self._services, CLAIMED, CLAIM, FireTime(job, fire_ms))
        return won


@dataclass(frozen=True)
class Fired:
    """What the scheduler reads of a job it fired: the error, if any."""

    error: WorkerError | None


def partition_scheduler(
    services: Services,
    schedule: Schedule,
    records: dict[str, JobRecord],
    clock: Callable[[], int] | None = None,
) -> Scheduler:
    """The schedule for one owned partition: its jobs run over the partition's agents (a
    request without agentId acts on every agent the partition's file holds)."""
    from worker.dispatch import execute
    from worker.registry import BY_TRIGGER

    async def fire(trigger: str, request: bytes) -> Fired:
        route = BY_TRIGGER[trigger]
        token = CALL.set(Call(trigger, "schedule", None))
        try:
            await execute(services, route, msgspec.json.decode(request, type=route.request_type))
        except WorkerError as error:
            return Fired(error)
        finally:
            CALL.reset(token)
        return Fired(None)

    return Scheduler(
        list(schedule.jobs),
        tz=schedule.tz,
        fire=fire,
        clock=clock or services.clock,
        records=records,
        claims=LoggedClaims(services),
    )
