"""memory::recall's own steps around the ranking (rank.py), the ones that touch the database: the
query's bound, the agent's core memory (its pinned memories, returned apart), the rows of the
memories ranked, and the access each recall counts.

An agent is the pair (tenant, agentId): every read and write here names both, so that a recall
in one tenant can neither return nor count an access of another tenant's memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import apsw
import msgspec

from handlers.life import MEMORY_COLUMNS, memory_out
from handlers.taxonomy import sensitivities_of, string_list
from schema.errors import PayloadTooLarge
from schema.life import MemoryOut
from schema.memory import RecalledMemory, RecallReply, RecallRequest

# What makes a memory part of the agent's core memory: pinned, or recall policy `always`
# (the condition of the memories_core index, migration 0005).
CORE = "pinned = 1 OR recall_policy = 'always'"


def pinned_memories(
    conn: apsw.Connection, tenant: str, agent_id: str, req: RecallRequest
) -> list[MemoryOut]:
    """The agent's core memory: its pinned memories and those whose recall policy is
    `always`, at most 50, highest importance then newest, whatever the filters but
    `maxSensitivity`; none whose policy is `never`; no access is counted."""
    allowed = sensitivities_of(req)
    sensitive = "" if allowed is None else f" AND sensitivity IN ({','.join('?' * len(allowed))})"
    return [
        memory_out(row)
        for row in conn.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND agent_id = ? "
            f"AND ({CORE}) AND recall_policy != 'never' AND forgotten_at IS NULL{sensitive} "
            "ORDER BY importance DESC, timestamp DESC, id LIMIT 50",
            (tenant, agent_id, *(allowed or ())),
        )
    ]


def check_recall(req: RecallRequest, max_query_bytes: int) -> None:
    """A bound on the query: its keywords and embedding cost time in proportion to its length,
    and one huge query would hold up other agents' recalls."""
    if len(req.query) * 4 <= max_query_bytes:  # no UTF-8 character takes more than 4 bytes
        return
    size = len(req.query.encode("utf-8", errors="surrogatepass"))
    if size > max_query_bytes:
        raise PayloadTooLarge(
            f"query is {size} bytes, more than the limit of {max_query_bytes} (at `$.query`)"
        )


def record_access(
    conn: apsw.Connection, tenant: str, agent_id: str, accesses: list[tuple[str, int, int]]
) -> None:
    """Persist recalls' accesses, given as (memory id, accesses, the latest one's time).

    One statement over them all: a statement per memory let go of the GIL once each, and
    hundreds of them (one gathered write) took turns with the recalls on the event loop."""
    merged: dict[str, list[int]] = {}
    for memory_id, count, at in accesses:
        seen = merged.get(memory_id)
        if seen is None:
            merged[memory_id] = [count, at]
        else:  # one row of the statement per memory: an UPDATE uses one match of each row
            seen[0] += count
            seen[1] = max(seen[1], at)
    conn.execute(
        "UPDATE memories SET access_count = access_count + access.count, "
        "last_accessed = max(last_accessed, access.at) "
        "FROM (SELECT value ->> 0 AS id, value ->> 1 AS count, value ->> 2 AS at "
        "FROM json_each(?)) AS access "
        "WHERE memories.id = access.id AND +memories.tenant = ? AND +memories.agent_id = ?",
        (
            msgspec.json.encode([[memory_id, *seen] for memory_id, seen in merged.items()]),
            tenant,
            agent_id,
        ),
    )


def recalled_memories(
    conn: apsw.Connection,
    tenant: str,
    agent_id: str,
    ranked: list[tuple[str, float]],
    access_counts: dict[str, int],
    *,
    now: int,
) -> RecallReply:
    """The reply rows, in rank order, with each memory's access as counted by this recall.

    A memory evicted since it was ranked is left out rather than brought back.
    """
    rows = recalled_rows(conn, tenant, agent_id, [memory_id for memory_id, _ in ranked])
    return recall_reply(rows, ranked, access_counts, now=now)


# The columns of a recalled row: the access count is the one before this recall's; the rowid,
# last, is where a later recall may look the memory up (`recalled_rows`).
RECALLED_COLUMNS = (
    "id, role, content, timestamp, session_id, importance, confidence, metadata, summary, "
    "category, sensitivity, recall_policy, tags, flags, access_count, rowid"
)
ACCESS_COUNT = 14  # its place in a recalled row
ROWID = 15


def recalled_rows(
    conn: apsw.Connection,
    tenant: str,
    agent_id: str,
    memory_ids: list[str],
    rowids: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The rows of these memories that are still there (not forgotten nor evicted), by id:
    RECALLED_COLUMNS, whose access count a recall's own count starts from.

    `rowids`: where memories were found before. A look-up by rowid reads the table alone, by
    id the id's index first (10 rows: about 30 us against 55). A rowid can have become another
    row's (a delete, an import, a VACUUM): a row found by it counts only when its id is the one
    asked for, and the memories not found so are looked up by id."""
    found: dict[str, Any] = {}
    known: dict[int, str] = {}
    if rowids is not None:
        for memory_id in memory_ids:
            rowid = rowids.get(memory_id)  # another thread may forget it meanwhile: no `in`
            if rowid is not None:
                known[rowid] = memory_id
    if known:
        for row in _recalled(conn, "rowid", tenant, agent_id, list(known)):
            if known.get(row[ROWID]) == row[0]:
                found[row[0]] = row
    rest = [memory_id for memory_id in memory_ids if memory_id not in found]
    if rest:
        found.update((row[0], row) for row in _recalled(conn, "id", tenant, agent_id, rest))
    return found


def _recalled(
    conn: apsw.Connection, key: str, tenant: str, agent_id: str, values: list[Any]
) -> Any:
    """The agent's recallable rows whose `key` (rowid or id) is one of `values`."""
    placeholders = ",".join("?" * len(values))
    return conn.execute(
        f"SELECT {RECALLED_COLUMNS} "
        # `+tenant`, `+agent_id`: look rows up by their key, not by scanning the agent.
        "FROM memories WHERE +tenant = ? AND +agent_id = ? AND forgotten_at IS NULL "
        f"AND {key} IN ({placeholders})",
        (tenant, agent_id, *values),
    )


def recall_reply(
    rows: dict[str, Any],
    ranked: list[tuple[str, float]],
    access_counts: dict[str, int],
    *,
    now: int,
) -> RecallReply:
    """The reply: the ranked memories that have a row and a count, in rank order."""
    memories = []
    for memory_id, score in ranked:
        row = rows.get(memory_id)
        if row is None or memory_id not in access_counts:
            continue
        metadata: dict[str, Any] | None = None if row[7] is None else msgspec.json.decode(row[7])
        memories.append(
            RecalledMemory(
                id=row[0],
                role=row[1],
                content=row[2],
                score=score,
                timestamp=row[3],
                session_id=row[4],
                importance=row[5],
                confidence=row[6],
                access_count=access_counts[memory_id],
                last_accessed=now,
                metadata=metadata,
                summary=row[8],
                category=row[9],
                sensitivity=row[10],
                recall_policy=row[11],
                tags=string_list(row[12]),
                flags=string_list(row[13]),
            )
        )
    return RecallReply(memories=memories)
