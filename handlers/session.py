"""memory::session::list and memory::session::compact.

Compaction is two steps around the LLM call the worker makes in between: `plan_compaction`
reads what to summarise, `apply_compaction` stores the summary and rewrites the list, but only
if the list still starts with what was planned (the call may take seconds).
"""

from __future__ import annotations

import json
from typing import Literal

import apsw
import msgspec

from handlers.placing import Embedding
from handlers.session_refs import Ref, read_messages, require_session, write_messages
from handlers.store import insert_memory
from schema.base import agent_of
from schema.errors import Unavailable
from schema.session import (
    CompactReply,
    CompactRequest,
    SessionListReply,
    SessionListRequest,
    SessionSummary,
)

CHUNK_CHARS = 80_000
FALLBACK_CHARS = 8_000
SUMMARY_IMPORTANCE = 0.9


def session_list(conn: apsw.Connection, req: SessionListRequest, *, now: int) -> SessionListReply:
    """A read: `now` is the registry's calling convention, unused."""
    rows = conn.execute(
        "SELECT s.id, (SELECT count(*) FROM session_messages m WHERE m.tenant = s.tenant "
        "AND m.agent_id = s.agent_id AND m.session_id = s.id), s.created_at, s.updated_at, "
        "s.compacted_at, s.repaired_at "
        "FROM sessions s WHERE s.tenant = ? AND s.agent_id = ? ORDER BY s.updated_at DESC, s.id",
        agent_of(req),
    )
    return SessionListReply(
        sessions=[
            SessionSummary(
                id=row[0],
                message_count=row[1],
                created_at=row[2],
                updated_at=row[3],
                compacted_at=row[4],
                repaired_at=row[5],
            )
            for row in rows
        ]
    )


class CompactionPlan(msgspec.Struct, frozen=True):
    summarized: list[Ref]
    chunks: list[str]
    fallback: str
    last_timestamp: int


def chunk_text(text: str, limit: int = CHUNK_CHARS) -> list[str]:
    """Chunks of at most `limit` characters, each cut after the last newline in its window (or
    at `limit` when the window has none); joined, they give back the text."""
    chunks = []
    start = 0
    while len(text) - start > limit:
        newline = text.rfind("\n", start, start + limit)
        end = newline + 1 if newline >= start else start + limit
        chunks.append(text[start:end])
        start = end
    if start < len(text):
        chunks.append(text[start:])
    return chunks


def fallback_summary(lines: list[tuple[str, str]]) -> str:
    """The worker's own summary when no LLM answers: deterministic, non-empty, bounded.

    A header with the count per role, then the first line of each message (shortened), evenly
    sampled when they would not fit.
    """
    counts: dict[str, int] = {}
    for role, _ in lines:
        counts[role] = counts.get(role, 0) + 1
    roles = ", ".join(f"{count} {role}" for role, count in sorted(counts.items()))
    header = f"Summary of {len(lines)} earlier messages ({roles or 'no readable content'})."
    if not lines:
        return header
    room = FALLBACK_CHARS - len(header) - 1
    per_line = 160
    keep = max(1, min(len(lines), room // (per_line + 1)))
    picked = [lines[round(i * (len(lines) - 1) / max(1, keep - 1))] for i in range(keep)]
    if keep == 1:
        picked = [lines[0]]
    out = [header]
    for role, content in dict.fromkeys(picked):
        first = " ".join(content.strip().splitlines()[0].split()) if content.strip() else ""
        if len(first) > per_line - len(role) - 4:
            first = first[: per_line - len(role) - 5] + "…"
        out.append(f"- {role}: {first}")
    return "\n".join(out)[:FALLBACK_CHARS]


def plan_compaction(conn: apsw.Connection, req: CompactRequest) -> CompactionPlan | CompactReply:
    require_session(conn, agent_of(req), req.session_id)
    refs = read_messages(conn, agent_of(req), req.session_id)
    if len(refs) < req.threshold or len(refs) <= req.keep_recent:
        return CompactReply(compacted=False, reason="below_threshold")
    summarized = refs[: len(refs) - req.keep_recent]
    ids = [memory_id for memory_id, _, _ in summarized if memory_id]
    contents = {
        row[0]: (row[1], row[2])
        for row in conn.execute(
            # `+tenant`, `+agent_id`: look the ids up in their index, not by walking the agent.
            "SELECT id, role, content FROM memories WHERE +tenant = ? AND +agent_id = ? "
            "AND id IN (SELECT value FROM json_each(?))",
            (*agent_of(req), json.dumps(ids)),
        )
    }
    # References whose memory is gone have nothing to summarise and are skipped.
    lines = [contents[memory_id] for memory_id, _, _ in summarized if memory_id in contents]
    text = "\n\n".join(f"{role}: {content}" for role, content in lines)
    return CompactionPlan(
        summarized=summarized,
        chunks=chunk_text(text),
        fallback=fallback_summary(lines),
        last_timestamp=max(timestamp for _, _, timestamp in summarized),
    )


def apply_compaction(
    conn: apsw.Connection,
    req: CompactRequest,
    plan: CompactionPlan,
    *,
    summary: str,
    summarizer: Literal["llm", "fallback"],
    now: int,
    embedding: Embedding | None = None,
    summary_id: str | None = None,
) -> CompactReply:
    """`summary_id`: the id the summary memory gets (a write's decision chose it), else a
    fresh one; a summary the agent holds already keeps its own id (dedup)."""
    require_session(conn, agent_of(req), req.session_id)
    refs = read_messages(conn, agent_of(req), req.session_id)
    if refs[: len(plan.summarized)] != plan.summarized:
        raise Unavailable(f"session `{req.session_id}` changed during compaction; retry")
    if not summary.strip():
        summary, summarizer, embedding = plan.fallback, "fallback", None
    summary_id, _, _ = insert_memory(
        conn,
        agent=agent_of(req),
        content=summary,
        role="system",
        now=now,
        timestamp=plan.last_timestamp,
        importance=SUMMARY_IMPORTANCE,
        session_id=req.session_id,
        embedding=embedding,
        append_to_session=False,
        memory_id=summary_id,
    )
    kept = refs[len(plan.summarized) :]
    summary_ref = (summary_id, "system", plan.last_timestamp)
    write_messages(conn, agent_of(req), req.session_id, [summary_ref, *kept])
    conn.execute(
        "UPDATE sessions SET compacted_at = ?, updated_at = ? "
        "WHERE tenant = ? AND agent_id = ? AND id = ?",
        (now, now, *agent_of(req), req.session_id),
    )
    return CompactReply(
        compacted=True,
        summarized=len(plan.summarized),
        kept=len(kept),
        summary_id=summary_id,
        summarizer=summarizer,
    )
