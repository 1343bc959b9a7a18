"""Request and reply of memory::toggle, the memory switch (contract section 17)."""

from __future__ import annotations

from schema.base import AgentId, Reply, TriggerRequest


class ToggleRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    enabled: bool


class ToggleReply(Reply, frozen=True):
    enabled: bool
