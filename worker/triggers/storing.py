"""memory::store and memory::update as writes (worker/writes.py): their decide and apply steps,
after what they do before the writer (worker/triggers/preparing.py: the checks, the sanitiser,
the embedding). Their rows are in worker/triggers/memory.py; a canonical append stores its
message with the same steps (worker/triggers/canonical.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import apsw
import msgspec
import numpy as np
from msgspec import UNSET

from handlers.audit import Change
from handlers.facts.from_memory import PlannedFact, apply_planned, plan_facts
from handlers.placing import Embedding, new_memory_id, place_memories
from handlers.placing import Placed as PlacedMemory
from handlers.store import new_memory, place_store, placed_reply
from handlers.switch import switched_off
from handlers.topics.assign import Incoming
from handlers.topics.extract import asks_llm
from handlers.topics.stored import Placed, Placing, TopicChoice, choose, place
from handlers.update import Correction, apply_update, plan_update
from schema.base import agent_of
from schema.life import UpdateReply, UpdateRequest
from schema.memory import NOT_STORED, StoreReply, StoreRequest
from worker.services import Services
from worker.triggers.preparing import Prepared, prepare_after_recalls, prepare_update
from worker.writes import Joined, Write


class Stored(msgspec.Struct, frozen=True):
    """A store decided: the sanitised request, the id a new memory gets, when, its vector, and
    what the sanitiser found (rule names, never the text they matched)."""

    request: StoreRequest
    id: str
    at: int
    redactions: dict[str, int]
    flags: list[str]
    rules: list[str]
    model: str | None = None
    vector: bytes | None = None
    # The facts its text states, asserted once the memory is written (section 19).
    facts: list[PlannedFact] = msgspec.field(default_factory=list)
    # The topic of its session the message joins (section 21); None without a sessionId.
    topic: TopicChoice | None = None


class StoreDone(NamedTuple):
    """What applying a store did: the reply (with its `facts`), whether it restored a forgotten
    memory (audited as an unforget), and the facts its statements ended."""

    reply: StoreReply
    restored: bool
    superseded: tuple[str, ...] = ()  # ended by the facts it asserted
    ended: tuple[str, ...] = ()  # ended by the ends its text states
    topic: Placed | None = None  # the topic step's write, for the audit (section 21)
    appended: bool = False  # the message joined its session's list (a duplicate too)


def _vector(model: str | None, vector: bytes | None) -> Embedding | None:
    if model is None or vector is None:
        return None
    return (model, np.frombuffer(vector, dtype=np.float32))


def _as_tuple(vector: Any) -> tuple[float, ...] | None:
    return None if vector is None else tuple(np.asarray(vector, dtype=np.float64).tolist())


def choose_topic(conn: apsw.Connection, req: StoreRequest, p: Prepared) -> TopicChoice | None:
    """The topic a message stored in a session joins; no topic work without a sessionId."""
    if req.session_id is UNSET or not p.topics:
        return None
    vector = None if p.embedding is None else _as_tuple(p.embedding[1])
    message = Incoming(role=req.role, text=req.content, vector=vector)
    named = None if req.topic_id is UNSET else req.topic_id
    return choose(conn, agent_of(req), req.session_id, message, named)


def decide_store(conn: apsw.Connection, req: StoreRequest, now: int, p: Prepared) -> Stored:
    return Stored(
        request=p.request,
        id=new_memory_id(now),
        at=now,
        redactions=p.found.redactions,
        flags=p.found.flags,
        rules=list(p.found.rules),
        model=None if p.embedding is None else p.embedding[0],
        vector=None if p.embedding is None else p.embedding[1].astype(np.float32).tobytes(),
        facts=plan_facts(p.request.role, p.request.metadata, p.statements),
        topic=choose_topic(conn, p.request, p),
    )


def apply_store(conn: apsw.Connection, d: Stored) -> StoreDone:
    """The memory written (or found: dedup), then, for a new memory, its statements' facts."""
    agent = agent_of(d.request)
    if switched_off(conn, agent):
        return StoreDone(NOT_STORED, False)
    reply, restores, appended, listed = place_store(
        conn,
        d.request,
        now=d.at,
        embedding=_vector(d.model, d.vector),
        memory_id=d.id,
        flags=d.flags,
        topic_id=None if d.topic is None else d.topic.topic_id,
    )
    timestamp = d.at if d.request.timestamp is UNSET else d.request.timestamp
    placed = None
    if d.topic is not None and reply.id is not None and d.request.session_id is not UNSET:
        vector = None if d.vector is None else _as_tuple(np.frombuffer(d.vector, np.float32))
        placing = Placing(
            memory_id=reply.id,
            role=d.request.role,
            text=d.request.content,
            vector=vector,
            timestamp=timestamp,
        )
        placed = place(conn, agent, d.request.session_id, d.topic, placing, listed)
        reply = msgspec.structs.replace(reply, topic_id=placed.topic_id)
    if not reply.stored or reply.id is None or not d.facts:  # most texts state no fact
        unfacted = msgspec.structs.replace(reply, facts=[])
        return StoreDone(unfacted, restores, topic=placed, appended=appended)
    found = apply_planned(conn, agent, d.facts, memory_id=reply.id, timestamp=timestamp, at=d.at)
    return StoreDone(
        msgspec.structs.replace(reply, facts=found.facts),
        restores,
        tuple(found.superseded),
        tuple(found.ended),
        placed,
        appended,
    )


def apply_stores(conn: apsw.Connection, ds: list[Stored]) -> list[StoreDone]:
    """apply_store for each, in order, each run of plain ones (a memory and nothing else: no
    session, no facts) placed together by place_memories."""
    done: list[StoreDone] = []
    run: list[Stored] = []
    for d in ds:
        if d.request.session_id is UNSET and d.topic is None and not d.facts:
            run.append(d)
            continue
        done += _apply_plain(conn, run)
        run = []
        done.append(apply_store(conn, d))
    return done + _apply_plain(conn, run)


def _apply_plain(conn: apsw.Connection, run: list[Stored]) -> list[StoreDone]:
    agents = [agent_of(d.request) for d in run]
    off = {agent for agent in set(agents) if switched_off(conn, agent)}
    news = [
        new_memory(
            d.request,
            now=d.at,
            embedding=_vector(d.model, d.vector),
            memory_id=d.id,
            flags=d.flags,
            agent=agent,
        )
        for d, agent in zip(run, agents, strict=True)
        if agent not in off
    ]
    placed = iter(place_memories(conn, news))
    return [
        StoreDone(NOT_STORED, False) if agent in off else _placed_done(next(placed))
        for agent in agents
    ]


def _placed_done(placed: PlacedMemory) -> StoreDone:
    return StoreDone(placed_reply(placed, facts=[]), placed.restored)


def sanitiser_detail(rules: list[str], flags: list[str]) -> dict[str, Any] | None:
    """The audit's word on the sanitiser: which rules fired and the flags, never the text."""
    return {"rules": rules, "flags": flags} if rules or flags else None


def store_detail(d: Stored, done: StoreDone, *, dedup: bool = False) -> dict[str, Any] | None:
    """The store row's detail: the sanitiser's word, and the topic the message joined with its
    message count after (1: the store started it), never the topic's text; `deduplicated`
    when the content was a memory already."""
    detail = sanitiser_detail(d.rules, d.flags) or {}
    if dedup:
        detail["deduplicated"] = True
    placed = done.topic
    if placed is not None and placed.message_count is not None:
        detail["topic"] = {"id": placed.topic_id, "messageCount": placed.message_count}
    return detail or None


def fact_changes(d: Stored, done: StoreDone) -> list[Change]:
    """The facts a store asserted and ended, audited as those triggers' rows (ids, no text)."""
    facts = done.reply.facts or []
    if not facts and not done.ended:  # most stores: no fact, no audit row to describe
        return []
    agent = agent_of(d.request)
    return [
        Change(
            agent, facts, trigger="memory::fact::assert", detail={"ended": list(done.superseded)}
        ),
        Change(agent, done.ended, trigger="memory::fact::end"),
    ]


def store_changes(d: Stored, done: StoreDone) -> list[Change]:
    """A store that wrote is audited as a store; one that restored a forgotten memory by
    storing its content again, as an unforget. A duplicate that joined a session's list (the
    same content stored into another session) wrote that list and its topic: audited as a
    store too, `detail.deduplicated` saying no memory was made; one that changed nothing, not."""
    reply, restored = done.reply, done.restored
    if reply.id is None:  # the agent's memory is switched off: nothing was written
        return []
    if restored:
        joined = store_detail(d, done) if done.appended else None
        return [Change(agent_of(d.request), [reply.id], trigger="memory::unforget", detail=joined)]
    if not reply.stored:
        topic = done.topic
        if not done.appended and (topic is None or topic.message_count is None):
            return []
        return [Change(agent_of(d.request), [reply.id], detail=store_detail(d, done, dedup=True))]
    detail = store_detail(d, done)
    return [Change(agent_of(d.request), [reply.id], detail=detail), *fact_changes(d, done)]


def store_reply(d: Stored, done: StoreDone) -> StoreReply:
    reply = done.reply
    if reply.disabled:
        return reply
    return msgspec.structs.replace(reply, redactions=d.redactions, flags=d.flags)


def title_followup(d: Stored, done: StoreDone) -> Callable[[Services], None] | None:
    """When the store brought its topic to a count at which the LLM is asked for the topic's
    text, the titler is told once the store is committed (worker/topic_titles.py)."""
    placed = done.topic
    if placed is None or placed.message_count is None or not asks_llm(placed.message_count):
        return None
    agent, topic_id = agent_of(d.request), placed.topic_id
    return lambda s: s.titler.noticed(s, agent, topic_id)


STORE: Write[Stored, StoreDone] = Write(
    decision=Stored,
    decide=decide_store,
    apply=apply_store,
    reply=store_reply,
    changes=store_changes,
    prepare=prepare_after_recalls,
    followup=title_followup,
    # A store without a session decides from nothing in the database (its topic is chosen
    # from its session's), so a batch of them is decided, then placed, at once.
    joined=Joined(fits=lambda req, _: req.session_id is UNSET, apply_all=apply_stores),
)


class Corrected(msgspec.Struct, frozen=True):
    """An update decided: the columns it writes, and what the sanitiser found."""

    correction: Correction
    redactions: dict[str, int]
    flags: list[str]
    rules: list[str]


def decide_update(conn: apsw.Connection, req: UpdateRequest, now: int, p: Prepared) -> Corrected:
    correction = plan_update(conn, p.request, embedding=p.embedding)
    if p.request.content is not UNSET:  # new content: the flags are the new text's
        flags = msgspec.json.encode(p.found.flags).decode() if p.found.flags else None
        correction = msgspec.structs.replace(
            correction, columns={**correction.columns, "flags": flags}
        )
    return Corrected(correction, p.found.redactions, p.found.flags, list(p.found.rules))


UPDATE: Write[Corrected, UpdateReply] = Write(
    decision=Corrected,
    decide=decide_update,
    apply=lambda conn, d: apply_update(conn, d.correction),
    reply=lambda d, reply: msgspec.structs.replace(reply, redactions=d.redactions, flags=d.flags),
    changes=lambda d, reply: [
        Change(d.correction.agent, [d.correction.id], detail=sanitiser_detail(d.rules, d.flags))
    ],
    prepare=prepare_update,
)
