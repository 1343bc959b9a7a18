"""The cron schedule on a shard: each owner runs the jobs for the partitions it owns, over their
agents, and claims each fire time in the partition's log (worker/shards/claims.py), so the
claim moves with the partition: a new owner after a failover does not run a fire time again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from handlers.audit import Call
from scheduler.jobs import Schedule
from scheduler.runner import Scheduler
from schema.errors import WorkerError
from worker.audit import CALL
from worker.dispatch import execute
from worker.registry import BY_TRIGGER
from worker.services import Services
from worker.shards.claims import LoggedClaims
from worker.telemetry import JobRecord


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
