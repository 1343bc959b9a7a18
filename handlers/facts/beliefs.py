"""What asserting, ending and retracting a fact does to the store: the apply side, a function of
the state and the decision alone (the ids and times are the decision's), so that a shard's
replay makes the same rows.

Asserting the value that already holds at `validFrom` (or the current value, when no other value
begins between) confirms it: no new fact, its sources gain the new ones, its confidence is the
higher and its `validFrom` the earlier."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import apsw

from handlers.facts.keys import ON_LINE, compared, line_of
from handlers.facts.timeline import recompute, recompute_all
from schema.base import Agent


class Asserted(NamedTuple):
    id: str
    created: bool
    ended: list[str]  # ids whose valid_to this assert set


class Claim(NamedTuple):
    """One fact to assert, as a decision holds it."""

    subject: str
    predicate: str
    object: str
    valid_from: int
    sources: Sequence[str]
    confidence: float


class Found(NamedTuple):
    # The fact of the same value it confirms: id, valid_from, confidence, sourced.
    confirmed: tuple[str, int, float, int] | None
    before: int | None  # the last valid_from before the claim's, when known (else recomputed)
    follows: str | None = None  # the line's last fact, current: a new fact only ends it
    alone: bool = False  # the line has no fact: a new one changes no other


_ROW = (
    "SELECT id, valid_from, valid_to, predicate, object_key, confidence, sourced FROM facts "
    "WHERE " + ON_LINE + " AND expired_at IS NULL"
)
_LAST = " ORDER BY valid_from DESC, seq DESC LIMIT 1"


def _last_by(conn: apsw.Connection, agent: Agent, line: str, valid_from: int) -> tuple[Any, bool]:
    """The line's last fact to begin by `valid_from`, and whether the line has none at all.
    Usually that is the line's last fact of all (facts mostly arrive in order): one row from the
    index's end, which also says whether the line is empty."""
    last: Any = conn.execute(_ROW + _LAST, (*agent, line)).fetchone()
    if last is None or last[1] <= valid_from:
        return last, last is None
    found = conn.execute(_ROW + " AND valid_from <= ?" + _LAST, (*agent, line, valid_from))
    return found.fetchone(), False


def _confirmed(
    conn: apsw.Connection, agent: Agent, line: str, claim: Claim, object_key: str
) -> Found:
    """The fact of the same value that this claim confirms, if any."""
    # The value holding at validFrom, if any, is the line's last to begin by then (each of the
    # others ends where the next begins): one row, however long the line.
    last, empty = _last_by(conn, agent, line, claim.valid_from)
    holds = last is not None and (last[2] is None or claim.valid_from < last[2])
    if holds and (last[3], last[4]) == (claim.predicate, object_key):
        return Found((str(last[0]), int(last[1]), float(last[5]), int(last[6])), None)
    before = None
    if last is None:
        before = claim.valid_from  # nothing began by then: no fact before it
    elif last[1] < claim.valid_from:
        before = int(last[1])
    if empty:
        return Found(None, before, alone=True)
    if last is not None and last[2] is None:  # the line's last fact, current: no other is
        return Found(None, before, follows=str(last[0]))
    current = conn.execute(
        "SELECT id, valid_from, confidence, sourced FROM facts WHERE tenant = ? AND agent_id = ? "
        "AND subject_key = ? AND predicate = ? AND object_key = ? AND valid_to IS NULL "
        "AND expired_at IS NULL",
        (*agent, compared(claim.subject), claim.predicate, object_key),
    ).fetchone()
    if current is None:
        return Found(None, before)
    between = conn.execute(
        "SELECT 1 FROM facts WHERE " + ON_LINE + " "
        "AND expired_at IS NULL AND valid_from >= ? AND id != ? LIMIT 1",
        (*agent, line, claim.valid_from, current[0]),
    ).fetchone()
    if between is not None:
        return Found(None, before)
    return Found((str(current[0]), int(current[1]), float(current[2]), int(current[3])), None)


_ADD_SOURCE = (
    "INSERT OR IGNORE INTO fact_sources (tenant, agent_id, fact_id, memory_id) VALUES (?, ?, ?, ?)"
)


def add_sources(conn: apsw.Connection, agent: Agent, fact_id: str, sources: Sequence[str]) -> None:
    if len(sources) == 1:  # a stored memory's facts: one source, one plain statement
        conn.execute(_ADD_SOURCE, (*agent, fact_id, sources[0]))
    elif sources:
        conn.executemany(_ADD_SOURCE, [(*agent, fact_id, memory_id) for memory_id in sources])


def assert_fact(
    conn: apsw.Connection, agent: Agent, claim: Claim, *, new_id: str, at: int
) -> Asserted:
    """Confirm the value that holds, or add `new_id` to its timeline (recomputed)."""
    subject_key, object_key = compared(claim.subject), compared(claim.object)
    line = line_of(subject_key, claim.predicate, object_key)
    found = _confirmed(conn, agent, line, claim, object_key)
    if found.confirmed is not None:
        fact_id, valid_from, confidence, sourced = found.confirmed
        earlier = claim.valid_from < valid_from
        if earlier or claim.confidence > confidence or (sourced and not claim.sources):
            conn.execute(
                "UPDATE facts SET confidence = max(confidence, ?), "
                "valid_from = min(valid_from, ?), sourced = sourced AND ? WHERE id = ?",
                (claim.confidence, claim.valid_from, int(bool(claim.sources)), fact_id),
            )  # else it changes nothing: a confirmation is mostly a source more
        add_sources(conn, agent, fact_id, claim.sources)
        changed = recompute(conn, agent, line, claim.valid_from) if earlier else []
        return Asserted(fact_id, False, _ended(changed, fact_id))
    conn.execute(
        "INSERT INTO facts (id, tenant, agent_id, subject, subject_key, predicate, object, "
        "object_key, line, valid_from, recorded_at, confidence, sourced) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            new_id, *agent, claim.subject, subject_key, claim.predicate, claim.object,
            object_key, line, claim.valid_from, at, claim.confidence, int(bool(claim.sources)),
        ),
    )  # fmt: skip
    add_sources(conn, agent, new_id, claim.sources)
    if found.alone:  # the line's only fact: the rule gives it no end
        changed = []
    elif found.follows is not None:  # appended: what the rule changes is the one it follows
        conn.execute(
            "UPDATE facts SET valid_to = ?, superseded_by = ? WHERE id = ?",
            (claim.valid_from, new_id, found.follows),
        )
        changed = [(found.follows, claim.valid_from)]
    else:
        changed = recompute(conn, agent, line, claim.valid_from, before=found.before)
    return Asserted(new_id, True, _ended(changed, new_id))


def _ended(changed: list[tuple[str, int | None]], own: str) -> list[str]:
    return [fact_id for fact_id, valid_to in changed if fact_id != own and valid_to is not None]


def end_facts(
    conn: apsw.Connection,
    agent: Agent,
    subject: str,
    predicate: str,
    obj: str | None,
    at: int,
) -> list[str]:
    """End the subject's current values of the predicate (only `obj`, when given) that began at
    or before `at`; their ids."""
    sql = (
        "SELECT id, line, valid_from FROM facts WHERE tenant = ? AND agent_id = ? "
        "AND subject_key = ? AND predicate = ? AND valid_to IS NULL AND expired_at IS NULL "
        "AND valid_from <= ?"
    )
    params: tuple[object, ...] = (*agent, compared(subject), predicate, at)
    if obj is not None:
        sql, params = sql + " AND object_key = ?", (*params, compared(obj))
    found: list[Any] = conn.execute(sql + " ORDER BY seq", params).fetchall()
    for fact_id, _, _ in found:
        conn.execute("UPDATE facts SET ended_at = ? WHERE id = ?", (at, fact_id))
    recompute_all(conn, agent, ((str(line), int(begun)) for _, line, begun in found))
    return [str(fact_id) for fact_id, _, _ in found]


def retract_facts(
    conn: apsw.Connection, agent: Agent, ids: Sequence[str], at: int
) -> tuple[list[str], list[str]]:
    """Mark the agent's facts of `ids` retracted (once: a second retraction changes nothing)
    and give their intervals back to their timelines; (found, missing) in the order asked."""
    found: list[str] = []
    missing: list[str] = []
    lines: list[tuple[str, int]] = []
    for fact_id in dict.fromkeys(ids):
        row = conn.execute(
            "SELECT line, expired_at, valid_from FROM facts "
            "WHERE tenant = ? AND agent_id = ? AND id = ?",
            (*agent, fact_id),
        ).fetchone()
        if row is None:
            missing.append(fact_id)
            continue
        found.append(fact_id)
        if row[1] is None:
            conn.execute("UPDATE facts SET expired_at = ? WHERE id = ?", (at, fact_id))
            lines.append((str(row[0]), int(row[2])))
    recompute_all(conn, agent, lines)
    return found, missing


def delete_facts(conn: apsw.Connection, agent: Agent, ids: Sequence[str]) -> int:
    """Remove facts with their history and give their intervals back to their timelines."""
    lines: list[tuple[str, int]] = []
    for fact_id in ids:
        row = conn.execute(
            "DELETE FROM facts WHERE tenant = ? AND agent_id = ? AND id = ? "
            "RETURNING line, valid_from",
            (*agent, fact_id),
        ).fetchone()
        if row is not None:
            lines.append((str(row[0]), int(row[1])))
        conn.execute("DELETE FROM fact_sources WHERE fact_id = ?", (fact_id,))
    recompute_all(conn, agent, lines)
    return len(lines)


def memories_gone(conn: apsw.Connection, agent: Agent, memory_ids: Sequence[str]) -> int:
    """Memories of the agent deleted, evicted or merged away: they stop being sources, and a
    fact asserted from memories that has none left goes with its history; how many went."""
    touched: list[str] = []
    for memory_id in memory_ids:
        touched += [
            str(fact_id)
            for (fact_id,) in conn.execute(
                "DELETE FROM fact_sources WHERE tenant = ? AND agent_id = ? AND memory_id = ? "
                "RETURNING fact_id",
                (*agent, memory_id),
            )
        ]
    orphans = [
        fact_id
        for fact_id in dict.fromkeys(touched)
        if conn.execute(
            "SELECT 1 FROM facts f WHERE f.id = ? AND f.sourced AND NOT EXISTS "
            "(SELECT 1 FROM fact_sources s WHERE s.fact_id = f.id)",
            (fact_id,),
        ).fetchone()
    ]
    return delete_facts(conn, agent, orphans)
