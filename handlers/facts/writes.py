"""memory::fact::assert, end and retract as decide and apply (worker/writes.py): decide checks
the request against the state and chooses the new fact's id and the time; apply is
handlers/facts/beliefs.py over that decision."""

from __future__ import annotations

import uuid

import apsw
import msgspec
from msgspec import UNSET

from handlers.audit import Change
from handlers.facts.beliefs import Claim, assert_fact, end_facts, retract_facts
from handlers.facts.reading import fact_by_id
from schema.base import Agent, agent_of
from schema.errors import InvalidRequest
from schema.facts import (
    FactAssertReply,
    FactAssertRequest,
    FactEndReply,
    FactEndRequest,
    FactRetractReply,
    FactRetractRequest,
)


def check_sources(conn: apsw.Connection, agent: Agent, sources: list[str]) -> None:
    """Every source is a memory of the agent (400 naming the first that is not)."""
    for index, memory_id in enumerate(sources):
        found = conn.execute(
            "SELECT 1 FROM memories WHERE tenant = ? AND agent_id = ? AND id = ?",
            (*agent, memory_id),
        ).fetchone()
        if found is None:
            raise InvalidRequest(
                f"sources: no memory {memory_id!r} of this agent - at `$.sources[{index}]`"
            )


class Asserting(msgspec.Struct, frozen=True):
    request: FactAssertRequest
    id: str  # the new fact's, if the assert makes one
    at: int


def decide_assert(
    conn: apsw.Connection, req: FactAssertRequest, now: int, prepared: object
) -> Asserting:
    check_sources(conn, agent_of(req), req.sources)
    return Asserting(req, str(uuid.uuid4()), now)


def apply_assert(conn: apsw.Connection, d: Asserting) -> FactAssertReply:
    req, agent = d.request, agent_of(d.request)
    valid_from = d.at if req.valid_from is UNSET else req.valid_from
    claim = Claim(req.subject, req.predicate, req.object, valid_from, req.sources, req.confidence)
    done = assert_fact(conn, agent, claim, new_id=d.id, at=d.at)
    return FactAssertReply(
        fact=fact_by_id(conn, agent, done.id), created=done.created, ended=done.ended
    )


def assert_changes(d: Asserting, reply: FactAssertReply) -> list[Change]:
    detail = {"created": reply.created, "ended": reply.ended}
    return [Change(agent_of(d.request), [reply.fact.id], detail=detail)]


class Ending(msgspec.Struct, frozen=True):
    request: FactEndRequest
    at: int  # when the values end


def decide_end(conn: apsw.Connection, req: FactEndRequest, now: int, prepared: object) -> Ending:
    if req.at is not UNSET and req.at > now:
        raise InvalidRequest(f"at: {req.at} is in the future (now {now}) - at `$.at`")
    return Ending(req, now if req.at is UNSET else req.at)


def apply_end(conn: apsw.Connection, d: Ending) -> FactEndReply:
    req = d.request
    obj = req.object if isinstance(req.object, str) else None
    return FactEndReply(ended=end_facts(conn, agent_of(req), req.subject, req.predicate, obj, d.at))


def end_changes(d: Ending, reply: FactEndReply) -> list[Change]:
    return [Change(agent_of(d.request), reply.ended)]


class Retracting(msgspec.Struct, frozen=True):
    request: FactRetractRequest
    at: int


def apply_retract(conn: apsw.Connection, d: Retracting) -> FactRetractReply:
    found, missing = retract_facts(conn, agent_of(d.request), d.request.ids, d.at)
    return FactRetractReply(retracted=len(found), missing=missing)


def retract_changes(d: Retracting, reply: FactRetractReply) -> list[Change]:
    found = [fact_id for fact_id in dict.fromkeys(d.request.ids) if fact_id not in reply.missing]
    return [Change(agent_of(d.request), found)]
