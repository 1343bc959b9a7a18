"""Sessions: memory::session::list, get, compact and repair.

Compaction is a flow around one write (worker/writes.py), so that a shard logs and replays it.
What it awaits comes first, outside the writer: the plan read on a reader, the LLM's summary (or
the fallback) and the summary's embedding (`prepare_compaction`). The decision holds all of it
that the rows need (the references summarised, the summary's text, id, time and vector), so a
replay writes the same summary memory and the same list without asking the LLM again. Apply
refuses a session whose list no longer starts with what was planned (handlers/session.py), so
a compaction that lost a race with another changes nothing.

Canonical sessions (worker/triggers/canonical.py) compact through the same steps.

A repair is a write row: its decision holds the seed of the ids of the messages it merges; once
committed, the merged messages get their vectors (a batch now, the backfill the rest).
"""

from __future__ import annotations

import uuid
from typing import Any, Literal, NamedTuple

import apsw
import msgspec
import numpy as np

from handlers import listing, session
from handlers.audit import Change
from handlers.placing import Embedding
from handlers.session import CompactionPlan
from handlers.session_repair import repair
from schema.base import agent_of, tenant_of
from schema.life import SessionGetReply, SessionGetRequest
from schema.session import (
    CompactReply,
    CompactRequest,
    RepairReply,
    RepairRequest,
    SessionListReply,
    SessionListRequest,
)
from worker.llm import summarise
from worker.route import Route
from worker.services import Services
from worker.writes import Write, commit, seeded_ids

Summarizer = Literal["llm", "fallback"]


class Summarised(NamedTuple):
    """What a compaction prepared: the plan, the summary (the LLM's, else the fallback) and its
    vector (None when the embedder failed: the backfill gives it one later)."""

    plan: CompactionPlan
    summary: str
    summarizer: Summarizer
    embedding: Embedding | None


async def prepare_compaction(s: Services, req: CompactRequest) -> Summarised | CompactReply:
    """The plan, the summary and its vector; or the reply when there is nothing to compact."""
    plan = await s.readers.run(lambda conn: session.plan_compaction(conn, req))
    if isinstance(plan, CompactReply):
        return plan
    summary = await summarise(s.nc, s.config, plan.chunks)
    summarizer: Summarizer = "llm" if summary else "fallback"
    text = summary or plan.fallback
    [vector] = await s.embedder.embed([text], query=False)
    embedding = None if vector is None else (s.embedder.name, vector)
    return Summarised(plan, text, summarizer, embedding)


class Compacted(msgspec.Struct, frozen=True):
    """A compaction decided: the request, the plan without its chunks (the summary replaces
    them), the summary's text, the id and time it gets, and its vector."""

    request: CompactRequest
    plan: CompactionPlan
    summary: str
    summarizer: Summarizer
    summary_id: str
    at: int
    model: str | None = None
    vector: bytes | None = None


def decide_compaction(summary_id: str, req: CompactRequest, now: int, p: Summarised) -> Compacted:
    return Compacted(
        request=req,
        plan=msgspec.structs.replace(p.plan, chunks=[]),
        summary=p.summary,
        summarizer=p.summarizer,
        summary_id=summary_id,
        at=now,
        model=None if p.embedding is None else p.embedding[0],
        vector=None if p.embedding is None else p.embedding[1].astype(np.float32).tobytes(),
    )


def apply_compacted(conn: apsw.Connection, d: Compacted) -> CompactReply:
    embedding = None
    if d.model is not None and d.vector is not None:
        embedding = (d.model, np.frombuffer(d.vector, dtype=np.float32))
    return session.apply_compaction(
        conn, d.request, d.plan, summary=d.summary, summarizer=d.summarizer, now=d.at,
        embedding=embedding, summary_id=d.summary_id,
    )  # fmt: skip


COMPACTION: Write[Compacted, CompactReply] = Write(
    decision=Compacted,
    decide=lambda conn, req, now, p: decide_compaction(str(uuid.uuid4()), req, now, p),
    apply=apply_compacted,
    reply=lambda d, reply: reply,
    changes=lambda d, reply: [Change(agent_of(d.request), [reply.summary_id or d.summary_id])],
)


def backfill_if_unembedded(s: Services, req: CompactRequest, p: Summarised) -> None:
    """The embedder failed: the summary gets its vector later."""
    if p.embedding is None and s.backfill is not None:
        s.backfill.add(tenant_of(req), req.agent_id)


async def session_compact(s: Services, req: CompactRequest) -> CompactReply:
    prepared = await prepare_compaction(s, req)
    if isinstance(prepared, CompactReply):
        return prepared
    reply: CompactReply = await commit(
        s, "memory::session::compact", COMPACTION, req, prepared=prepared
    )
    backfill_if_unembedded(s, req, prepared)
    return reply


class Repaired(msgspec.Struct, frozen=True):
    """A repair decided: the request, its time, and the seed of the ids of merged messages."""

    request: RepairRequest
    at: int
    seed: str


REPAIRING: Write[Repaired, RepairReply] = Write(
    decision=Repaired,
    decide=lambda conn, req, now, _: Repaired(req, now, uuid.uuid4().hex),
    apply=lambda conn, d: repair(conn, d.request, now=d.at, new_id=seeded_ids(d.seed)),
    reply=lambda d, reply: reply,
    changes=lambda d, reply: [Change(agent_of(d.request), count=reply.total_fixes)],
)


async def repaired(s: Services, req: RepairRequest, prepared: None, reply: RepairReply) -> None:
    """Merged messages are new memories: a batch of them gets its vectors now (a no-op without
    an embedder), the backfill takes any more."""
    if reply.stats.consecutive_merged and s.backfill is not None:
        tenant = tenant_of(req)
        if not await s.backfill.fill_batch(tenant, req.agent_id):
            s.backfill.add(tenant, req.agent_id)


LIST = Route(
    "memory::session::list",
    SessionListRequest,
    reply_type=SessionListReply,
    read=session.session_list,
)
GET = Route(
    "memory::session::get",
    SessionGetRequest,
    reply_type=SessionGetReply,
    read=listing.session_messages,
)
COMPACT = Route(
    "memory::session::compact",
    CompactRequest,
    reply_type=CompactReply,
    flow=session_compact,
    write=COMPACTION,
)
REPAIR = Route(
    "memory::session::repair",
    RepairRequest,
    reply_type=RepairReply,
    write=REPAIRING,
    after=repaired,
)
ROUTES: tuple[Route[Any, Any], ...] = (LIST, COMPACT, REPAIR, GET)
