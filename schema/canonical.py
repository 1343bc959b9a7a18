"""Requests and replies of canonical sessions (contract section 14): memory::canonical::get and
append, one conversation per (agentId, userId) across the channels a user reaches the agent on."""

from __future__ import annotations

from typing import Annotated

import msgspec

from schema.base import ID_PATTERN, AgentId, Id, Reply, Role, TriggerRequest

# The messages live in the session `canonical:<userId>`, and a session id is at most 256
# characters: a user id leaves room for the prefix.
SESSION_PREFIX = "canonical:"
UserId = Annotated[
    str, msgspec.Meta(min_length=1, max_length=256 - len(SESSION_PREFIX), pattern=ID_PATTERN)
]
# Where the message came from (`slack`, `web`, `voice`): an id, so never blank.
Channel = Id


class CanonicalGetRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    user_id: UserId


class CanonicalSession(Reply, frozen=True):
    """`summary` is null until the session's first compaction."""

    summary: str | None
    last_channel: str
    message_count: int
    updated_at: int


class CanonicalAppendRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    user_id: UserId
    channel: Channel
    role: Role
    content: str


class CanonicalAppendReply(Reply, frozen=True, omit_defaults=True):
    """`id` is null, and `disabled` true, when the agent's memory is switched off (section 17):
    nothing was written and `messageCount` is the count as it stands."""

    id: str | None
    message_count: int
    disabled: bool = False
