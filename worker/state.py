"""The writes of section 14 that choose something or whose audit depends on what they decided,
as decide and apply steps (worker/writes.py): a posted task's id, a completion (handlers/tasks.py),
a usage record's id (handlers/usage.py). The other state writes decide nothing but their request
and time (their registry rows): what they pick (the task a claim takes) follows from the state
they apply to, which every copy of a partition shares."""

from __future__ import annotations

import uuid

import msgspec

from handlers.audit import Change
from handlers.tasks import (
    Completion,
    Posted,
    apply_complete,
    apply_post,
    decide_complete,
    decide_post,
)
from handlers.usage import apply_record, decide_record, usage_record_changes
from schema.tasks import TaskCompleteReply, TaskCompleteRequest, TaskPostReply
from schema.usage import UsageRecordReply, UsageRecordRequest
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


class UsageRecorded(msgspec.Struct, frozen=True):
    """A usage record decided: the request, its time and the record's id. `record_id` is None
    only in a shard's log entries written before the id was decided: their replay draws one, as
    those versions' apply did."""

    request: UsageRecordRequest
    at: int
    record_id: str | None = None


RECORD: Write[UsageRecorded, UsageRecordReply] = Write(
    decision=UsageRecorded,
    decide=lambda conn, req, now, _: UsageRecorded(req, now, uuid.uuid4().hex),
    apply=lambda conn, d: apply_record(
        conn, decide_record(d.request, now=d.at, record_id=d.record_id)
    ),
    reply=lambda d, reply: reply,
    changes=lambda d, reply: usage_record_changes(d.request, reply),
)


async def task_complete(s: Services, req: TaskCompleteRequest) -> TaskCompleteReply:
    reply: TaskCompleteReply = await commit(s, "memory::task::complete", COMPLETE, req)
    return reply
