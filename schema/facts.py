"""Requests and replies of the fact store (contract section 19): memory::fact::assert, end,
retract and query."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from schema.base import ID_PATTERN, AgentId, Id, Millis, Reply, TriggerRequest, Unit

# `lives_in`, `favorite:ice_cream_flavor`: 1-64 characters in all.
PREDICATE_PATTERN = r"\A[a-z][a-z0-9_]*(:[a-z0-9_]+)?\Z"
Predicate = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=PREDICATE_PATTERN)]
Subject = Id
# An object is written as said ("New York", "dark chocolate"): an id's rules, up to 1024.
Object = Annotated[str, msgspec.Meta(min_length=1, max_length=1024, pattern=ID_PATTERN)]
FactStatus = Literal["current", "past", "retracted"]


class FactAssertRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    subject: Subject
    predicate: Predicate
    object: Object
    valid_from: Millis | UnsetType = UNSET  # default: now
    sources: Annotated[list[Id], msgspec.Meta(max_length=100)] = msgspec.field(default_factory=list)
    confidence: Unit = 1.0


class FactEndRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    subject: Subject
    predicate: Predicate
    object: Object | UnsetType = UNSET  # default: every current value
    at: Millis | UnsetType = UNSET  # default: now; never in the future


class FactRetractRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    ids: Annotated[list[Id], msgspec.Meta(min_length=1, max_length=100)]


class FactQueryRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    subject: Subject | UnsetType = UNSET
    predicate: Predicate | UnsetType = UNSET
    object: Object | UnsetType = UNSET
    as_of: Millis | UnsetType = UNSET
    include_history: bool = False
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100


class Fact(Reply, frozen=True):
    id: str
    subject: str
    predicate: str
    object: str
    statement: str
    status: FactStatus
    valid_from: int
    valid_to: int | None
    recorded_at: int
    expired_at: int | None
    confidence: float
    sources: list[str]
    superseded_by: str | None


class FactAssertReply(Reply, frozen=True):
    fact: Fact
    created: bool
    ended: list[str]


class FactEndReply(Reply, frozen=True):
    ended: list[str]


class FactRetractReply(Reply, frozen=True):
    retracted: int
    missing: list[str]


class FactQueryReply(Reply, frozen=True):
    facts: list[Fact]
