"""memory::stats, an extension of the contract: what a running worker has done and holds."""

from __future__ import annotations

from schema.base import Reply, Request


class StatsRequest(Request, frozen=True):
    pass


class TriggerFigures(Reply, frozen=True):
    requests: int
    errors: int
    mean_ms: float


class JobFigures(Reply, frozen=True):
    cron: str
    next_fire: int
    last_fire: int | None
    last_outcome: str | None


class StatsReply(Reply, frozen=True):
    triggers: dict[str, TriggerFigures]
    agents: int
    memories: int
    # Waiting for the backfill, or left without one (embedder `none`, a failed embedding call).
    memories_without_vector: int
    entities: int
    relations: int
    sessions: int
    database_bytes: int
    in_flight: int
    index_agents: int
    schedule: dict[str, JobFigures]
