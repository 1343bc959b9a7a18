"""What the rules shared with memories ask of section 14's state: an agent's erasure and the
counts stats and metrics report. The triggers themselves: kv, tasks, usage and canonical."""

from __future__ import annotations

import apsw

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


def state_counts(conn: apsw.Connection, tenant: str | None, now: int) -> dict[str, int]:
    """Keys (the `shared` ones included), tasks by status as the board reads at `now` (an
    expired claim is pending), usage records and canonical sessions, of one tenant or all
    (None)."""
    where, params = ("", ()) if tenant is None else (" WHERE tenant = ?", (tenant,))

    def one(sql: str, *extra: int) -> int:
        [(value,)] = conn.execute(sql, (*params, *extra)).fetchall()
        return int(str(value or 0))

    both = where + (" AND" if where else " WHERE")
    claimed = one(f"SELECT count(*) FROM tasks{both} status = 'claimed' AND claim_expires > ?", now)
    open_tasks = one(f"SELECT count(*) FROM tasks{both} status <> 'completed'")
    return {
        "kv_keys": one(f"SELECT count(*) FROM kv{where}"),
        "tasks_pending": open_tasks - claimed,
        "tasks_claimed": claimed,
        "tasks_completed": one(f"SELECT count(*) FROM tasks{both} status = 'completed'"),
        "usage_records": one(f"SELECT sum(events) FROM usage_days{where}"),
        "canonical_sessions": one(f"SELECT count(*) FROM canonical_sessions{where}"),
    }
