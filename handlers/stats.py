"""What the database holds, for memory::stats and the metrics endpoint: the counts each table's
registration declares (handlers/tables/), taken over one scope."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import apsw

from handlers.tables.registered import MEMORY_TABLES, TABLES
from handlers.tables.table import CountScope, Stat, Table
from schema.stats import StatsReply

# Every count's key, in the registration order (null each when the database is damaged).
COUNTED = tuple(stat.key for table in TABLES for stat in table.stats)


def stats_of(tables: Sequence[Table] = TABLES) -> list[Stat]:
    """The counts the tables register, in their order."""
    return [stat for table in tables for stat in table.stats]


def table_counts(
    conn: apsw.Connection,
    tenant: str | None = None,
    grants: Sequence[str] | None = None,
    *,
    now: int,
    tables: Sequence[Table] = TABLES,
) -> dict[str, int]:
    """Every registered count over one tenant's rows, or every tenant's (None), and within it
    over the agents `grants` match (None: every agent); `now` is when the task board is read
    (an expired claim is pending). An agent is a (tenant, agentId) pair: `a1` of two tenants
    counts twice."""
    scope = CountScope(tenant, grants, now)
    return {stat.key: stat.count(conn, scope) for stat in stats_of(tables)}


def page_bytes(conn: apsw.Connection) -> int:
    """The size of the database's pages."""
    [(value,)] = conn.execute(
        "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
    ).fetchall()
    return int(str(value))


def database_counts(
    conn: apsw.Connection, tenant: str | None = None, grants: Sequence[str] | None = None
) -> dict[str, int]:
    """The counts of memories and what hangs off them (registered.MEMORY_TABLES: none depends
    on the time) and the size of the file's pages."""
    counts = table_counts(conn, tenant, grants, now=0, tables=MEMORY_TABLES)
    return counts | {"database_bytes": page_bytes(conn)}


def reply_counts(counts: Mapping[str, int | None]) -> dict[str, Any]:
    """The counts memory::stats replies with: those its reply has a field for."""
    return {key: value for key, value in counts.items() if key in StatsReply.__struct_fields__}


def memories_by_tenant(conn: apsw.Connection) -> dict[str, int]:
    """Memories per tenant: a metrics label bounded by the accounts the operator configured."""
    return {
        str(tenant): int(str(count))
        for tenant, count in conn.execute("SELECT tenant, count(*) FROM memories GROUP BY tenant")
    }
