"""memory::agents (contract section 20): a tenant's agents, paged by id, for the memory browser
and operators. It names no agent, so in sharded mode every partition is asked and their pages
merged by id (worker/shards/fanout.py `agents_merged`); a user with grants sees the agents they
match (the request carries them as `grants`, handlers/grants.py)."""

from __future__ import annotations

from typing import Any

from handlers.agents import list_agents
from schema.agents import AgentsReply, AgentsRequest
from worker.route import Route, every_agent
from worker.shards.fanout import agents_merged

AGENTS = Route(
    "memory::agents",
    AgentsRequest,
    reply_type=AgentsReply,
    read=list_agents,
    scope=every_agent(agents_merged),
)
ROUTES: tuple[Route[Any, Any], ...] = (AGENTS,)
