"""memory::session::repair: the contract's seven phases, in order, idempotent.

Orphans are dropped before merging so that no orphan hides a same-role pair; merged messages
become one new memory (the originals stay); reordering moves references, never memories.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import apsw

from handlers.session_refs import Ref, read_messages, require_session, write_messages
from handlers.store import insert_memory
from schema.base import Agent, agent_of
from schema.session import RepairReply, RepairRequest, RepairStats

OVERSIZED_BYTES = 500_000


def _memories(conn: apsw.Connection, agent: Agent, ids: list[str]) -> dict[str, tuple[str, float]]:
    """(content, importance) of each id that exists for the agent."""
    return {
        row[0]: (row[1], row[2])
        for row in conn.execute(
            # `+tenant`, `+agent_id`: look the ids up in their index, not by walking the agent.
            "SELECT id, content, importance FROM memories WHERE +tenant = ? AND +agent_id = ? "
            "AND id IN (SELECT value FROM json_each(?))",
            (*agent, json.dumps(ids)),
        )
    }


def _merge_runs(
    conn: apsw.Connection,
    req: RepairRequest,
    refs: list[Ref],
    now: int,
    new_id: Callable[[], str] | None,
) -> tuple[list[Ref], int]:
    """Fold each run of consecutive same-role, non-system messages into one new memory."""
    found = _memories(conn, agent_of(req), [ref[0] for ref in refs if ref[0]])
    merged: list[Ref] = []
    folded = 0
    index = 0
    while index < len(refs):
        end = index + 1
        role = refs[index][1]
        while role != "system" and end < len(refs) and refs[end][1] == role:
            end += 1
        run = refs[index:end]
        if len(run) == 1:
            merged.append(run[0])
        else:
            parts = [found[str(ref[0])] for ref in run]
            first_timestamp = run[0][2]
            memory_id, _, _ = insert_memory(
                conn,
                agent=agent_of(req),
                content="\n\n".join(content for content, _ in parts),
                role=role,
                now=now,
                timestamp=first_timestamp,
                importance=max(importance for _, importance in parts),
                session_id=req.session_id,
                append_to_session=False,
                memory_id=None if new_id is None else new_id(),
            )
            merged.append((memory_id, role, first_timestamp))
            folded += len(run) - 1
        index = end
    return merged, folded


def repair(
    conn: apsw.Connection,
    req: RepairRequest,
    *,
    now: int,
    new_id: Callable[[], str] | None = None,
) -> RepairReply:
    """`new_id` names the memories merged runs become (a write's decision derives them from
    its seed, so a replay names them alike); fresh ids without it."""
    require_session(conn, agent_of(req), req.session_id)
    original = read_messages(conn, agent_of(req), req.session_id)

    refs = [ref for ref in original if ref[0]]
    empty_removed = len(original) - len(refs)

    seen: set[str] = set()
    unique = []
    for ref in refs:
        if ref[0] not in seen:
            seen.add(str(ref[0]))
            unique.append(ref)
    duplicates_removed = len(refs) - len(unique)

    existing = _memories(conn, agent_of(req), [str(ref[0]) for ref in unique])
    present = [ref for ref in unique if ref[0] in existing]
    orphaned = len(unique) - len(present)

    merged, consecutive_merged = _merge_runs(conn, req, present, now, new_id)

    reordered = 0
    ordered: list[Ref] = []
    for memory_id, role, timestamp in merged:
        if ordered and timestamp < ordered[-1][2]:
            timestamp = ordered[-1][2] + 1
            reordered += 1
        ordered.append((memory_id, role, timestamp))

    sizes = {
        row[0]: row[1]
        for row in conn.execute(
            "SELECT id, length(CAST(content AS BLOB)) FROM memories "
            "WHERE +tenant = ? AND +agent_id = ? "
            "AND id IN (SELECT value FROM json_each(?))",
            (*agent_of(req), json.dumps([ref[0] for ref in ordered])),
        )
    }
    oversized = sum(1 for ref in ordered if sizes.get(str(ref[0]), 0) > OVERSIZED_BYTES)

    total = empty_removed + duplicates_removed + orphaned + consecutive_merged + reordered
    if total:
        write_messages(conn, agent_of(req), req.session_id, ordered)
        conn.execute(
            "UPDATE sessions SET repaired_at = ?, updated_at = ? "
            "WHERE tenant = ? AND agent_id = ? AND id = ?",
            (now, now, *agent_of(req), req.session_id),
        )
    return RepairReply(
        repaired=total > 0,
        total_fixes=total,
        stats=RepairStats(
            empty_removed=empty_removed,
            duplicates_removed=duplicates_removed,
            consecutive_merged=consecutive_merged,
            orphaned_refs=orphaned,
            reordered=reordered,
            oversized_detected=oversized,
        ),
    )
