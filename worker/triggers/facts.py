"""The fact store (contract section 19): memory::fact::assert, end, retract and query. The
writes are decide and apply (handlers/facts/writes.py); the query is a pure read."""

from __future__ import annotations

from typing import Any

from handlers.facts import writes
from handlers.facts.reading import query_facts
from schema.facts import (
    FactAssertReply,
    FactAssertRequest,
    FactEndReply,
    FactEndRequest,
    FactQueryReply,
    FactQueryRequest,
    FactRetractReply,
    FactRetractRequest,
)
from worker.route import Route
from worker.writes import Write

ASSERT = Route(
    "memory::fact::assert",
    FactAssertRequest,
    reply_type=FactAssertReply,
    write=Write(
        decision=writes.Asserting,
        decide=writes.decide_assert,
        apply=writes.apply_assert,
        reply=lambda d, reply: reply,
        changes=writes.assert_changes,
    ),
    ingest=True,
)
END = Route(
    "memory::fact::end",
    FactEndRequest,
    reply_type=FactEndReply,
    write=Write(
        decision=writes.Ending,
        decide=writes.decide_end,
        apply=writes.apply_end,
        reply=lambda d, reply: reply,
        changes=writes.end_changes,
    ),
    ingest=True,
)
RETRACT = Route(
    "memory::fact::retract",
    FactRetractRequest,
    reply_type=FactRetractReply,
    write=Write(
        decision=writes.Retracting,
        decide=lambda conn, req, now, prepared: writes.Retracting(req, now),
        apply=writes.apply_retract,
        reply=lambda d, reply: reply,
        changes=writes.retract_changes,
    ),
    ingest=True,
    bounded_by="ids",
)
QUERY = Route(
    "memory::fact::query",
    FactQueryRequest,
    reply_type=FactQueryReply,
    read=query_facts,
    bounded_by="limit",
)
ROUTES: tuple[Route[Any, Any], ...] = (ASSERT, END, RETRACT, QUERY)
