"""Requests and replies of a memory's life (contract section 12): get, list, update, forget,
unforget, delete, erase, session::get, kg::delete and audit, and the filters list and recall
share."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from schema.base import (
    AgentId,
    EntityId,
    Id,
    Millis,
    OverAgents,
    Reply,
    Request,
    Role,
    SessionId,
    TriggerRequest,
    Unit,
)
from schema.taxonomy import (
    AnyCategories,
    AnyTags,
    Category,
    RecallPolicy,
    Sensitivity,
    Tags,
)

WEEK_MS = 7 * 86_400_000
# What a reply may hand back to continue a listing: opaque to the caller (worker/cursors.py).
Cursor = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
MemoryIds = Annotated[list[Id], msgspec.Meta(min_length=1, max_length=1000)]
Roles = Annotated[list[Role], msgspec.Meta(min_length=1, max_length=3)]


class Filters(TriggerRequest, frozen=True, kw_only=True):
    """What list and recall both accept: a memory passes when it matches every filter given."""

    session_id: SessionId | UnsetType = UNSET
    roles: Roles | UnsetType = UNSET
    since: Millis | UnsetType = UNSET  # timestamp >= since
    until: Millis | UnsetType = UNSET  # timestamp < until
    # Every top-level key must equal, as JSON, the same key of the memory's metadata.
    metadata: dict[str, Any] | UnsetType = UNSET
    pinned: bool | UnsetType = UNSET
    # Section 13: any of these categories (one, or a list), any of these tags (a list: msgspec
    # 0.22 crashes at exit after building a decoder for a union of a pattern-checked string and
    # a list), a sensitivity at most this one.
    category: Category | AnyCategories | UnsetType = UNSET
    tags: AnyTags | UnsetType = UNSET
    max_sensitivity: Sensitivity | UnsetType = UNSET


class MemoryOut(Reply, frozen=True):
    """A memory as get, list and update return it: recall's fields without `score`."""

    id: str
    role: str
    content: str
    timestamp: int
    session_id: str | None
    importance: float
    confidence: float
    access_count: int
    last_accessed: int
    metadata: dict[str, Any] | None
    pinned: bool
    forgotten_at: int | None
    summary: str | None
    category: str
    sensitivity: str
    recall_policy: str
    tags: list[str]
    flags: list[str]


class GetRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    ids: Annotated[list[Id], msgspec.Meta(min_length=1, max_length=100)]


class GetReply(Reply, frozen=True):
    memories: list[MemoryOut]
    missing: list[str]


class ListRequest(Filters, frozen=True):
    agent_id: AgentId
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100
    cursor: Cursor | UnsetType = UNSET
    order: Literal["newest", "oldest"] = "newest"
    include_forgotten: bool = False


class ListReply(Reply, frozen=True):
    memories: list[MemoryOut]
    next_cursor: str | None


class UpdateRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    id: Id
    content: str | UnsetType = UNSET
    importance: Unit | UnsetType = UNSET
    metadata: dict[str, Any] | UnsetType = UNSET
    pinned: bool | UnsetType = UNSET
    # Kept unless given; `summary: ""` removes the summary, `tags: []` every tag.
    summary: str | UnsetType = UNSET
    category: Category | UnsetType = UNSET
    sensitivity: Sensitivity | UnsetType = UNSET
    recall_policy: RecallPolicy | UnsetType = UNSET
    tags: Tags | UnsetType = UNSET


class UpdateReply(Reply, frozen=True):
    memory: MemoryOut
    # What the sanitiser did to new content or summary: as a store's reply says it.
    redactions: dict[str, int] = msgspec.field(default_factory=dict)
    flags: list[str] = msgspec.field(default_factory=list)


class IdsRequest(TriggerRequest, frozen=True):
    """forget, unforget and delete: some of one agent's memories by id."""

    agent_id: AgentId
    ids: MemoryIds


class ForgetRequest(IdsRequest, frozen=True):
    pass


class ForgetReply(Reply, frozen=True):
    forgotten: int
    missing: list[str]


class UnforgetRequest(IdsRequest, frozen=True):
    pass


class UnforgetReply(Reply, frozen=True):
    restored: int
    missing: list[str]


class DeleteRequest(IdsRequest, frozen=True):
    pass


class DeleteReply(Reply, frozen=True):
    deleted: int
    missing: list[str]


class EraseRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    # The agentId again: an erasure is never one typo away.
    confirm: str


class EraseReply(Reply, frozen=True):
    memories: int
    sessions: int
    entities: int
    relations: int
    kv_keys: int


class SessionGetRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    session_id: SessionId
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 200
    cursor: Cursor | UnsetType = UNSET


class SessionMessage(Reply, frozen=True):
    position: int
    id: str | None
    role: str
    timestamp: int
    content: str | None  # null where the memory is gone or forgotten


class SessionGetReply(Reply, frozen=True):
    messages: list[SessionMessage]
    next_cursor: str | None


class RelationRef(Request, frozen=True):
    source: EntityId
    type: Id
    target: EntityId


class KgDeleteRequest(TriggerRequest, frozen=True):
    """Either `entityId` (the entity and every relation from or to it) or `relations`."""

    agent_id: AgentId
    entity_id: EntityId | UnsetType = UNSET
    relations: Annotated[list[RelationRef], msgspec.Meta(min_length=1, max_length=1000)] | (
        UnsetType
    ) = UNSET


class KgDeleteReply(Reply, frozen=True):
    entities: int
    relations: int


class AuditRequest(OverAgents, frozen=True):
    agent_id: AgentId | UnsetType = UNSET
    since: Millis | UnsetType = UNSET
    cursor: Cursor | UnsetType = UNSET
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100


class AuditEvent(Reply, frozen=True, omit_defaults=True):
    """`ids` when at most 100 memories changed, else `count` alone; `detail` when the write has
    more to say than which memories (the sanitiser's rules, the switch's state), never content."""

    seq: int
    at: int
    trigger: str
    agent_id: str
    source: str
    requester: str | None
    ids: list[str] | None = None
    count: int | None = None
    detail: dict[str, Any] | None = None


class AuditReply(Reply, frozen=True):
    events: list[AuditEvent]
    next_cursor: str | None
