"""The scheduler's claims of fire times (scheduler/runner.py Claims) as writes of a partition:
logged like any write, so that the claim moves with the partition and a new owner after a
failover does not run a fire time again (worker/shards/cron.py runs the schedule)."""

from __future__ import annotations

from typing import Any

import msgspec

from scheduler.runner import claim, remember_start
from worker.services import Services
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
# What a shard's log may hold of the schedule, by the trigger each is logged under.
CRON_WRITES: dict[str, Write[Any, Any]] = {REMEMBERED: REMEMBER, CLAIMED: CLAIM}


class LoggedClaims:
    """The scheduler's claims on one partition's services."""

    def __init__(self, services: Services) -> None:
        self._services = services

    async def remember(self, job: str, fire_ms: int) -> None:
        await commit(self._services, REMEMBERED, REMEMBER, FireTime(job, fire_ms))

    async def claim(self, job: str, fire_ms: int) -> bool:
        won: bool = await commit(self._services, CLAIMED, CLAIM, FireTime(job, fire_ms))
        return won
