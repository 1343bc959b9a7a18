"""What the database holds, for memory::stats and the metrics endpoint."""

from __future__ import annotations

from collections.abc import Sequence

import apsw

from handlers.grants import matches_clause

COUNTED = (
    "agents",
    "memories",
    "memories_without_vector",
    "memories_pinned",
    "memories_forgotten",
    "agents_disabled",
    "entities",
    "relations",
    "sessions",
    "audit_events",
)


def database_counts(
    conn: apsw.Connection, tenant: str | None = None, grants: Sequence[str] | None = None
) -> dict[str, int]:
    """Counts over one tenant's rows, or every tenant's (None), and within it over the agents
    `grants` match (None: every agent); the file's size either way. An agent is a (tenant,
    agentId) pair: `a1` of two tenants counts twice."""
    where, params = scope_where(tenant, grants)

    def one(sql: str, params: tuple[str, ...] = params) -> int:
        [(value,)] = conn.execute(sql, params).fetchall()
        return int(str(value))

    return {
        "agents": one(
            f"SELECT count(*) FROM (SELECT DISTINCT tenant, agent_id FROM memories WHERE {where})"
        ),
        "memories": one(f"SELECT count(*) FROM memories WHERE {where}"),
        "memories_without_vector": one(
            f"SELECT count(*) FROM memories WHERE {where} AND embedding IS NULL"
        ),
        "memories_pinned": one(f"SELECT count(*) FROM memories WHERE {where} AND pinned = 1"),
        "memories_forgotten": one(
            f"SELECT count(*) FROM memories WHERE {where} AND forgotten_at IS NOT NULL"
        ),
        "agents_disabled": one(f"SELECT count(*) FROM agent_switch WHERE {where}"),
        "entities": one(f"SELECT count(*) FROM kg_entities WHERE {where}"),
        "relations": one(f"SELECT count(*) FROM kg_relations WHERE {where}"),
        "sessions": one(f"SELECT count(*) FROM sessions WHERE {where}"),
        "audit_events": one(f"SELECT count(*) FROM audit WHERE {where}"),
        "database_bytes": one(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()", ()
        ),
    }


def scope_where(tenant: str | None, grants: Sequence[str] | None) -> tuple[str, tuple[str, ...]]:
    """A WHERE condition over a table with `tenant` and `agent_id` for one tenant (or all) and
    the agents `grants` match (or all), and its parameters."""
    where, params = "1", tuple[str, ...]()
    if tenant is not None:
        where, params = "tenant = ?", (tenant,)
    if grants is not None:
        granted, patterns = matches_clause(grants, "agent_id")
        where, params = f"{where} AND {granted}", (*params, *patterns)
    return where, params


def memories_by_tenant(conn: apsw.Connection) -> dict[str, int]:
    """Memories per tenant: a metrics label bounded by the accounts the operator configured."""
    return {
        str(tenant): int(str(count))
        for tenant, count in conn.execute("SELECT tenant, count(*) FROM memories GROUP BY tenant")
    }
