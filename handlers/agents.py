"""memory::agents: a tenant's agents that hold memories, in id order, a page at a time
(contract section 20), for the memory browser's first page.

An agent is listed while it has any memory, forgotten ones included. One query walks the
memories' (tenant, agent_id, timestamp, id) index agent by agent and stops after the page, so a
page costs the memories of its own agents, not the tenant's; a second counts the forgotten
memories of those agents through the index of forgotten memories (few: eviction purges them
after a retention), so an agent's count never reads its memories' rows. `prefix` is a range of
that index, never a scan. The cursor holds the last agent id handed out: the next page starts
after it, whichever agents are stored or erased meanwhile, and a shard's partitions can all be
asked from the same cursor (worker/shards/fanout.py `agents_merged`).
"""

from __future__ import annotations

import apsw
from msgspec import UNSET

from handlers.cursors import decode_cursor, encode_cursor
from handlers.grants import grants_clause
from handlers.paging import fitting_page
from schema.agents import AgentsReply, AgentsRequest, AgentSummary
from schema.base import tenant_of

MAX_CHAR = 0x10FFFF
SURROGATES = range(0xD800, 0xE000)


def cursor_scope(req: AgentsRequest) -> tuple[str, str, str | None]:
    """What an agents cursor continues: the tenant and prefix it was made for."""
    return ("agents", tenant_of(req), None if req.prefix is UNSET else req.prefix)


def after_prefix(prefix: str) -> str | None:
    """The least string greater than every string that starts with `prefix` (SQLite compares
    text as UTF-8 bytes, which is code point order); None when there is none."""
    chars = list(prefix)
    while chars:
        point = ord(chars.pop()) + 1
        if point in SURROGATES:
            point = SURROGATES.stop
        if point <= MAX_CHAR:
            return "".join(chars) + chr(point)
    return None


def list_agents(conn: apsw.Connection, req: AgentsRequest, *, now: int, budget: int) -> AgentsReply:
    tenant = tenant_of(req)
    scope = cursor_scope(req)
    where, params = "tenant = ?", [tenant]
    if req.cursor is not UNSET:
        [last] = decode_cursor(req.cursor, scope, 1)
        where += " AND agent_id > ?"
        params.append(str(last))
    if req.prefix is not UNSET:
        where += " AND agent_id >= ?"
        params.append(req.prefix)
        upper = after_prefix(req.prefix)
        if upper is not None:
            where += " AND agent_id < ?"
            params.append(upper)
    granted, patterns = grants_clause(req.grants)
    rows = conn.execute(
        f"SELECT agent_id, count(*), max(timestamp) FROM memories WHERE {where}{granted} "
        "GROUP BY agent_id ORDER BY agent_id LIMIT ?",
        (*params, *patterns, req.limit + 1),
    ).fetchall()
    page = rows[: req.limit]
    forgotten = _forgotten(conn, tenant, [str(row[0]) for row in page])
    found = [
        AgentSummary(
            agent_id=str(agent_id),
            memories=int(str(count)) - forgotten.get(str(agent_id), 0),
            last_stored=int(str(last)),
        )
        for agent_id, count, last in page
    ]

    def cursor_after(n: int) -> str | None:
        if n == len(found) - 1 and len(rows) <= req.limit:
            return None
        return encode_cursor(scope, (found[n].agent_id,))

    def reply(agents: list[AgentSummary], cursor: str | None) -> AgentsReply:
        return AgentsReply(agents=agents, next_cursor=cursor)

    return fitting_page(found, req.limit, budget, reply, cursor_after, "agent")


def _forgotten(conn: apsw.Connection, tenant: str, agents: list[str]) -> dict[str, int]:
    """How many forgotten memories each of the agents holds (those with none left out)."""
    if not agents:
        return {}
    marks = ", ".join("?" for _ in agents)
    return {
        str(agent_id): int(str(count))
        for agent_id, count in conn.execute(
            "SELECT agent_id, count(*) FROM memories INDEXED BY memories_forgotten "
            f"WHERE tenant = ? AND agent_id IN ({marks}) AND forgotten_at IS NOT NULL "
            "GROUP BY agent_id",
            (tenant, *agents),
        )
    }
