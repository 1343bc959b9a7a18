"""Requests and replies of memory::session::list, compact and repair (contract section 7)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from schema.base import AgentId, Reply, SessionId, TriggerRequest

Count = Annotated[int, msgspec.Meta(ge=0, le=100_000)]


class SessionListRequest(TriggerRequest, frozen=True):
    agent_id: AgentId


class SessionSummary(Reply, frozen=True):
    id: str
    message_count: int
    created_at: int
    updated_at: int
    compacted_at: int | None
    repaired_at: int | None


class SessionListReply(Reply, frozen=True):
    sessions: list[SessionSummary]


class CompactRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    session_id: SessionId
    threshold: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 30
    keep_recent: Count = 10


class CompactReply(Reply, frozen=True, omit_defaults=True):
    """`reason` appears only when nothing was compacted; the other fields only when it was."""

    compacted: bool
    reason: str | None = None
    summarized: int | None = None
    kept: int | None = None
    summary_id: str | None = None
    summarizer: Literal["llm", "fallback"] | None = None


class RepairRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    session_id: SessionId


class RepairStats(Reply, frozen=True):
    empty_removed: int
    duplicates_removed: int
    consecutive_merged: int
    orphaned_refs: int
    reordered: int
    oversized_detected: int


class RepairReply(Reply, frozen=True):
    repaired: bool
    total_fixes: int
    stats: RepairStats
