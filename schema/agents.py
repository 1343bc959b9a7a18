"""memory::agents (contract section 20): the agents of a tenant that hold memories, by id, for
the memory browser's first page and for operators."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import UNSET, UnsetType

from schema.base import OverAgents, Reply
from schema.life import Cursor

Prefix = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class AgentsRequest(OverAgents, frozen=True):
    prefix: Prefix | UnsetType = UNSET
    cursor: Cursor | UnsetType = UNSET
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100


class AgentSummary(Reply, frozen=True):
    """`memories` counts those not forgotten; `lastStored` is the newest memory's timestamp,
    forgotten ones included (an agent whose memories are all forgotten is listed, with 0)."""

    agent_id: str
    memories: int
    last_stored: int


class AgentsReply(Reply, frozen=True):
    agents: list[AgentSummary]
    next_cursor: str | None
