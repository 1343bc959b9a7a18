"""Every table of the database, in the order export files carry them, import applies them and
erasure removes them (a table whose records refer to another's comes after it).

A new table is its migration and its registration, here in its group (tests/test_tables.py
fails on a table of the schema missing from TABLES).
"""

from __future__ import annotations

from handlers.tables import (
    bookkeeping,
    canonical_sessions,
    facts,
    graph,
    kv_keys,
    memories,
    sessions,
    task_board,
    topics,
    usage_records,
)
from handlers.tables.table import Table

# Memories and what hangs off them (database_counts counts these).
MEMORY_TABLES: tuple[Table, ...] = (
    memories.AGENT_SWITCH,
    memories.MEMORIES,
    sessions.SESSION_MESSAGES,
    sessions.SESSIONS,
    topics.TOPICS,
    graph.KG_ENTITIES,
    graph.KG_RELATIONS,
    facts.FACTS,
    facts.FACT_SOURCES,
    bookkeeping.AUDIT,
)
# State beside memories (contract section 14).
STATE_TABLES: tuple[Table, ...] = (
    kv_keys.KV,
    task_board.TASKS,
    usage_records.USAGE,
    usage_records.USAGE_DAYS,
    canonical_sessions.CANONICAL_SESSIONS,
)
BOOKKEEPING_TABLES: tuple[Table, ...] = (
    bookkeeping.INGESTED,
    bookkeeping.MEMORY_CHANGES,
    bookkeeping.MEMORY_CHANGES_TRIMMED,
    bookkeeping.SCHEDULE_CLAIMS,
    bookkeeping.SHARD_LOG,
)
TABLES: tuple[Table, ...] = (*MEMORY_TABLES, *STATE_TABLES, *BOOKKEEPING_TABLES)
