"""Requests and replies of memory::topic::list and memory::topic::get (contract section 21)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from schema.base import AgentId, Reply, SessionId, StoredId, TriggerRequest
from schema.life import Cursor, SessionMessage


class TopicListRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    session_id: SessionId


class TopicGetRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    topic_id: StoredId
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 200
    cursor: Cursor | UnsetType = UNSET


class OpenLoop(Reply, frozen=True):
    """A question not yet answered (`question`), or a promise or to-do not yet done
    (`promise`, `todo`); `messageId` is the message that opened it, `role` its speaker."""

    kind: Literal["question", "promise", "todo"]
    text: str
    message_id: str
    role: str


class Topic(Reply, frozen=True):
    """`active`: the topic of the session's latest message; `openLoops`: questions not yet
    answered and promises and to-dos not yet done, each with the message that opened it."""

    id: str
    session_id: str
    title: str
    labels: list[str]
    summary: str
    open_loops: list[OpenLoop]
    message_count: int
    first_at: int
    last_active_at: int
    active: bool


class TopicListReply(Reply, frozen=True):
    topics: list[Topic]


class TopicGetReply(Reply, frozen=True):
    topic: Topic
    messages: list[SessionMessage]
    next_cursor: str | None


class SessionResumeRequest(TriggerRequest, frozen=True):
    """The topic named (`topicId`), else the one `query` names best, else the active one."""

    agent_id: AgentId
    session_id: SessionId
    query: Annotated[str, msgspec.Meta(max_length=4096)] | UnsetType = UNSET
    topic_id: StoredId | UnsetType = UNSET
    max_chars: Annotated[int, msgspec.Meta(ge=200, le=100_000)] = 4000


class SessionResumeReply(Reply, frozen=True):
    """`topicId` null when the session has no topic yet (the text is then the empty block)."""

    text: str
    topic_id: str | None
    truncated: bool
