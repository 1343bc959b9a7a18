"""The flows that call out: triggers that await an embedder, an LLM or several steps between
their pure handlers, so the registry's `on=FLOW` rows point here instead of at a handler.

Every other trigger is a registry row whose pure handler dispatch runs on the writer or a reader
(worker/registry.py). Evict and consolidate, which run in chunks, are flows in
worker/maintenance.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from fnmatch import fnmatchcase
from pathlib import Path

import apsw
import msgspec
from msgspec import UNSET

from handlers import context as context_handler
from handlers.audit import Change
from handlers.recall import expand
from handlers.recall import trigger as recall_handler
from handlers.recall.order import ids_of
from handlers.recall.rank import rank_rows
from handlers.recall.vector_index import chosen
from handlers.session_repair import repair
from handlers.stats import COUNTED, reply_counts, table_counts
from handlers.switch import switched_off
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
from worker.payload import reply_budget, too_large
from worker.recall_index.view import Snapshot
from worker.services import Services
from worker.storing import STORE, prepare_store
from worker.telemetry import SanitizerCounts, Telemetry
from worker.writes import Write, commit, seeded_ids


async def store(s: Services, req: StoreRequest) -> StoreReply:
    """Sanitises and embeds, then commits (worker/storing.py); when the model is a batch behind,
    commits first and leaves the vector to the backfill (worker/recall_index/backfill.py), so
    that a burst of stores does not queue. It starts after the recalls in progress (briefly:
    worker/recalls_first.py)."""
    await s.recalls_first.after_recalls()
    prepared = await prepare_store(s, req)
    reply: StoreReply = await commit(s, "memory::store", STORE, req, prepared=prepared)
    s.telemetry.sanitized(tenant_of(req), reply.redactions or {}, reply.flags or [])
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
    non-durable write that follows (at most one batch behind). A reply too large for the NATS
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
        reply, now = await s.index.with_snapshot(
            (tenant, req.agent_id),
            lambda conn, found: _recall(s, conn, found, req, query_vector, tenant),
        )
    if not reply.memories:
        return reply, None
    return reply, Accessed(tenant, req.agent_id, [memory.id for memory in reply.memories], now)


def _count_access(s: Services, accessed: Accessed | None) -> None:
    if accessed is not None:
        persist = asyncio.create_task(commit(s, "memory::recall", ACCESS, accessed, durable=False))
        s.background.add(persist)
        persist.add_done_callback(s.background.discard)


async def context(s: Services, req: ContextRequest) -> ContextReply:
    """Recall's path (the query embedded, the same ranking, the pinned memories, accesses
    counted for the ranked ones), rendered for a prompt: within `maxChars`, however large the
    memories behind it."""
    found, accessed = await _ranked(s, context_handler.recall_request(req))
    _count_access(s, accessed)
    return context_handler.render(found.pinned or [], found.memories, max_chars=req.max_chars)


async def stats(s: Services, req: StatsRequest) -> StatsReply:
    """Answers even when the database is damaged: that is when an operator asks."""
    t = s.telemetry
    counts: dict[str, int | None]
    sanitised = t.sanitizer
    enabled = None
    tenant = req.tenant if isinstance(req.tenant, str) else None
    grants = req.grants if isinstance(req.grants, list) else None
    try:
        now = s.clock()
        counts = dict(await s.readers.run(lambda c: table_counts(c, tenant, grants, now=now)))
        if req.agent_id is not UNSET:
            agent = agent_of(req)
            enabled = not await s.readers.run(lambda conn: switched_off(conn, agent))
    except DAMAGED as error:
        t.health.corrupt(f"memory::stats: {type(error).__name__}: {error}")
        counts = dict.fromkeys(COUNTED)
    if tenant is not None:  # the tenant's own texts only
        sanitised = t.sanitizer_by_tenant.get(tenant, SanitizerCounts())
    path = Path(s.config.db_path)
    on_disk = sum(
        candidate.stat().st_size
        for candidate in (path, path.with_name(path.name + "-wal"))
        if candidate.exists()
    )
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
        **reply_counts(counts),
        database_bytes=on_disk,
        in_flight=t.in_flight,
        index_agents=s.index.loaded_agents(tenant, granted(grants)),
        schedule=schedule_figures(t, tenant, s.clock()),
        sanitizer=SanitizerFigures(
            redactions=dict(sorted(sanitised.redactions.items())),
            flags=dict(sorted(sanitised.flags.items())),
        ),
        enabled=enabled,
    )


def granted(grants: list[str] | None) -> Callable[[str], bool] | None:
    """Whether an agent id is one of those the grants match; None when no grants limit."""
    if grants is None:
        return None
    return lambda agent_id: any(fnmatchcase(agent_id, pattern) for pattern in grants)


def schedule_figures(t: Telemetry, tenant: str | None, now: int) -> dict[str, JobFigures]:
    """The maintenance jobs as a tenant sees them (None: an operator over every tenant): the
    schedule, and the last run that acted in that tenant alone (an operator: the last run of
    any). A job nobody scheduled shows only to a tenant that ran it."""
    next_fires = t.next_fires(now)
    figures = {}
    for name, record in t.jobs.items():
        run = record.last_run if tenant is None else record.runs_by_tenant.get(tenant)
        if tenant is not None and not record.cron and run is None:
            continue  # run by hand in another tenant
        figures[name] = JobFigures(
            cron=record.cron,
            next_fire=next_fires.get(name, 0),
            last_fire=record.last_fire,
            last_outcome=record.last_outcome,
            last_run=None if run is None else run_figures(run),
        )
    return figures


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
