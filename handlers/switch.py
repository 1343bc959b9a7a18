"""memory::toggle: an agent's memory switched off for a private conversation, and back on.

While an agent is off (a row in `agent_switch`), store writes nothing, recall and context return
nothing and maintenance leaves its memories alone; nothing it had is touched, so switching it on
again brings everything back. The switch is a decide step (what the request changes, at what
time) and an apply step (the row), like every write, so that shards can log and replay it.
"""

from __future__ import annotations

import apsw
import msgspec

from handlers.audit import Change
from schema.base import Agent, agent_of
from schema.switch import ToggleReply, ToggleRequest

# What maintenance adds to its conditions on `memories`: leave switched-off agents alone.
SWITCHED_ON = (
    " AND NOT EXISTS (SELECT 1 FROM agent_switch AS off "
    "WHERE off.tenant = memories.tenant AND off.agent_id = memories.agent_id)"
)


def switched_off(conn: apsw.Connection, agent: Agent) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM agent_switch WHERE tenant = ? AND agent_id = ?", agent
        ).fetchone()
        is not None
    )


class Toggled(msgspec.Struct, frozen=True):
    """The decision: the agent, the state asked for, whether that changes anything, and when."""

    agent: Agent
    enabled: bool
    changed: bool
    at: int


def decide_toggle(conn: apsw.Connection, req: ToggleRequest, *, now: int) -> Toggled:
    agent = agent_of(req)
    return Toggled(agent, req.enabled, switched_off(conn, agent) == req.enabled, now)


def apply_toggle(conn: apsw.Connection, event: Toggled) -> ToggleReply:
    """Idempotent: switching off what is off keeps the time it was first switched off."""
    if event.enabled:
        conn.execute("DELETE FROM agent_switch WHERE tenant = ? AND agent_id = ?", event.agent)
    else:
        conn.execute(
            "INSERT OR IGNORE INTO agent_switch (tenant, agent_id, disabled_at) VALUES (?, ?, ?)",
            (*event.agent, event.at),
        )
    return ToggleReply(enabled=event.enabled)


def toggled_changes(event: Toggled) -> list[Change]:
    """Audited with the state it set, when it changed one: like the other idempotent writes, a
    toggle to the state the agent is in already records nothing."""
    return (
        [Change(event.agent, count=1, detail={"enabled": event.enabled})] if event.changed else []
    )
