"""memory::task::*: a task board the agents of a tenant share.

Each write is a decide step (the task id, the times, the task a claim takes) and an apply step,
in one writer transaction. A claim is one conditional UPDATE (`... WHERE the task is still
claimable RETURNING`) inside a transaction that holds SQLite's write lock, so however many
claimers ask at once, through however many workers sharing the file, a task is claimed once.
A claim expires `claimTimeout` after it was taken: from then on the task reads as pending (no
timer has to reset the row first) and the next claim may take it; the row says `claimed` until
then, and `claim_expires` is what decides.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apsw
import msgspec
from msgspec import UNSET

from handlers.audit import Change
from handlers.cursors import decode_cursor, encode_cursor
from handlers.grants import matches_clause
from handlers.kv import check_json
from handlers.paging import fitting_page
from schema.base import Agent, agent_of, tenant_of
from schema.errors import Conflict, NotFound, PayloadTooLarge
from schema.tasks import (
    MAX_TEXT_BYTES,
    Task,
    TaskClaimReply,
    TaskClaimRequest,
    TaskCompleteReply,
    TaskCompleteRequest,
    TaskListReply,
    TaskListRequest,
    TaskPostReply,
    TaskPostRequest,
)

COLUMNS = (
    "id, title, description, status, agent_id, assignee, claimed_by, result, created_at, "
    "claimed_at, completed_at, claim_expires"
)
# A task a claim may take at `?` (the time): pending, or claimed by a claim that has expired.
CLAIMABLE = "(status = 'pending' OR (status = 'claimed' AND claim_expires <= ?))"


def visible_tasks(grants: Sequence[str], now: int) -> tuple[str, tuple[Any, ...]]:
    """The tasks a user with grants sees on the board at `now`: those its agents posted, are
    assigned or hold (or held), and the unassigned ones its agents may claim. A condition over
    `tasks` and its parameters."""
    parts, params = [], list[Any]()
    for column in ("agent_id", "assignee", "claimed_by"):
        sql, patterns = matches_clause(grants, column)
        parts.append(sql)
        params.extend(patterns)
    parts.append(f"(assignee IS NULL AND {CLAIMABLE})")
    return "(" + " OR ".join(parts) + ")", (*params, now)


def task_of(row: Any, now: int) -> Task:
    """A row as the board shows it at `now`: an expired claim is pending, with no claimer."""
    (task_id, title, description, status, created_by, assignee, claimed_by, result,
     created_at, claimed_at, completed_at, claim_expires) = row  # fmt: skip
    if status == "claimed" and claim_expires <= now:
        status, claimed_by, claimed_at = "pending", None, None
    return Task(
        task_id=task_id,
        title=title,
        description=description,
        status=status,
        created_by=created_by,
        assignee=assignee,
        claimed_by=claimed_by,
        result=None if result is None else msgspec.json.decode(result),
        created_at=created_at,
        claimed_at=claimed_at,
        completed_at=completed_at,
    )


class Posted(msgspec.Struct, frozen=True):
    creator: Agent
    task_id: str
    request: TaskPostRequest
    at: int


def decide_post(req: TaskPostRequest, *, now: int) -> Posted:
    if isinstance(req.description, str) and len(req.description.encode()) > MAX_TEXT_BYTES:
        raise PayloadTooLarge(f"description: more than {MAX_TEXT_BYTES} bytes - at `$.description`")
    return Posted((tenant_of(req), req.created_by), uuid.uuid4().hex, req, now)


def apply_post(conn: apsw.Connection, event: Posted) -> TaskPostReply:
    """A replay of a post already applied adds nothing (the id is taken)."""
    req = event.request
    conn.execute(
        "INSERT OR IGNORE INTO tasks (tenant, id, agent_id, title, description, assignee, "
        "status, claim_timeout, created_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
        (
            event.creator[0], event.task_id, event.creator[1], req.title,
            None if req.description is UNSET else req.description,
            None if req.assignee is UNSET else req.assignee, req.claim_timeout, event.at,
        ),
    )  # fmt: skip
    return TaskPostReply(task_id=event.task_id)


def task_post(conn: apsw.Connection, req: TaskPostRequest, *, now: int) -> TaskPostReply:
    return apply_post(conn, decide_post(req, now=now))


def task_post_changes(req: TaskPostRequest, reply: TaskPostReply) -> list[Change]:
    return [Change((tenant_of(req), req.created_by), [reply.task_id])]


@dataclass(frozen=True)
class Claim:
    """The decision: who claims, which task (None: nothing to claim), and when."""

    claimer: Agent
    seq: int | None
    at: int


def decide_claim(conn: apsw.Connection, req: TaskClaimRequest, *, now: int) -> Claim:
    """The oldest claimable task assigned to the claimer or to nobody."""
    claimer = agent_of(req)
    row = conn.execute(
        "SELECT seq FROM tasks WHERE tenant = ? AND status <> 'completed' "
        f"AND (assignee IS NULL OR assignee = ?) AND {CLAIMABLE} ORDER BY seq LIMIT 1",
        (*claimer, now),
    ).fetchone()
    return Claim(claimer, None if row is None else int(row[0]), now)


def apply_claim(conn: apsw.Connection, event: Claim) -> TaskClaimReply:
    """Takes the task only if it is still claimable: a replay, or a task another worker took
    between decide and apply, claims nothing."""
    if event.seq is None:
        return TaskClaimReply(task=None)
    row = conn.execute(
        "UPDATE tasks SET status = 'claimed', claimed_by = ?, claimed_at = ?, "
        f"claim_expires = ? + claim_timeout WHERE seq = ? AND tenant = ? AND {CLAIMABLE} "
        f"RETURNING {COLUMNS}",
        (event.claimer[1], event.at, event.at, event.seq, event.claimer[0], event.at),
    ).fetchone()
    return TaskClaimReply(task=None if row is None else task_of(row, event.at))


def task_claim(conn: apsw.Connection, req: TaskClaimRequest, *, now: int) -> TaskClaimReply:
    return apply_claim(conn, decide_claim(conn, req, now=now))


def task_claim_changes(req: TaskClaimRequest, reply: TaskClaimReply) -> list[Change]:
    return [] if reply.task is None else [Change(agent_of(req), [reply.task.task_id])]


class Completion(msgspec.Struct, frozen=True):
    claimer: Agent
    task_id: str
    result: str
    at: int
    done_already: Task | None  # completed by this claimer before: a repeat changes nothing


def decide_complete(conn: apsw.Connection, req: TaskCompleteRequest, *, now: int) -> Completion:
    """Only the agent holding a current claim completes: 404 for an unknown task, 409 for
    anyone else, for a claim that expired, and for a task someone else completed."""
    claimer = agent_of(req)
    result = check_json(req.result, "result")
    row = conn.execute(
        f"SELECT {COLUMNS} FROM tasks WHERE tenant = ? AND id = ?", (claimer[0], req.task_id)
    ).fetchone()
    if row is None:
        raise NotFound("taskId: no such task - at `$.taskId`")
    task = task_of(row, now)
    if task.status == "completed" and task.claimed_by == claimer[1]:
        return Completion(claimer, req.task_id, result, now, task)
    if task.status != "claimed" or task.claimed_by != claimer[1]:
        state = {
            "completed": "was completed by another agent",
            "pending": "is not claimed (never, or the claim expired)",
            "claimed": "is claimed by another agent",
        }[task.status]
        raise Conflict(f"taskId: the task {state} - at `$.taskId`")
    return Completion(claimer, req.task_id, result, now, None)


def apply_complete(conn: apsw.Connection, event: Completion) -> TaskCompleteReply:
    if event.done_already is not None:
        return TaskCompleteReply(task=event.done_already)
    row = conn.execute(
        "UPDATE tasks SET status = 'completed', result = ?, completed_at = ?, "
        "claim_expires = NULL WHERE tenant = ? AND id = ? AND claimed_by = ? "
        f"AND status = 'claimed' RETURNING {COLUMNS}",
        (event.result, event.at, event.claimer[0], event.task_id, event.claimer[1]),
    ).fetchone()
    if row is None:  # a replay after the completion: as it is now
        row = conn.execute(
            f"SELECT {COLUMNS} FROM tasks WHERE tenant = ? AND id = ?",
            (event.claimer[0], event.task_id),
        ).fetchone()
    return TaskCompleteReply(task=task_of(row, event.at))


def task_list(
    conn: apsw.Connection, req: TaskListRequest, *, now: int, budget: int
) -> TaskListReply:
    """Oldest first, as the board reads at `now` (an expired claim lists as pending); the page
    within `budget` bytes (handlers/paging.py)."""
    tenant = tenant_of(req)
    status = None if req.status is UNSET else req.status
    assignee = None if req.assignee is UNSET else req.assignee
    scope = ("tasks", tenant, status, assignee, None if req.grants is UNSET else req.grants)
    where: list[str] = ["tenant = ?"]
    params: list[Any] = [tenant]
    if status == "pending":
        where.append(CLAIMABLE)
        params.append(now)
    elif status == "claimed":
        where.append("status = 'claimed' AND claim_expires > ?")
        params.append(now)
    elif status == "completed":
        where.append("status = 'completed'")
    if assignee is not None:
        where.append("assignee = ?")
        params.append(assignee)
    if req.grants is not UNSET:
        shown, shown_params = visible_tasks(req.grants, now)
        where.append(shown)
        params.extend(shown_params)
    if req.cursor is not UNSET:
        [after] = decode_cursor(req.cursor, scope, 1)
        where.append("seq > ?")
        params.append(after)
    rows = conn.execute(
        f"SELECT seq, {COLUMNS} FROM tasks WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?",
        (*params, req.limit + 1),
    ).fetchall()
    tasks = [task_of(row[1:], now) for row in rows[: req.limit]]

    def cursor_after(n: int) -> str | None:
        return None if n + 1 >= len(rows) else encode_cursor(scope, (rows[n][0],))

    def reply(page: list[Task], cursor: str | None) -> TaskListReply:
        return TaskListReply(tasks=page, next_cursor=cursor)

    return fitting_page(tasks, req.limit, budget, reply, cursor_after, "task")
