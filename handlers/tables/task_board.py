"""The task board (handlers/tasks.py): one per tenant, each task with the agent that posted it
(`agent_id`, the task's `createdBy`), exported and erased with that agent.

A second import of the same file: tasks are keyed by their ids and added when missing, never
overwritten.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal

import apsw
import msgspec

from handlers.tables.records import NonEmpty, Record, at, json_text, json_value
from handlers.tables.table import CountScope, Stat, Table, Transfer
from handlers.tasks import visible_tasks
from schema.base import DEFAULT_TENANT, Agent, Millis, StoredId, Tenant


class TaskRecord(Record, frozen=True, tag="task"):
    """A task, with the agent that posted it (`agentId`, the task's `createdBy`)."""

    agent_id: StoredId
    id: NonEmpty
    title: str
    status: Literal["pending", "claimed", "completed"]
    claim_timeout: Annotated[int, msgspec.Meta(ge=1)]
    created_at: Millis
    description: str | None = None
    assignee: str | None = None
    claimed_by: str | None = None
    claim_expires: int | None = None
    result: Any = None
    claimed_at: Millis | None = None
    completed_at: Millis | None = None
    tenant: Tenant = DEFAULT_TENANT


COLUMNS = (
    "tenant, id, agent_id, title, description, assignee, status, claimed_by, claim_timeout, "
    "claim_expires, result, created_at, claimed_at, completed_at"
)


def export_tasks(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[TaskRecord]:
    for row in conn.execute(
        f"SELECT {COLUMNS} FROM tasks WHERE tenant = ? AND agent_id = ? ORDER BY seq",
        (tenant, agent_id),
    ):
        yield TaskRecord(
            tenant=tenant, id=row[1], agent_id=row[2], title=row[3], description=row[4],
            assignee=row[5], status=row[6], claimed_by=row[7], claim_timeout=row[8],
            claim_expires=row[9], result=json_value(row[10]), created_at=row[11],
            claimed_at=row[12], completed_at=row[13],
        )  # fmt: skip


def stage_task(conn: apsw.Connection, r: TaskRecord, tenant: str, line: int) -> None:
    result = None if r.result is None else json_text(r.result)
    try:
        conn.execute(
            f"INSERT INTO temp.transfer_tasks (seq, {COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (line, tenant, r.id, r.agent_id, r.title, r.description, r.assignee, r.status,
             r.claimed_by, r.claim_timeout, r.claim_expires, result, r.created_at,
             r.claimed_at, r.completed_at),
        )  # fmt: skip
    except apsw.ConstraintError:
        raise at(line, "a second id", "id") from None


def apply_tasks(conn: apsw.Connection, now: int) -> dict[str, int]:
    conn.execute(
        f"INSERT OR IGNORE INTO main.tasks ({COLUMNS}) "
        f"SELECT {COLUMNS} FROM temp.transfer_tasks ORDER BY seq"
    )
    return {"tasks_added": int(conn.changes())}


def erase_tasks(conn: apsw.Connection, table: str, agent: Agent) -> int:
    """The tasks the agent posted go; those it holds a claim on go back to pending, and those
    it completed for others keep their result without its name. How many went."""
    conn.execute("DELETE FROM tasks WHERE tenant = ? AND agent_id = ?", agent)
    posted = int(conn.changes())
    conn.execute(
        "UPDATE tasks SET status = 'pending', claimed_by = NULL, claimed_at = NULL, "
        "claim_expires = NULL WHERE tenant = ? AND claimed_by = ? AND status = 'claimed'",
        agent,
    )
    conn.execute("UPDATE tasks SET claimed_by = NULL WHERE tenant = ? AND claimed_by = ?", agent)
    return posted


def _tasks(conn: apsw.Connection, scope: CountScope, condition: str, *extra: int) -> int:
    """Tasks as the board reads at `scope.now`, of the tenant (or all), and with grants the
    tasks such a user's listing shows (handlers/tasks.py)."""
    where, params = scope.where(granted=False)
    shown, shown_params = (
        ("1", ()) if scope.grants is None else visible_tasks(scope.grants, scope.now)
    )
    sql = f"SELECT count(*) FROM tasks WHERE {where} AND {shown} AND {condition}"
    [(value,)] = conn.execute(sql, (*params, *shown_params, *extra)).fetchall()
    return int(str(value or 0))


def _claimed(conn: apsw.Connection, scope: CountScope) -> int:
    return _tasks(conn, scope, "status = 'claimed' AND claim_expires > ?", scope.now)


def _pending(conn: apsw.Connection, scope: CountScope) -> int:
    """Open tasks not under a current claim: an expired claim is pending."""
    return _tasks(conn, scope, "status <> 'completed'") - _claimed(conn, scope)


TASKS = Table(
    name="tasks",
    owner="tenant",
    erase=erase_tasks,
    transfer=Transfer(
        record=TaskRecord,
        export=export_tasks,
        staging="CREATE TEMP TABLE transfer_tasks (seq INTEGER PRIMARY KEY, tenant, id, "
        "agent_id, title, description, assignee, status, claimed_by, claim_timeout, "
        "claim_expires, result, created_at, claimed_at, completed_at, UNIQUE (tenant, id));",
        stage=stage_task,
        apply=apply_tasks,
        summary="tasks {tasks_added} added",
    ),
    stats=(
        Stat(
            key="tasks_pending",
            count=_pending,
            label="tasks pending",
            metric="Tasks pending on the board (an expired claim counts as pending).",
        ),
        Stat(
            key="tasks_claimed",
            count=_claimed,
            label="tasks claimed",
            metric="Tasks claimed and not completed.",
        ),
        Stat(
            key="tasks_completed",
            count=lambda conn, scope: _tasks(conn, scope, "status = 'completed'"),
            label="tasks completed",
            metric="Tasks completed.",
        ),
    ),
)
