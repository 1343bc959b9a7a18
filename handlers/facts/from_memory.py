"""Facts from what is stored (contract section 19, `MEMORY_WORKER_FACTS=extract`): a user or
assistant memory's statements, planned by the store's decision (each new fact's id chosen there)
and applied in the store's transaction once the memory is written: asserted from the memory's
timestamp with the memory as their source, or, for an end, ending at that timestamp."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

import apsw
import msgspec

from handlers.facts.beliefs import Claim, assert_fact, end_facts
from handlers.facts.extract import Statement
from schema.base import ID_PATTERN, Agent
from schema.facts import PREDICATE_PATTERN

_ID = re.compile(ID_PATTERN)
_PREDICATE = re.compile(PREDICATE_PATTERN)
READ_ROLES = ("user", "assistant")


class PlannedFact(msgspec.Struct, frozen=True):
    """One statement of a stored text, as the store's decision holds it."""

    subject: str
    predicate: str
    object: str
    ends: bool
    id: str  # the fact's, if asserting it makes one


class FromMemory(NamedTuple):
    facts: list[str]  # created or confirmed
    superseded: list[str]  # ended by those asserts
    ended: list[str]  # ended by the text's ends


def subject_of(role: str, metadata: Any) -> str:
    """The memory's `metadata.speaker` when it is a usable name, else its role."""
    speaker = metadata.get("speaker") if isinstance(metadata, dict) else None
    name = speaker.strip() if isinstance(speaker, str) else ""
    return name if 0 < len(name) <= 256 and _ID.match(name) else role


def plan_facts(role: str, metadata: Any, statements: Sequence[Statement]) -> list[PlannedFact]:
    """What the store will assert and end (statements whose predicate or object a fact cannot
    hold are left out)."""
    if not statements or role not in READ_ROLES:
        return []
    subject = subject_of(role, metadata)
    return [
        PlannedFact(subject, s.predicate, s.object, s.ends, str(uuid.uuid4()))
        for s in statements
        if len(s.predicate) <= 64
        and _PREDICATE.match(s.predicate)
        and 0 < len(s.object) <= 1024
        and _ID.match(s.object)
    ]


def apply_planned(
    conn: apsw.Connection,
    agent: Agent,
    planned: Sequence[PlannedFact],
    *,
    memory_id: str,
    timestamp: int,
    at: int,
) -> FromMemory:
    facts: list[str] = []
    superseded: list[str] = []
    ended: list[str] = []
    for plan in planned:
        if plan.ends:
            ended += end_facts(conn, agent, plan.subject, plan.predicate, plan.object, timestamp)
            continue
        claim = Claim(plan.subject, plan.predicate, plan.object, timestamp, [memory_id], 1.0)
        done = assert_fact(conn, agent, claim, new_id=plan.id, at=at)
        facts.append(done.id)
        superseded += done.ended
    return FromMemory(_once(facts), _once(superseded), _once(ended))


def _once(ids: list[str]) -> list[str]:
    """Each id once, in order (a text of one statement, the usual, has nothing to drop)."""
    return ids if len(ids) < 2 else list(dict.fromkeys(ids))
