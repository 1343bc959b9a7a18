"""The writes of section 14 whose audit depends on what they decided, not only on their reply:
each decides and applies in one writer job that records its changes in the same transaction
(handlers/tasks.py)."""

from __future__ import annotations

import apsw

from handlers.audit import Change
from handlers.tasks import Completion, apply_complete, decide_complete
from schema.base import agent_of
from schema.tasks import TaskCompleteReply, TaskCompleteRequest
from worker.audit import audited
from worker.services import Services


async def task_complete(s: Services, req: TaskCompleteRequest) -> TaskCompleteReply:
    """A repeated completion by the claimer is answered with the task as it was completed, and
    changes and records nothing."""

    def job(conn: apsw.Connection) -> tuple[Completion, TaskCompleteReply]:
        event = decide_complete(conn, req, now=s.clock())
        return event, apply_complete(conn, event)

    def changes(done: tuple[Completion, TaskCompleteReply]) -> list[Change]:
        event, reply = done
        return [] if event.done_already else [Change(agent_of(req), [reply.task.task_id])]

    _, reply = await s.writer.run(audited(job, changes, s.clock))
    return reply
