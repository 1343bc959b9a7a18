"""memory::fact::query, and the facts as replies show them: current by default, those that held
at `asOf`, or every one with `includeHistory`; never a fact whose every source is forgotten."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import apsw
from msgspec import UNSET

from handlers.facts.keys import compared, statement
from schema.base import Agent, agent_of
from schema.errors import InvalidRequest
from schema.facts import Fact, FactQueryReply, FactQueryRequest, FactStatus

COLUMNS = (
    "f.id, f.subject, f.predicate, f.object, f.valid_from, f.valid_to, f.recorded_at, "
    "f.expired_at, f.confidence, f.superseded_by"
)
# Left out of answers: a fact from memories (`sourced`) none of which is left unforgotten.
VISIBLE = (
    "(f.sourced = 0 OR EXISTS (SELECT 1 FROM fact_sources s JOIN memories m ON m.id = s.memory_id "
    "WHERE s.fact_id = f.id AND m.forgotten_at IS NULL))"
)
CURRENT = "f.valid_to IS NULL AND f.expired_at IS NULL"
HELD_AT = "f.expired_at IS NULL AND f.valid_from <= ? AND (f.valid_to IS NULL OR ? < f.valid_to)"


def status_of(valid_to: object, expired_at: object) -> FactStatus:
    if expired_at is not None:
        return "retracted"
    return "current" if valid_to is None else "past"


def sources_of(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        for fact_id, memory_id in conn.execute(
            f"SELECT fact_id, memory_id FROM fact_sources WHERE fact_id IN ({marks})", chunk
        ):
            found[str(fact_id)].append(str(memory_id))
    return found


def facts_of(conn: apsw.Connection, rows: Sequence[Any]) -> list[Fact]:
    """Replies for rows of COLUMNS, with their sources."""
    sources = sources_of(conn, [str(row[0]) for row in rows])
    facts = []
    for row in rows:
        fact_id, subject, predicate, obj, valid_from, valid_to, recorded_at, expired_at = row[:8]
        facts.append(
            Fact(
                id=fact_id, subject=subject, predicate=predicate, object=obj,
                statement=statement(subject, predicate, obj),
                status=status_of(valid_to, expired_at), valid_from=valid_from,
                valid_to=valid_to, recorded_at=recorded_at, expired_at=expired_at,
                confidence=row[8], sources=sources.get(fact_id, []), superseded_by=row[9],
            )
        )  # fmt: skip
    return facts


def fact_by_id(conn: apsw.Connection, agent: Agent, fact_id: str) -> Fact:
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM facts f WHERE f.tenant = ? AND f.agent_id = ? AND f.id = ?",
        (*agent, fact_id),
    ).fetchall()
    [fact] = facts_of(conn, rows)
    return fact


def query_facts(conn: apsw.Connection, req: FactQueryRequest, *, now: int) -> FactQueryReply:
    if req.include_history and req.as_of is not UNSET:
        raise InvalidRequest(
            "includeHistory: give either `asOf` or `includeHistory`, not both - at "
            "`$.includeHistory`"
        )
    where = ["f.tenant = ?", "f.agent_id = ?", VISIBLE]
    params: list[object] = [*agent_of(req)]
    if req.as_of is not UNSET:
        where.append(HELD_AT)
        params += [req.as_of, req.as_of]
    elif not req.include_history:
        where.append(CURRENT)
    for column, value in (("subject_key", req.subject), ("object_key", req.object)):
        if isinstance(value, str):
            where.append(f"f.{column} = ?")
            params.append(compared(value))
    if isinstance(req.predicate, str):
        where.append("f.predicate = ?")
        params.append(req.predicate)
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM facts f WHERE {' AND '.join(where)} "
        "ORDER BY f.subject_key, f.predicate, f.valid_from, f.seq LIMIT ?",
        (*params, req.limit),
    ).fetchall()
    return FactQueryReply(facts=facts_of(conn, rows))
