"""The timeline rule (contract section 19): a line's facts that are not retracted, ordered by
`valid_from` (then arrival), each hold until the next begins unless their own end comes first;
the last holds until its end, or is current. Every write that changes a line recomputes it, so
whatever order facts arrive, are ended, retracted or deleted in, the stored `valid_to` and
`superseded_by` are this rule's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apsw

from schema.base import Agent


def recompute(conn: apsw.Connection, agent: Agent, line: str) -> list[tuple[str, int | None]]:
    """Bring one line's facts in line with the rule; (id, new valid_to) of each that changed."""
    rows: list[Any] = conn.execute(
        "SELECT id, valid_from, ended_at, valid_to, superseded_by FROM facts "
        "WHERE tenant = ? AND agent_id = ? AND line = ? AND expired_at IS NULL "
        "ORDER BY valid_from, seq",
        (*agent, line),
    ).fetchall()
    changed: list[tuple[str, int | None]] = []
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
    conn: apsw.Connection, agent: Agent, lines: Iterable[str]
) -> list[tuple[str, int | None]]:
    changed: list[tuple[str, int | None]] = []
    for line in sorted(set(lines)):
        changed += recompute(conn, agent, line)
    return changed
