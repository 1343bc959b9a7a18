"""What the database holds, for memory::stats and the metrics endpoint."""

from __future__ import annotations

import apsw

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


def database_counts(conn: apsw.Connection, tenant: str | None = None) -> dict[str, int]:
    """Counts over one tenant's rows, or every tenant's (None); the file's size either way.
    An agent is a (tenant, agentId) pair: `a1` of two tenants counts twice."""
    where, params = ("", ()) if tenant is None else (" WHERE tenant = ?", (tenant,))

    def one(sql: str, params: tuple[str, ...] = params) -> int:
        [(value,)] = conn.execute(sql, params).fetchall()
        return int(str(value))

    return {
        "agents": one(
            f"SELECT count(*) FROM (SELECT DISTINCT tenant, agent_id FROM memories{where})"
        ),
        "memories": one(f"SELECT count(*) FROM memories{where}"),
        "memories_without_vector": one(
            f"SELECT count(*) FROM memories{where or ' WHERE 1'} AND embedding IS NULL"
        ),
        "memories_pinned": one(
            f"SELECT count(*) FROM memories{where or ' WHERE 1'} AND pinned = 1"
        ),
        "memories_forgotten": one(
            f"SELECT count(*) FROM memories{where or ' WHERE 1'} AND forgotten_at IS NOT NULL"
        ),
        "agents_disabled": one(f"SELECT count(*) FROM agent_switch{where}"),
        "entities": one(f"SELECT count(*) FROM kg_entities{where}"),
        "relations": one(f"SELECT count(*) FROM kg_relations{where}"),
        "sessions": one(f"SELECT count(*) FROM sessions{where}"),
        "audit_events": one(f"SELECT count(*) FROM audit{where}"),
        "database_bytes": one(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()", ()
        ),
    }


def memories_by_tenant(conn: apsw.Connection) -> dict[str, int]:
    """Memories per tenant: a metrics label bounded by the accounts the operator configured."""
    return {
        str(tenant): int(str(count))
        for tenant, count in conn.execute("SELECT tenant, count(*) FROM memories GROUP BY tenant")
    }
