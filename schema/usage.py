"""Requests and replies of usage accounting (contract section 14): memory::usage::record and
query."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from schema.base import AgentId, Id, Millis, OverAgents, Reply, TriggerRequest

# At most 10^12 per record, so that sums over millions of records stay within SQLite's integers.
Tokens = Annotated[int, msgspec.Meta(ge=0, le=10**12)]
Cost = Annotated[float, msgspec.Meta(ge=0.0, le=1e9)]


class UsageRecordRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    model: Id
    prompt_tokens: Tokens
    completion_tokens: Tokens
    cost_usd: Cost = 0.0
    timestamp: Millis | UnsetType = UNSET  # default: when the worker records it


class UsageRecordReply(Reply, frozen=True):
    recorded: bool


class UsageQueryRequest(OverAgents, frozen=True):
    group_by: Literal["model", "agent", "day"]
    agent_id: AgentId | UnsetType = UNSET
    since: Millis | UnsetType = UNSET  # timestamp >= since
    until: Millis | UnsetType = UNSET  # timestamp < until


class UsageTotals(Reply, frozen=True):
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    events: int


class UsageGroup(UsageTotals, frozen=True):
    key: str


class UsageQueryReply(Reply, frozen=True):
    groups: list[UsageGroup]
    total: UsageTotals
