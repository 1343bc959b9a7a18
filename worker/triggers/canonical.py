"""Canonical sessions: memory::canonical::get, and memory::canonical::append as writes
(worker/writes.py): the message stored as a store stores it, counted, and the session compacted
once it is long.

The append is the store's write with the canonical row beside it: the same preparation (the
checks, the sanitiser, the embedding: worker/triggers/storing.py), the same decision (the
memory's id, time and vector) and the same apply, then the count and the last channel in the
same transaction. When the session's list has reached section 7's default threshold (30), the
flow compacts it as memory::session::compact does (worker/triggers/sessions.py: plan, LLM or
fallback, embedding, then one write) and the same write makes the summary the canonical one, so
a session is never compacted without its summary set. That second write is logged under
`memory::canonical::append:compact` and audited as an append with `{"compacted": n}`.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import apsw
import msgspec
import structlog

from handlers.audit import Change
from handlers.canonical import (
    canonical_get,
    count_message,
    message_count,
    session_length,
    session_of,
    set_summary,
    user_of,
)
from schema.base import agent_of, tenant_of
from schema.canonical import (
    CanonicalAppendReply,
    CanonicalAppendRequest,
    CanonicalGetRequest,
    CanonicalSession,
)
from schema.errors import Unavailable
from schema.memory import StoreReply, StoreRequest
from schema.session import CompactReply, CompactRequest
from worker.route import Route
from worker.services import Services
from worker.triggers.preparing import Prepared, prepare_store
from worker.triggers.sessions import (
    Compacted,
    apply_compacted,
    backfill_if_unembedded,
    decide_compaction,
    prepare_compaction,
)
from worker.triggers.storing import (
    Stored,
    StoreDone,
    apply_store,
    decide_store,
    fact_changes,
    store_detail,
    store_reply,
    title_followup,
)
from worker.writes import Write, commit

log = structlog.get_logger()
APPEND_TRIGGER = "memory::canonical::append"
COMPACT_TRIGGER = "memory::canonical::append:compact"


def store_request(req: CanonicalAppendRequest) -> StoreRequest:
    """The message as a store of the agent: in the user's canonical session, its channel in
    the metadata (so recall can filter on it)."""
    return StoreRequest(
        tenant=req.tenant,
        agent_id=req.agent_id,
        content=req.content,
        role=req.role,
        session_id=session_of(req.user_id),
        metadata={"channel": req.channel},
    )


class Appended(msgspec.Struct, frozen=True):
    """An append decided: the store's decision, and whose conversation, from which channel."""

    stored: Stored
    user_id: str
    channel: str


class Counted(NamedTuple):
    """What apply did: the store's result, the user's message count, the list's length."""

    stored: StoreDone
    message_count: int
    session_length: int


class Answer(NamedTuple):
    """What the flow gets back: the reply, and what it decides the rest from."""

    reply: CanonicalAppendReply
    stored: StoreReply  # with what the sanitiser did, for the telemetry
    session_length: int


async def prepare_append(s: Services, req: CanonicalAppendRequest) -> Prepared:
    return await prepare_store(s, store_request(req))


def decide_append(
    conn: apsw.Connection, req: CanonicalAppendRequest, now: int, p: Prepared
) -> Appended:
    stored = decide_store(conn, store_request(req), now, p)
    return Appended(stored, req.user_id, req.channel)


def apply_append(conn: apsw.Connection, d: Appended) -> Counted:
    """A switched-off agent stores nothing (apply_store) and counts nothing either."""
    agent = agent_of(d.stored.request)
    done = apply_store(conn, d.stored)
    if done.reply.id is None:
        return Counted(done, message_count(conn, agent, d.user_id), 0)
    count = count_message(conn, agent, d.user_id, d.channel, d.stored.at)
    return Counted(done, count, session_length(conn, agent, d.user_id))


def append_answer(d: Appended, counted: Counted) -> Answer:
    stored = store_reply(d.stored, counted.stored)
    reply = CanonicalAppendReply(
        id=stored.id, message_count=counted.message_count, disabled=stored.disabled
    )
    return Answer(reply, stored, counted.session_length)


def append_changes(d: Appended, counted: Counted) -> list[Change]:
    """Every append that wrote, with the memory's id (the sanitiser's rules and flags, never
    the text); one that restored a forgotten memory by its content also as an unforget."""
    reply, restored = counted.stored.reply, counted.stored.restored
    if reply.id is None:
        return []
    agent = agent_of(d.stored.request)
    changes = [Change(agent, [reply.id], detail=store_detail(d.stored, counted.stored))]
    if restored:
        changes.append(Change(agent, [reply.id], trigger="memory::unforget"))
    return [*changes, *fact_changes(d.stored, counted.stored)]


APPEND_WRITE: Write[Appended, Counted] = Write(
    decision=Appended,
    decide=decide_append,
    apply=apply_append,
    reply=append_answer,
    changes=append_changes,
    prepare=prepare_append,
    followup=lambda d, counted: title_followup(d.stored, counted.stored),
)


def apply_canonical_compaction(conn: apsw.Connection, d: Compacted) -> CompactReply:
    """Section 7's compaction of the session, and its summary made the canonical one."""
    reply = apply_compacted(conn, d)
    agent = agent_of(d.request)
    set_summary(conn, agent, user_of(d.request.session_id), d.summary, d.at)
    return reply


COMPACT_WRITE: Write[Compacted, CompactReply] = Write(
    decision=Compacted,
    decide=lambda conn, req, now, p: decide_compaction(str(uuid.uuid4()), req, now, p),
    apply=apply_canonical_compaction,
    reply=lambda d, reply: reply,
    changes=lambda d, reply: [
        Change(
            agent_of(d.request),
            [reply.summary_id or d.summary_id],
            trigger=APPEND_TRIGGER,
            detail={"compacted": reply.summarized},
        )
    ],
)


async def compact(s: Services, creq: CompactRequest) -> None:
    """Compact the user's session as memory::session::compact does. One that lost a race with
    another compaction of the same session (two appends reaching the threshold together) leaves
    it to that one: the append itself is done either way."""
    prepared = await prepare_compaction(s, creq)
    if isinstance(prepared, CompactReply):
        return  # compacted meanwhile by the other
    try:
        await commit(s, COMPACT_TRIGGER, COMPACT_WRITE, creq, prepared=prepared)
    except Unavailable:
        log.info("canonical.compaction_raced", trigger=APPEND_TRIGGER, agent_id=creq.agent_id)
        return
    backfill_if_unembedded(s, creq, prepared)


async def canonical_append(s: Services, req: CanonicalAppendRequest) -> CanonicalAppendReply:
    """Stores and counts the message; when that made the session's list reach the threshold,
    compacts it before replying, so the summary is in place when the reply arrives."""
    prepared = await prepare_append(s, req)
    answer: Answer = await commit(s, APPEND_TRIGGER, APPEND_WRITE, req, prepared=prepared)
    s.telemetry.sanitized(tenant_of(req), answer.stored.redactions or {}, answer.stored.flags or [])
    if prepared.embedding is None and answer.stored.stored and s.backfill is not None:
        s.backfill.add(tenant_of(req), req.agent_id)  # deferred, or the embedder failed
    # Section 7's defaults: compacted from 30 messages on, the 10 most recent kept.
    creq = CompactRequest(
        tenant=req.tenant, agent_id=req.agent_id, session_id=session_of(req.user_id)
    )
    if answer.session_length >= creq.threshold:
        await compact(s, creq)
    return answer.reply


GET = Route(
    "memory::canonical::get", CanonicalGetRequest, reply_type=CanonicalSession, read=canonical_get
)
APPEND = Route(
    APPEND_TRIGGER,
    CanonicalAppendRequest,
    reply_type=CanonicalAppendReply,
    flow=canonical_append,
    write=APPEND_WRITE,
    also_logs={COMPACT_TRIGGER: COMPACT_WRITE},
    ingest=True,
)
ROUTES: tuple[Route[Any, Any], ...] = (GET, APPEND)
