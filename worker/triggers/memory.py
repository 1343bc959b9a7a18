"""The memory itself: memory::store, recall, context and update.

Store and update are write rows: their Writes (worker/triggers/storing.py) prepare outside the
writer (a store after the recalls in progress, the sanitiser, the embedding), and once committed
the row's `after` counts what the sanitiser did and leaves a vector the model could not give now
to the backfill (worker/recall_index/backfill.py), so that a burst of stores does not queue.

Recall and context are flows: they await the query's embedding, rank a snapshot of the agent's
columns on a reader thread (or, when that is short and no reader is busy, on the event loop
itself: `HERE_ROWS`), and reply without waiting for the writer: the access counts are persisted
by a non-durable write that follows, gathered with the other recalls' of the next moment
(worker/access_counts.py).
"""

from __future__ import annotations

from typing import Any

import apsw
import msgspec
from msgspec import UNSET

from handlers import context as context_handler
from handlers.facts.context import context_facts
from handlers.recall import expand
from handlers.recall import trigger as recall_handler
from handlers.recall.order import ids_of
from handlers.recall.rank import rank_rows
from handlers.recall.vector_index import chosen
from handlers.switch import switched_off
from schema.base import agent_of, tenant_of
from schema.context import ContextReply, ContextRequest
from schema.life import UpdateReply, UpdateRequest
from schema.memory import RecallReply, RecallRequest, StoreReply, StoreRequest
from worker.access_counts import Accessed
from worker.embedders import Vector
from worker.payload import reply_budget, too_large
from worker.recall_index.view import Snapshot
from worker.route import Route
from worker.services import Services
from worker.triggers import storing
from worker.triggers.preparing import Prepared
from worker.writes import Write, commit

# A recall ranks on the event loop itself, not on a reader thread, when no reader is busy (so
# that it overtakes nothing), the agent is loaded and the ranking is short: at most HERE_ROWS
# memories, a query of at most HERE_QUERY_CHARS, and at most HERE_VECTOR_VALUES values scored
# against a query vector (rows x dimensions), a millisecond or two. The trip to a thread and back
# was 0.2 ms of a 1.2 ms recall at 20 000 memories on the development machine.
HERE_ROWS = 50_000
HERE_QUERY_CHARS = 512
HERE_VECTOR_VALUES = 8_000_000
# The recalled memories whose rowids are kept (about 150 bytes each); past it, none are.
ROWIDS_KEPT = 65_536


async def stored(s: Services, req: StoreRequest, prepared: Prepared, reply: StoreReply) -> None:
    """What the sanitiser did, counted; a vector deferred (or failed) left to the backfill."""
    s.telemetry.sanitized(tenant_of(req), reply.redactions or {}, reply.flags or [])
    if prepared.embedding is None and reply.stored and s.backfill is not None:
        s.backfill.add(tenant_of(req), req.agent_id)


async def updated(s: Services, req: UpdateRequest, prepared: Prepared, reply: UpdateReply) -> None:
    """As a store's: new content is sanitised and embedded before the writer applies it."""
    s.telemetry.sanitized(tenant_of(req), reply.redactions, reply.flags)
    if req.content is not UNSET and prepared.embedding is None and s.backfill is not None:
        s.backfill.add(tenant_of(req), req.agent_id)  # the embedder failed: later


def _recall(
    s: Services,
    conn: apsw.Connection,
    found: Snapshot,
    req: RecallRequest,
    query_vector: tuple[str, Vector] | None,
    tenant: str,
) -> tuple[RecallReply, int]:
    """On a reader thread: rank the snapshot of the agent's columns, count the accesses in the
    index, and read the winners' rows; the reply and the time it was ranked at."""
    now = s.clock()
    if switched_off(conn, (tenant, req.agent_id)):
        return RecallReply(memories=[], pinned=[] if req.with_pinned else None), now
    pinned = None
    if req.with_pinned:
        pinned = recall_handler.pinned_memories(conn, tenant, req.agent_id, req)
    excluded = frozenset(memory.id for memory in pinned or ())
    # Expanded: the formula's ranking, reordered (handlers/recall/expand.py).
    ranking = expand.expanded_rows if s.config.recall == "expanded" else rank_rows
    rows = ranking(
        found.columns,
        req,
        now=now,
        query_vector=query_vector,
        keyword_mode=s.keyword_mode,
        excluded=excluded,
        vector_index=chosen(s.config.vector_index, s.config.recall, s.config.vector_candidates),
    )
    if not rows:
        return RecallReply(memories=[], pinned=pinned), now
    ranked = ids_of(found.columns, rows)
    # The rows, with the access counts they hold, in one read; then this recall's count.
    memories = recall_handler.recalled_rows(
        conn, tenant, req.agent_id, [i for i, _ in ranked], s.rowids
    )
    _keep_rowids(s.rowids, memories)
    counts = found.count_access(
        conn,
        [(memory_id, slot) for (memory_id, _), (slot, _) in zip(ranked, rows, strict=True)],
        {memory_id: row[recall_handler.ACCESS_COUNT] for memory_id, row in memories.items()},
    )
    reply = recall_handler.recall_reply(memories, ranked, counts, now=now)
    return msgspec.structs.replace(reply, pinned=pinned), now


def _keep_rowids(kept: dict[str, int], rows: dict[str, Any]) -> None:
    """Where these memories' rows are, for the next recall of any of them (at most
    ROWIDS_KEPT memories: then it starts again with these)."""
    if len(kept) + len(rows) > ROWIDS_KEPT:
        kept.clear()
    for memory_id, row in rows.items():
        kept[memory_id] = row[recall_handler.ROWID]


ACCESS: Write[Accessed, None] = Write(
    decision=Accessed,
    decide=lambda conn, accessed, now, _: accessed,
    apply=lambda conn, a: recall_handler.record_access(conn, a.tenant, a.agent_id, a.each()),
    reply=lambda accessed, _: None,
    changes=lambda accessed, _: (),
)


async def recall(s: Services, req: RecallRequest) -> RecallReply:
    """Replies without waiting for the writer: the access counts are persisted by a
    non-durable write that follows, with those of the next 50 ms (worker/access_counts.py). A
    reply too large for the NATS
    connection is refused (413 naming `limit`) before any access is counted."""
    reply, accessed = await _ranked(s, req)
    size = len(msgspec.json.encode(reply))
    budget = reply_budget(s.nc)
    if size > budget:
        raise too_large(size, budget, "limit")
    _count_access(s, accessed)
    return reply


async def _ranked(s: Services, req: RecallRequest) -> tuple[RecallReply, Accessed | None]:
    """The recall's reply, and the accesses it is to count (None: nothing returned)."""
    recall_handler.check_recall(req, s.config.max_query_bytes)
    query_vector = None
    tenant = tenant_of(req)
    with s.recalls_first.recalling(), s.embedder.recalling():
        if req.query.strip():
            [vector] = await s.embedder.embed([req.query], query=True)
            query_vector = None if vector is None else (s.embedder.name, vector)
        here = _short(s, (tenant, req.agent_id), req, query_vector)
        if here is not None:
            reply, now = s.readers.here(
                lambda conn: _recall(s, conn, here, req, query_vector, tenant)
            )
        else:
            # `formula` promises the exact top `limit`: it waits for a load from SQLite rather
            # than rank the stand-in that `expanded` ranks meanwhile (with_snapshot).
            reply, now = await s.index.with_snapshot(
                (tenant, req.agent_id),
                lambda conn, found: _recall(s, conn, found, req, query_vector, tenant),
                query=req.query if s.config.recall == "expanded" else None,
            )
    if not reply.memories:
        return reply, None
    return reply, Accessed(tenant, req.agent_id, [memory.id for memory in reply.memories], now)


def _short(
    s: Services, key: tuple[str, str], req: RecallRequest, query_vector: tuple[str, Vector] | None
) -> Snapshot | None:
    """The agent's snapshot when the recall may rank on the event loop (HERE_ROWS), else None."""
    if len(req.query) > HERE_QUERY_CHARS or not s.readers.idle():
        return None
    found = s.index.loaded_snapshot(key)
    if found is None or found.columns.rows > HERE_ROWS:
        return None
    if query_vector is not None and found.columns.rows * len(query_vector[1]) > HERE_VECTOR_VALUES:
        return None
    return found


def _count_access(s: Services, accessed: Accessed | None) -> None:
    if accessed is not None:
        s.accesses.add(accessed, lambda batch: _write_access(s, batch), s.background)


async def _write_access(s: Services, accessed: Accessed) -> None:
    await commit(s, "memory::recall", ACCESS, accessed, durable=False)


async def context(s: Services, req: ContextRequest) -> ContextReply:
    """Recall's path (the query embedded, the same ranking, the pinned memories, accesses
    counted for the ranked ones), rendered for a prompt: within `maxChars`, however large the
    memories behind it."""
    found, accessed = await _ranked(s, context_handler.recall_request(req))
    _count_access(s, accessed)
    agent = agent_of(req)
    facts = await s.readers.run(lambda conn: context_facts(conn, agent, req.query))
    return context_handler.render(
        found.pinned or [], found.memories, max_chars=req.max_chars, facts=facts
    )


STORE = Route(
    "memory::store",
    StoreRequest,
    reply_type=StoreReply,
    write=storing.STORE,
    after=stored,
    ingest=True,
)
RECALL = Route(
    "memory::recall",
    RecallRequest,
    reply_type=RecallReply,
    flow=recall,
    write=ACCESS,  # the access counts of what it returned
    bounded_by="limit",
)
CONTEXT = Route(
    "memory::context", ContextRequest, reply_type=ContextReply, flow=context, bounded_by="maxChars"
)
UPDATE = Route(
    "memory::update",
    UpdateRequest,
    reply_type=UpdateReply,
    write=storing.UPDATE,
    after=updated,
    ingest=True,
)
ROUTES: tuple[Route[Any, Any], ...] = (STORE, RECALL, CONTEXT, UPDATE)
