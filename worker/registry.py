"""The one table of triggers: name, request struct, what runs and where.

A trigger's whole story is its row here, its structs in `schema/` and its function in
`handlers/`. A row says where the function runs:

- `on=WRITER`: a pure handler `(conn, request, *, now) -> reply`, run by dispatch in one
  transaction on the writer thread;
- `on=READER`: the same shape, run by dispatch on a reader thread;
- `on=FLOW`: `async (services, request) -> reply`, for the few triggers that await outside
  calls or several steps (worker/flows.py, worker/maintenance.py).

Dispatch supplies `now` (the services' clock) and, for a row with `timed=True`, fills the
reply's `durationMs` with the time the call took. Subjects and endpoint names come from the
trigger's parts, as nats.micro groups (worker/bus.py): `memory::kg::add` is the endpoint `add`
in the group `memory` -> `kg`, served at `<prefix>memory.kg.add`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal

from handlers import audit, kg, kg_delete, kv, life, listing, session, tasks, usage
from handlers.audit import Change
from schema.base import TriggerRequest
from schema.kg import KgAddRequest, KgQueryRequest
from schema.kv import KvDeleteRequest, KvGetRequest, KvListRequest, KvSetRequest
from schema.life import (
    AuditRequest,
    DeleteRequest,
    EraseRequest,
    ForgetRequest,
    GetRequest,
    KgDeleteRequest,
    ListRequest,
    SessionGetRequest,
    UnforgetRequest,
    UpdateRequest,
)
from schema.memory import ConsolidateRequest, EvictRequest, RecallRequest, StoreRequest
from schema.session import CompactRequest, RepairRequest, SessionListRequest
from schema.stats import StatsRequest
from schema.switch import ToggleRequest
from schema.tasks import TaskClaimRequest, TaskCompleteRequest, TaskListRequest, TaskPostRequest
from schema.usage import UsageQueryRequest, UsageRecordRequest
from worker import flows, maintenance, state
from worker import life as worker_life
from worker.services import Services

Where = Literal["writer", "reader", "flow"]
WRITER: Where = "writer"
READER: Where = "reader"
FLOW: Where = "flow"


@dataclass(frozen=True)
class Route:
    trigger: str
    request_type: type[TriggerRequest]
    # A pure handler (conn, request, *, now) for WRITER and READER; async (services, request)
    # for FLOW.
    run: Callable[..., Any]
    _: KW_ONLY
    on: Where
    # The reply has a `durationMs` that dispatch fills with the time the call took.
    timed: bool = False
    # After a success, what operators are told beyond `trigger.handled` (maintenance counts).
    report: Callable[[Services, str, str, Any], None] | None = None
    # Under tenancy, an administrative request may omit `tenant` to act on every tenant.
    all_tenants: bool = False
    # For a WRITER route: what a success changed, recorded in the audit in the same
    # transaction (worker/audit.py). FLOW routes record their writes themselves.
    audit: Callable[[Any, Any], Iterable[Change]] | None = None
    # A write that fire-and-forget publishers may also send through durable ingestion, on
    # `memory.ingest.<verb>` (worker/ingest.py).
    ingest: bool = False

    @property
    def groups(self) -> tuple[str, ...]:
        """The nats.micro groups the endpoint is in: `memory::kg::add` -> ("memory", "kg")."""
        return tuple(self.trigger.split("::")[:-1])

    @property
    def endpoint(self) -> str:
        """The nats.micro endpoint name: `memory::kg::add` -> `add`."""
        return self.trigger.split("::")[-1]

    @property
    def ingest_verb(self) -> str:
        """Its subject's part after `memory.`: `memory::kg::add` -> `kg.add`, ingested on
        `memory.ingest.kg.add`."""
        return ".".join((*self.groups[1:], self.endpoint))

    def subject(self, prefix: str = "") -> str:
        """Where the endpoint is served: the prefix's segments, the groups, then the name, as
        nats.micro joins them (worker/bus.py builds the groups from the same parts)."""
        return ".".join((*prefix_groups(prefix), *self.groups, self.endpoint))


def prefix_groups(prefix: str) -> tuple[str, ...]:
    """A subject prefix (`prod.`) as the nats.micro groups in front of `memory`."""
    return tuple(segment for segment in prefix.split(".") if segment)


ROUTES: tuple[Route, ...] = (
    Route("memory::store", StoreRequest, flows.store, on=FLOW, ingest=True),
    Route("memory::recall", RecallRequest, flows.recall, on=FLOW),
    Route(
        "memory::evict",
        EvictRequest,
        maintenance.evict,
        on=FLOW,
        timed=True,
        report=maintenance.report,
        all_tenants=True,
    ),
    Route(
        "memory::consolidate",
        ConsolidateRequest,
        maintenance.consolidate,
        on=FLOW,
        timed=True,
        report=maintenance.report,
        all_tenants=True,
    ),
    Route(
        "memory::kg::add", KgAddRequest, kg.kg_add, on=WRITER, audit=kg.kg_add_changes, ingest=True
    ),
    Route("memory::kg::query", KgQueryRequest, kg.kg_query, on=READER),
    Route(
        "memory::kg::delete",
        KgDeleteRequest,
        kg_delete.kg_delete,
        on=WRITER,
        audit=kg_delete.kg_delete_changes,
        ingest=True,
    ),
    Route("memory::session::list", SessionListRequest, session.session_list, on=READER),
    Route("memory::session::compact", CompactRequest, flows.session_compact, on=FLOW),
    Route("memory::session::repair", RepairRequest, flows.session_repair, on=FLOW),
    Route("memory::stats", StatsRequest, flows.stats, on=FLOW, all_tenants=True),
    Route("memory::audit", AuditRequest, audit.audit_events, on=READER, all_tenants=True),
    Route("memory::get", GetRequest, life.get_memories, on=READER),
    Route("memory::list", ListRequest, listing.list_memories, on=READER),
    Route("memory::session::get", SessionGetRequest, listing.session_messages, on=READER),
    Route("memory::forget", ForgetRequest, worker_life.forget, on=FLOW, ingest=True),
    Route("memory::unforget", UnforgetRequest, worker_life.unforget, on=FLOW, ingest=True),
    Route("memory::delete", DeleteRequest, worker_life.delete, on=FLOW, ingest=True),
    Route("memory::update", UpdateRequest, worker_life.update, on=FLOW, ingest=True),
    Route(
        "memory::erase",
        EraseRequest,
        life.erase_agent,
        on=WRITER,
        audit=life.erase_changes,
        ingest=True,
    ),
    Route("memory::toggle", ToggleRequest, worker_life.toggle, on=FLOW, ingest=True),
    # Section 14: state beside memories. Claims are not ingestible: their reply is the point.
    Route(
        "memory::kv::set", KvSetRequest, kv.kv_set, on=WRITER, audit=kv.kv_set_changes, ingest=True
    ),
    Route("memory::kv::get", KvGetRequest, kv.kv_get, on=READER),
    Route(
        "memory::kv::delete",
        KvDeleteRequest,
        kv.kv_delete,
        on=WRITER,
        audit=kv.kv_delete_changes,
        ingest=True,
    ),
    Route("memory::kv::list", KvListRequest, kv.kv_list, on=READER),
    Route(
        "memory::task::post",
        TaskPostRequest,
        tasks.task_post,
        on=WRITER,
        audit=tasks.task_post_changes,
        ingest=True,
    ),
    Route(
        "memory::task::claim",
        TaskClaimRequest,
        tasks.task_claim,
        on=WRITER,
        audit=tasks.task_claim_changes,
    ),
    Route("memory::task::complete", TaskCompleteRequest, state.task_complete, on=FLOW, ingest=True),
    Route("memory::task::list", TaskListRequest, tasks.task_list, on=READER),
    Route(
        "memory::usage::record",
        UsageRecordRequest,
        usage.usage_record,
        on=WRITER,
        audit=usage.usage_record_changes,
        ingest=True,
    ),
    Route("memory::usage::query", UsageQueryRequest, usage.usage_query, on=READER),
)
BY_TRIGGER = {route.trigger: route for route in ROUTES}
INGESTED = {route.ingest_verb: route.trigger for route in ROUTES if route.ingest}
