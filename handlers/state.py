"""What the rules shared with memories ask of section 14's state: an agent's erasure and the
counts stats and metrics report. The triggers themselves: kv, tasks, usage and canonical."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw

from handlers.stats import scope_where
from handlers.tasks import visible_tasks
from schema.base import Agent


def erase_state(conn: apsw.Connection, agent: Agent) -> int:
    """Remove the agent's keys (not the tenant's `shared` ones, which are nobody's), its usage
    records, its canonical sessions (their messages are memories and go with those) and the
    tasks it posted; the tasks it holds a claim on go back to pending, and the tasks it
    completed for others keep their result without its name. How many keys went."""
    keys = conn.execute(
        "DELETE FROM kv WHERE tenant = ? AND agent_id = ? RETURNING 1", agent
    ).fetchall()
    conn.execute("DELETE FROM usage WHERE tenant = ? AND agent_id = ?", agent)
    conn.execute("DELETE FROM usage_days WHERE tenant = ? AND agent_id = ?", agent)
    conn.execute("DELETE FROM tasks WHERE tenant = ? AND agent_id = ?", agent)
    conn.execute("DELETE FROM canonical_sessions WHERE tenant = ? AND agent_id = ?", agent)
    conn.execute(
        "UPDATE tasks SET status = 'pending', claimed_by = NULL, claimed_at = NULL, "
        "claim_expires = NULL WHERE tenant = ? AND claimed_by = ? AND status = 'claimed'",
        agent,
    )
    conn.execute("UPDATE tasks SET claimed_by = NULL WHERE tenant = ? AND claimed_by = ?", agent)
    return len(keys)


STATE_COUNTED = (
    "kv_keys",
    "tasks_pending",
    "tasks_claimed",
    "tasks_completed",
    "usage_records",
    "canonical_sessions",
)


def state_counts(
    conn: apsw.Connection, tenant: str | None, now: int, grants: Sequence[str] | None = None
) -> dict[str, int]:
    """Keys (the `shared` ones included, unless grants leave them out), tasks by status as the
    board reads at `now` (an expired claim is pending), usage records and canonical sessions,
    of one tenant or all (None), and within it of the agents `grants` match (None: all; the
    tasks such a user's listing shows: handlers/tasks.py)."""
    where, params = scope_where(tenant, grants)

    def one(sql: str, extra: tuple[Any, ...] = ()) -> int:
        [(value,)] = conn.execute(sql, (*params, *extra)).fetchall()
        return int(str(value or 0))

    shown, shown_params = ("1", ()) if grants is None else visible_tasks(grants, now)
    tasks_where, tasks_params = scope_where(tenant, None)
    tasks_where = f"{tasks_where} AND {shown}"

    def tasks(condition: str, *extra: int) -> int:
        sql = f"SELECT count(*) FROM tasks WHERE {tasks_where} AND {condition}"
        [(value,)] = conn.execute(sql, (*tasks_params, *shown_params, *extra)).fetchall()
        return int(str(value or 0))

    claimed = tasks("status = 'claimed' AND claim_expires > ?", now)
    open_tasks = tasks("status <> 'completed'")
    return {
        "kv_keys": one(f"SELECT count(*) FROM kv WHERE {where}"),
        "tasks_pending": open_tasks - claimed,
        "tasks_claimed": claimed,
        "tasks_completed": tasks("status = 'completed'"),
        "usage_records": one(f"SELECT sum(events) FROM usage_days WHERE {where}"),
        "canonical_sessions": one(f"SELECT count(*) FROM canonical_sessions WHERE {where}"),
    }
