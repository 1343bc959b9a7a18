"""memory::context (contract section 13): what an agent puts in its prompt, rendered from
recall's ranking and the agent's pinned memories."""

from __future__ import annotations

from typing import Annotated

import msgspec

from schema.base import AgentId, Reply
from schema.life import Filters


class ContextRequest(Filters, frozen=True):
    """Recall's filters at the top level; `maxSensitivity` defaults to `internal` here."""

    agent_id: AgentId
    query: str = ""
    max_chars: Annotated[int, msgspec.Meta(ge=200, le=100_000)] = 4000
    # The ranked memories at most; the pinned ones come on top of these.
    limit: Annotated[int, msgspec.Meta(ge=1, le=100)] = 20


class ContextReply(Reply, frozen=True):
    text: str
    memories: list[str]  # the ids in `text`, in its order
    truncated: bool
