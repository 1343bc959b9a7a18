"""memory::stats, an extension of the contract: what a running worker has done and holds."""

from __future__ import annotations

from typing import Literal

from msgspec import UNSET, UnsetType

from schema.base import AgentId, OverAgents, Reply


class StatsRequest(OverAgents, frozen=True):
    # Also say whether this agent's memory is switched on (`enabled`, section 17).
    agent_id: AgentId | UnsetType = UNSET


class TriggerFigures(Reply, frozen=True):
    requests: int
    errors: int
    mean_ms: float


class RunFigures(Reply, frozen=True):
    """A maintenance job's last successful run, by the schedule or by hand."""

    at: int
    source: str  # `schedule`, `bus` (memory-worker fire, another service) or `ingest`
    counts: dict[str, int]  # the reply's counts under its own keys (`evicted`, `memoriesDecayed`)
    dry_run: bool


class JobFigures(Reply, frozen=True):
    cron: str  # "" when the schedule does not run it
    next_fire: int
    last_fire: int | None
    last_outcome: str | None
    last_run: RunFigures | None = None


class SanitizerFigures(Reply, frozen=True):
    """Since the worker started: replacements by placeholder type (`email`, `secret`, ...) and
    stored or updated memories by flag (`injection`, `pii:email`, ...)."""

    redactions: dict[str, int]
    flags: dict[str, int]


class FactCounts(Reply, frozen=True):
    """Facts by status (section 19): over the request's scope, or its agent's with `agentId`."""

    current: int
    past: int
    retracted: int


class StatsReply(Reply, frozen=True, omit_defaults=True):
    # "corrupt" once a trigger met a damaged database (healthReason: which, and SQLite's
    # words); the counts below are null when the damage kept them from being taken.
    health: Literal["ok", "corrupt"]
    health_reason: str | None
    triggers: dict[str, TriggerFigures]
    agents: int | None
    memories: int | None
    # Waiting for the backfill, or left without one (embedder `none`, a failed embedding call).
    memories_without_vector: int | None
    memories_pinned: int | None
    # Forgotten (section 12): kept, restorable, until eviction purges them after a retention.
    memories_forgotten: int | None
    # Agents whose memory is switched off (memory::toggle).
    agents_disabled: int | None
    audit_events: int | None
    entities: int | None
    relations: int | None
    sessions: int | None
    # Section 14: keys (`shared` included), tasks by status as the board reads now, usage records
    # and canonical sessions.
    kv_keys: int | None
    tasks_pending: int | None
    tasks_claimed: int | None
    tasks_completed: int | None
    usage_records: int | None
    # Canonical sessions: (agent, user) conversations across channels.
    canonical_sessions: int | None
    facts: FactCounts | None
    database_bytes: int
    in_flight: int
    index_agents: int
    schedule: dict[str, JobFigures]
    sanitizer: SanitizerFigures
    topics: int | None = None  # section 21: the lines of work of sessions
    # Only when the request names an agent: whether its memory is switched on.
    enabled: bool | None = None
