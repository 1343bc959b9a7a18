"""Usage accounting (contract section 14): memory::usage::record, and memory::usage::query, whose
totals over every agent add up the partitions' groups in sharded mode (worker/shards/fanout.py).

A record is a decide and apply step (worker/writes.py) that decides the record's id
(handlers/usage.py), so that a replay writes the same row.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from handlers import usage
from handlers.usage import apply_record, decide_record, usage_record_changes
from schema.usage import UsageQueryReply, UsageQueryRequest, UsageRecordReply, UsageRecordRequest
from worker.route import Route, agent_or_every
from worker.shards.fanout import usage_merged
from worker.writes import Write


class UsageRecorded(msgspec.Struct, frozen=True):
    """A usage record decided: the request, its time and the record's id. `record_id` is None
    only in a shard's log entries written before the id was decided: their replay draws one, as
    those versions' apply did."""

    request: UsageRecordRequest
    at: int
    record_id: str | None = None


RECORDING: Write[UsageRecorded, UsageRecordReply] = Write(
    decision=UsageRecorded,
    decide=lambda conn, req, now, _: UsageRecorded(req, now, uuid.uuid4().hex),
    apply=lambda conn, d: apply_record(
        conn, decide_record(d.request, now=d.at, record_id=d.record_id)
    ),
    reply=lambda d, reply: reply,
    changes=lambda d, reply: usage_record_changes(d.request, reply),
)

RECORD = Route(
    "memory::usage::record",
    UsageRecordRequest,
    reply_type=UsageRecordReply,
    write=RECORDING,
    ingest=True,
)
QUERY = Route(
    "memory::usage::query",
    UsageQueryRequest,
    reply_type=UsageQueryReply,
    read=usage.usage_query,
    scope=agent_or_every(usage_merged),
)
ROUTES: tuple[Route[Any, Any], ...] = (RECORD, QUERY)
