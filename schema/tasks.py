"""Requests and replies of the task board (contract section 14): memory::task::post, claim,
complete and list."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from schema.base import AgentId, Id, OverAgents, Reply, TriggerRequest
from schema.kv import JsonValue
from schema.life import Cursor

Status = Literal["pending", "claimed", "completed"]
# A claim lasts from a second to 30 days.
ClaimTimeout = Annotated[int, msgspec.Meta(ge=1000, le=30 * 86_400_000)]
MAX_TEXT_BYTES = 64 * 1024


class TaskPostRequest(TriggerRequest, frozen=True):
    title: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
    created_by: AgentId
    description: str | UnsetType = UNSET  # at most 64 KiB (413)
    assignee: AgentId | UnsetType = UNSET
    claim_timeout: ClaimTimeout = 600_000


class TaskPostReply(Reply, frozen=True):
    task_id: str


class TaskClaimRequest(TriggerRequest, frozen=True):
    agent_id: AgentId


class Task(Reply, frozen=True):
    task_id: str
    title: str
    description: str | None
    status: Status
    created_by: str
    assignee: str | None
    claimed_by: str | None
    result: Any
    created_at: int
    claimed_at: int | None
    completed_at: int | None


class TaskClaimReply(Reply, frozen=True):
    task: Task | None


class TaskCompleteRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    task_id: Id
    result: JsonValue  # any JSON but null, at most 64 KiB (413)


class TaskCompleteReply(Reply, frozen=True):
    task: Task


class TaskListRequest(OverAgents, frozen=True):
    status: Status | UnsetType = UNSET
    assignee: AgentId | UnsetType = UNSET
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100
    cursor: Cursor | UnsetType = UNSET


class TaskListReply(Reply, frozen=True):
    tasks: list[Task]
    next_cursor: str | None
