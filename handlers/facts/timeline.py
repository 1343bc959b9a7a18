"""The timeline rule (contract section 19): a line's facts that are not retracted, ordered by
`valid_from` (then arrival), each hold until the next begins unless their own end comes first;
the last holds until its end, or is current. Every write that changes a line recomputes it, so
whatever order facts arrive, are ended, retracted or deleted in, the stored `valid_to` and
`superseded_by` are this rule's.

A fact's interval depends only on itself and the fact after it, so a change at `since` is
recomputed from the last fact to begin before `since` onwards: two rows for the usual append,
however long the line."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apsw

from handlers.facts.keys import ON_LINE
from schema.base import Agent

Changed = list[tuple[str, int | None]]


def recompute(
    conn: apsw.Connection,
    agent: Agent,
    line: str,
    since: int | None = None,
    *,
    before: int | None = None,
) -> Changed:
    """Bring a line's facts (from `since`'s predecessor on; None: all) in line with the rule;
    (id, new valid_to) of each that changed. `before`: the predecessor's valid_from, when the
    caller knows it (`since` itself when there is none)."""
    lower = before
    if since is not None and before is None:
        row: Any = conn.execute(
            "SELECT max(valid_from) FROM facts WHERE " + ON_LINE + " "
            "AND expired_at IS NULL AND valid_from < ?",
            (*agent, line, since),
        ).fetchone()
        lower = since if row[0] is None else int(row[0])
    rows: list[Any] = conn.execute(
        "SELECT id, valid_from, ended_at, valid_to, superseded_by FROM facts "
        "WHERE " + ON_LINE + " AND expired_at IS NULL "
        "AND valid_from >= ? ORDER BY valid_from, seq",
        (*agent, line, -(2**63) if lower is None else lower),
    ).fetchall()
    changed: Changed = []
    for index, (fact_id, _, ended_at, valid_to, superseded_by) in enumerate(rows):
        following = rows[index + 1] if index + 1 < len(rows) else None
        to, by = ended_at, None
        if following is not None and (ended_at is None or following[1] <= ended_at):
            to, by = following[1], following[0]
        if (to, by) != (valid_to, superseded_by):
            conn.execute(
                "UPDATE facts SET valid_to = ?, superseded_by = ? WHERE id = ?",
                (to, by, fact_id),
            )
            changed.append((str(fact_id), to))
    return changed


def recompute_all(
    conn: apsw.Connection, agent: Agent, changes: Iterable[tuple[str, int | None]]
) -> Changed:
    """Each line named, from the earliest of its changes (line, since; None: all of it)."""
    earliest: dict[str, int | None] = {}
    for line, since in changes:
        if line not in earliest:
            earliest[line] = since
        else:
            held = earliest[line]
            earliest[line] = None if held is None or since is None else min(held, since)
    changed: Changed = []
    for line in sorted(earliest):
        changed += recompute(conn, agent, line, earliest[line])
    return changed
