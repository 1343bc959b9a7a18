"""What the database holds, for memory::stats and the metrics endpoint."""

from __future__ import annotations

import apsw

COUNTED = ("agents", "memories", "memories_without_vector", "entities", "relations", "sessions")


def database_counts(conn: apsw.Connection) -> dict[str, int]:
    def one(sql: str) -> int:
        [(value,)] = conn.execute(sql).fetchall()
        return int(str(value))

    return {
        "agents": one("SELECT count(DISTINCT agent_id) FROM memories"),
        "memories": one("SELECT count(*) FROM memories"),
        "memories_without_vector": one("SELECT count(*) FROM memories WHERE embedding IS NULL"),
        "entities": one("SELECT count(*) FROM kg_entities"),
        "relations": one("SELECT count(*) FROM kg_relations"),
        "sessions": one("SELECT count(*) FROM sessions"),
        "database_bytes": one(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
        ),
    }
