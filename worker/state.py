"""The writes of section 14 that choose something or whose audit depends on what they decided,
as decide and apply steps (worker/writes.py): a posted task's id, a completion (handlers/tasks.py).
The other state writes decide nothing but their request and time (their registry rows)."""

from __future__ import annotations

from handlers.audit import Change
from handlers.tasks import (
    Completion,
    Posted,
    apply_complete,
    apply_post,
    decide_complete,
    decide_post,
)
from schema.tasks import TaskCompleteReply, TaskCompleteRequest, TaskPostReply
from worker.services import Services
from worker.writes import Write, commit

POST: Write[Posted, TaskPostReply] = Write(
    decision=Posted,
    decide=lambda conn, req, now, _: decide_post(req, now=now),
    apply=apply_post,
    reply=lambda event, reply: reply,
    changes=lambda event, reply: [Change(event.creator, [event.task_id])],
)
# A repeated completion by the claimer is answered with the task as it was completed, and
# changes and records nothing.
COMPLETE: Write[Completion, TaskCompleteReply] = Write(
    decision=Completion,
    decide=lambda conn, req, now, _: decide_complete(conn, req, now=now),
    apply=apply_complete,
    reply=lambda event, reply: reply,
    changes=lambda event, reply: (
        [] if event.done_already else [Change(event.claimer, [reply.task.task_id])]
    ),
)


async def task_complete(s: Services, req: TaskCompleteRequest) -> TaskCompleteReply:
    reply: TaskCompleteReply = await commit(s, "memory::task::complete", COMPLETE, req)
    return reply
