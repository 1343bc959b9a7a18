"""The task board (contract section 14): memory::task::post, claim, complete and list, one
board per tenant whoever posts or claims, so each request goes to the partition of the tenant's
agent "" in sharded mode.

A post and a completion are decide and apply steps (worker/writes.py): a posted task's id, and
whether a completion by the claimer is a repeat (handlers/tasks.py). A claim decides nothing but
its request and time: the task it takes follows from the state it applies to, which every copy
of a partition shares.
"""

from __future__ import annotations

from typing import Any

from handlers import tasks
from handlers.audit import Change
from handlers.tasks import (
    Completion,
    Posted,
    apply_complete,
    apply_post,
    decide_complete,
    decide_post,
)
from schema.tasks import (
    TaskClaimReply,
    TaskClaimRequest,
    TaskCompleteReply,
    TaskCompleteRequest,
    TaskListReply,
    TaskListRequest,
    TaskPostReply,
    TaskPostRequest,
)
from worker.route import TENANT, Route
from worker.writes import Write, requested

POSTING: Write[Posted, TaskPostReply] = Write(
    decision=Posted,
    decide=lambda conn, req, now, _: decide_post(req, now=now),
    apply=apply_post,
    reply=lambda event, reply: reply,
    changes=lambda event, reply: [Change(event.creator, [event.task_id])],
)
# A repeated completion by the claimer is answered with the task as it was completed, and
# changes and records nothing.
COMPLETION: Write[Completion, TaskCompleteReply] = Write(
    decision=Completion,
    decide=lambda conn, req, now, _: decide_complete(conn, req, now=now),
    apply=apply_complete,
    reply=lambda event, reply: reply,
    changes=lambda event, reply: (
        [] if event.done_already else [Change(event.claimer, [reply.task.task_id])]
    ),
)

POST = Route(
    "memory::task::post",
    TaskPostRequest,
    reply_type=TaskPostReply,
    write=POSTING,
    scope=TENANT,
    ingest=True,
)
# Not ingestible: a claim's reply is the point.
CLAIM = Route(
    "memory::task::claim",
    TaskClaimRequest,
    reply_type=TaskClaimReply,
    write=requested(TaskClaimRequest, tasks.task_claim, tasks.task_claim_changes),
    scope=TENANT,
)
COMPLETE = Route(
    "memory::task::complete",
    TaskCompleteRequest,
    reply_type=TaskCompleteReply,
    write=COMPLETION,
    scope=TENANT,
    ingest=True,
)
LIST = Route(
    "memory::task::list",
    TaskListRequest,
    reply_type=TaskListReply,
    read=tasks.task_list,
    scope=TENANT,
)
ROUTES: tuple[Route[Any, Any], ...] = (POST, CLAIM, COMPLETE, LIST)
