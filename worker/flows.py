"""The flows that call out: triggers that await an embedder, an LLM or several steps between
their pure handlers, so the registry's `on=FLOW` rows point here instead of at a handler.

Every other trigger is a registry row whose pure handler dispatch runs on the writer or a reader
(worker/registry.py). Evict and consolidate, which run in chunks, are flows in
worker/maintenance.py.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import apsw
import msgspec
from msgspec import UNSET

from handlers import context as context_handler
from handlers import expand
from handlers import recall as recall_handler
from handlers.audit import Change
from handlers.session_repair import repair
from handlers.state import STATE_COUNTED, state_counts
from handlers.stats import COUNTED, database_counts
from handlers.switch import switched_off
from handlers.vector_index import chosen
from schema.base import agent_of, tenant_of
from schema.context import ContextReply, ContextRequest
from schema.memory import (
    RecallReply,
    RecallRequest,
    StoreReply,
    StoreRequest,
)
from schema.session import RepairReply, RepairRequest
from schema.stats import JobFigures, SanitizerFigures, StatsReply, StatsRequest, TriggerFigures
from worker.db import DAMAGED
from worker.embedders import Vector
from worker.maintenance import run_figures
from worker.recall_index.view import Snapshot
from worker.services import Services
from worker.storing import STORE, prepare_store
from worker.writes import Write, commit, seeded_ids


async def store(s: Services, req: StoreRequest) -> StoreReply:
    """Sanitises and embeds, then commits (worker/storing.py); when the model is a batch behind,
    commits first and leaves the vector to the backfill (worker/recall_index/backfill.py), so
    that a burst of stores does not queue. It starts after the recalls in progress (briefly:
    worker/recalls_first.py)."""
    await s.recalls_first.after_recalls()
    prepared = await prepare_store(s, req)
    reply: StoreReply = await commit(s, "memory::store", STORE, req, prepared=prepared)
    s.telemetry.sanitizer.count(reply.redactions or {}, reply.flags or [])
    if prepared.embedding is None and reply.stored and s.backfill is not None:
        s.backfill.add(tenant_of(req), req.agent_id)  # deferred, or the embedder failed
    return reply


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
    # Expanded: the formula's ranking, reordered (handlers/expand.py).
    ranking = expand.expanded_rows if s.config.recall == "expanded" else recall_handler.rank_rows
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
    ranked = recall_handler.ids_of(found.columns, rows)
    counts = found.count_access(
        conn, [(memory_id, slot) for (memory_id, _), (slot, _) in zip(ranked, rows, strict=True)]
    )
    reply = recall_handler.recalled_memories(conn, tenant, req.agent_id, ranked, counts, now=now)
    return msgspec.structs.replace(reply, pinned=pinned), now


class Accessed(msgspec.Struct, frozen=True):
    """The memories a recall returned, counted as accessed at its time."""

    tenant: str
    agent_id: str
    ids: list[str]
    at: int


ACCESS: Write[Accessed, None] = Write(
    decision=Accessed,
    decide=lambda conn, accessed, now, _: accessed,
    apply=lambda conn, a: recall_handler.record_access(conn, a.tenant, a.agent_id, a.ids, now=a.at),
    reply=lambda accessed, _: None,
    changes=lambda accessed, _: (),
)


async def recall(s: Services, req: RecallRequest) -> RecallReply:
    """Replies without waiting for the writer: the access counts are persisted by a
    non-durable write that follows (at most one batch behind)."""
    recall_handler.check_recall(req, s.config.max_query_bytes)
    query_vector = None
    tenant = tenant_of(req)
    with s.recalls_first.recalling(), s.embedder.recalling():
        if req.query.strip():
            [vector] = await s.embedder.embed([req.query], query=True)
            query_vector = None if vector is None else (s.embedder.name, vector)
        reply, now = await s.index.with_snapshot(
            (tenant, req.agent_id),
            lambda conn, found: _recall(s, conn, found, req, query_vector, tenant),
        )
    if reply.memories:
        ids = [memory.id for memory in reply.memories]
        accessed = Accessed(tenant, req.agent_id, ids, now)
        persist = asyncio.create_task(commit(s, "memory::recall", ACCESS, accessed, durable=False))
        s.background.add(persist)
        persist.add_done_callback(s.background.discard)
    return reply


async def context(s: Services, req: ContextRequest) -> ContextReply:
    """Recall's path (the query embedded, the same ranking, the pinned memories, accesses
    counted for the ranked ones), rendered for a prompt."""
    found = await recall(s, context_handler.recall_request(req))
    return context_handler.render(found.pinned or [], found.memories, max_chars=req.max_chars)


async def stats(s: Services, req: StatsRequest) -> StatsReply:
    """Answers even when the database is damaged: that is when an operator asks."""
    t = s.telemetry
    counts: dict[str, int | None]
    enabled = None
    tenant = req.tenant if isinstance(req.tenant, str) else None
    try:
        counts = dict(await s.readers.run(lambda conn: database_counts(conn, tenant)))
        now = s.clock()
        counts |= await s.readers.run(lambda conn: state_counts(conn, tenant, now))
        if req.agent_id is not UNSET:
            agent = agent_of(req)
            enabled = not await s.readers.run(lambda conn: switched_off(conn, agent))
    except DAMAGED as error:
        t.health.corrupt(f"memory::stats: {type(error).__name__}: {error}")
        counts = dict.fromkeys(COUNTED + STATE_COUNTED)
    path = Path(s.config.db_path)
    on_disk = sum(
        candidate.stat().st_size
        for candidate in (path, path.with_name(path.name + "-wal"))
        if candidate.exists()
    )
    next_fires = t.next_fires(s.clock())
    return StatsReply(
        health=t.health.state,
        health_reason=t.health.reason,
        triggers={
            trigger: TriggerFigures(
                requests=figures.requests,
                errors=figures.errors,
                mean_ms=round(figures.total_ms / max(1, figures.requests), 3),
            )
            for trigger, figures in (
                t.triggers.items() if tenant is None else t.by_tenant.get(tenant, {}).items()
            )
        },
        agents=counts["agents"],
        memories=counts["memories"],
        memories_without_vector=counts["memories_without_vector"],
        memories_pinned=counts["memories_pinned"],
        memories_forgotten=counts["memories_forgotten"],
        agents_disabled=counts["agents_disabled"],
        audit_events=counts["audit_events"],
        entities=counts["entities"],
        relations=counts["relations"],
        sessions=counts["sessions"],
        kv_keys=counts["kv_keys"],
        tasks_pending=counts["tasks_pending"],
        tasks_claimed=counts["tasks_claimed"],
        tasks_completed=counts["tasks_completed"],
        usage_records=counts["usage_records"],
        canonical_sessions=counts["canonical_sessions"],
        database_bytes=on_disk,
        in_flight=t.in_flight,
        index_agents=s.index.loaded_agents(),
        schedule={
            name: JobFigures(
                cron=record.cron,
                next_fire=next_fires.get(name, 0),
                last_fire=record.last_fire,
                last_outcome=record.last_outcome,
                last_run=None if record.last_run is None else run_figures(record.last_run),
            )
            for name, record in t.jobs.items()
        },
        sanitizer=SanitizerFigures(
            redactions=dict(sorted(t.sanitizer.redactions.items())),
            flags=dict(sorted(t.sanitizer.flags.items())),
        ),
        enabled=enabled,
    )


class Repaired(msgspec.Struct, frozen=True):
    """A repair decided: the request, its time, and the seed of the ids of merged messages."""

    request: RepairRequest
    at: int
    seed: str


REPAIR: Write[Repaired, RepairReply] = Write(
    decision=Repaired,
    decide=lambda conn, req, now, _: Repaired(req, now, uuid.uuid4().hex),
    apply=lambda conn, d: repair(conn, d.request, now=d.at, new_id=seeded_ids(d.seed)),
    reply=lambda d, reply: reply,
    changes=lambda d, reply: [Change(agent_of(d.request), count=reply.total_fixes)],
)


async def session_repair(s: Services, req: RepairRequest) -> RepairReply:
    reply: RepairReply = await commit(s, "memory::session::repair", REPAIR, req)
    if reply.stats.consecutive_merged:
        await embed_missing(s, tenant_of(req), req.agent_id)
    return reply


async def embed_missing(s: Services, tenant: str, agent_id: str) -> None:
    """Give a batch of the agent's memories that lack one a vector now (repair's merged
    messages); the backfill takes any more. A no-op without an embedder."""
    if s.backfill is not None and not await s.backfill.fill_batch(tenant, agent_id):
        s.backfill.add(tenant, agent_id)
