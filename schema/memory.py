"""Requests and replies of memory::store, recall, evict and consolidate (contract sections 2-5)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, UnsetType

from schema.base import (
    AgentId,
    Millis,
    OverAgents,
    Reply,
    Role,
    SessionId,
    StoredId,
    TriggerRequest,
    Unit,
)
from schema.life import Filters, MemoryOut
from schema.taxonomy import Category, RecallPolicy, Sensitivity, Tags

DAY_MS = 86_400_000


class StoreRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    content: str
    role: Role = "user"
    session_id: SessionId | UnsetType = UNSET
    importance: Unit | UnsetType = UNSET
    timestamp: Millis | UnsetType = UNSET
    metadata: dict[str, Any] | UnsetType = UNSET
    summary: str | UnsetType = UNSET
    category: Category = "note"
    sensitivity: Sensitivity = "internal"
    recall_policy: RecallPolicy = "auto"
    tags: Tags | UnsetType = UNSET
    # The topic of its session it joins (section 21): an existing one, or a new id to start one.
    topic_id: StoredId | UnsetType = UNSET


class StoreReply(Reply, frozen=True, omit_defaults=True):
    """`id` is null, and `disabled` true, when the agent's memory is switched off (section 17):
    nothing was written."""

    id: str | None
    stored: bool
    deduplicated: bool
    disabled: bool = False
    # What the sanitiser did (section 13): counts by placeholder type, and the memory's flags;
    # `{}` and `[]` when nothing, left out only of a switched-off agent's reply.
    redactions: dict[str, int] | None = None
    flags: list[str] | None = None
    # The facts its text stated, created or confirmed (section 19); `[]` when none, when
    # deduplicated, with MEMORY_WORKER_FACTS=off, or while the agent is switched off: the
    # reply always has it.
    facts: list[str] | None = None
    # The topic of its session the message is in (section 21); left out without a sessionId.
    topic_id: str | None = None


NOT_STORED = StoreReply(id=None, stored=False, deduplicated=False, disabled=True, facts=[])


class RecallRequest(Filters, frozen=True):
    """Filters (sessionId, roles, since, until, metadata, pinned, category, tags,
    maxSensitivity) as memory::list takes them."""

    agent_id: AgentId
    query: str = ""
    limit: Annotated[int, msgspec.Meta(ge=1, le=100)] = 10
    min_score: Unit | UnsetType = UNSET
    # Also return the agent's pinned memories (its core memory) apart from the ranked ones.
    with_pinned: bool = False


class RecalledMemory(Reply, frozen=True):
    id: str
    role: str
    content: str
    score: float
    timestamp: int
    session_id: str | None
    importance: float
    confidence: float
    access_count: int
    last_accessed: int
    metadata: dict[str, Any] | None
    summary: str | None
    category: str
    sensitivity: str
    recall_policy: str
    tags: list[str]
    flags: list[str]


class RecallReply(Reply, frozen=True, omit_defaults=True):
    """`pinned` only when asked for (`withPinned`)."""

    memories: list[RecalledMemory]
    pinned: list[MemoryOut] | None = None


class EvictRequest(OverAgents, frozen=True):
    max_age: Millis = 30 * DAY_MS
    min_importance: Unit = 0.2
    min_confidence: Unit = 0.1
    cap: Annotated[int, msgspec.Meta(ge=0, le=2**53)] = 10_000
    agent_id: AgentId | UnsetType = UNSET
    dry_run: bool = False
    # Forgotten memories (section 12) older than this are removed for good.
    forgotten_retention: Millis = 7 * DAY_MS


class EvictReply(Reply, frozen=True):
    evicted: int
    purged: int
    stale: int
    low_confidence: int
    over_cap: int
    dry_run: bool
    duration_ms: float


class ConsolidateRequest(OverAgents, frozen=True):
    decay_rate: Unit = 0.05
    agent_id: AgentId | UnsetType = UNSET
    # An extension (README "memory::consolidate"): memories of one agent and role whose vectors'
    # cosine is at least this become one memory. Absent: no merging, as the contract has it.
    merge_threshold: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | UnsetType = UNSET


class ConsolidateReply(Reply, frozen=True):
    memories_decayed: int
    memories_merged: int
    duration_ms: float
