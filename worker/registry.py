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
from functools import cached_property
from typing import Any, Literal

from handlers import audit, canonical, kg, kg_delete, kv, life, listing, session, tasks, usage
from handlers.audit import Change
from schema.base import Reply, TriggerRequest
from schema.canonical import (
    CanonicalAppendReply,
    CanonicalAppendRequest,
    CanonicalGetRequest,
    CanonicalSession,
)
from schema.context import ContextReply, ContextRequest
from schema.kg import KgAddReply, KgAddRequest, KgQueryReply, KgQueryRequest
from schema.kv import (
    KvDeleteReply,
    KvDeleteRequest,
    KvGetRequest,
    KvItem,
    KvListReply,
    KvListRequest,
    KvSetReply,
    KvSetRequest,
)
from schema.life import (
    AuditReply,
    AuditRequest,
    DeleteReply,
    DeleteRequest,
    EraseReply,
    EraseRequest,
    ForgetReply,
    ForgetRequest,
    GetReply,
    GetRequest,
    KgDeleteReply,
    KgDeleteRequest,
    ListReply,
    ListRequest,
    SessionGetReply,
    SessionGetRequest,
    UnforgetReply,
    UnforgetRequest,
    UpdateReply,
    UpdateRequest,
)
from schema.memory import (
    ConsolidateReply,
    ConsolidateRequest,
    EvictReply,
    EvictRequest,
    RecallReply,
    RecallRequest,
    StoreReply,
    StoreRequest,
)
from schema.session import (
    CompactReply,
    CompactRequest,
    RepairReply,
    RepairRequest,
    SessionListReply,
    SessionListRequest,
)
from schema.stats import StatsReply, StatsRequest
from schema.switch import ToggleReply, ToggleRequest
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
from schema.usage import UsageQueryReply, UsageQueryRequest, UsageRecordReply, UsageRecordRequest
from worker import canonical as canonical_flow
from worker import compaction, flows, maintenance, state
from worker import life as worker_life
from worker.services import Context
from worker.storing import STORE, UPDATE
from worker.writes import Write, requested

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
    # What a success replies: the run function's return type, and what the Python client
    # (worker/client.py) decodes the reply as.
    reply_type: type[Reply]
    # The reply has a `durationMs` that dispatch fills with the time the call took.
    timed: bool = False
    # After a success, what operators are told beyond `trigger.handled` (maintenance counts):
    # called with the services, the trigger, the source, the scoped request and the reply.
    report: Callable[[Context, str, str, Any, Any], None] | None = None
    # Under tenancy, an administrative request may omit `tenant` to act on every tenant.
    all_tenants: bool = False
    # For a WRITER route: what a success changed, recorded in the audit in the same
    # transaction (worker/audit.py). FLOW routes record their writes themselves.
    audit: Callable[[Any, Any], Iterable[Change]] | None = None
    # A write that fire-and-forget publishers may also send through durable ingestion, on
    # `memory.ingest.<verb>` (worker/ingest.py).
    ingest: bool = False
    # For a WRITER route whose decision is more than its request and time: its decide and
    # apply steps (worker/writes.py). Without it, a WRITER route's decision is the request.
    write: Write[Any, Any] | None = None
    # The request key that makes the reply smaller (`limit`, `ids`), named by the 413 of a reply
    # too large for NATS (worker/payload.py); None: no key does.
    bounded_by: str | None = None

    @cached_property
    def writes(self) -> Write[Any, Any] | None:
        """How the route writes, as decide and apply, or None for a read or a flow that writes
        nothing. A FLOW with `write` runs it itself, around what else it awaits."""
        if self.write is not None:
            return self.write
        if self.on != WRITER:
            return None
        audit = self.audit
        return requested(
            self.request_type,
            self.run,
            reply=lambda request, reply: reply,
            changes=lambda request, reply: () if audit is None else audit(request, reply),
        )

    @property
    def paged(self) -> bool:
        """A listing with a cursor: its handler also takes `budget`, the most bytes its reply may
        encode to (the connection's max_payload less headroom), and ends its page early to fit
        (handlers/paging.py)."""
        return "cursor" in self.request_type.__struct_fields__

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
    Route(
        "memory::store",
        StoreRequest,
        flows.store,
        on=FLOW,
        reply_type=StoreReply,
        ingest=True,
        write=STORE,
    ),
    Route(
        "memory::recall",
        RecallRequest,
        flows.recall,
        on=FLOW,
        reply_type=RecallReply,
        write=flows.ACCESS,  # the access counts of what it returned
        bounded_by="limit",
    ),
    Route(
        "memory::context",
        ContextRequest,
        flows.context,
        on=FLOW,
        reply_type=ContextReply,
        bounded_by="maxChars",
    ),
    Route(
        "memory::evict",
        EvictRequest,
        maintenance.evict,
        on=FLOW,
        reply_type=EvictReply,
        timed=True,
        report=maintenance.report,
        all_tenants=True,
        write=maintenance.EVICT_CHUNK,
    ),
    Route(
        "memory::consolidate",
        ConsolidateRequest,
        maintenance.consolidate,
        on=FLOW,
        reply_type=ConsolidateReply,
        timed=True,
        report=maintenance.report,
        all_tenants=True,
        write=maintenance.DECAY,
    ),
    Route(
        "memory::kg::add",
        KgAddRequest,
        kg.kg_add,
        on=WRITER,
        reply_type=KgAddReply,
        audit=kg.kg_add_changes,
        ingest=True,
    ),
    Route(
        "memory::kg::query",
        KgQueryRequest,
        kg.kg_query,
        on=READER,
        reply_type=KgQueryReply,
        bounded_by="limit",
    ),
    Route(
        "memory::kg::delete",
        KgDeleteRequest,
        kg_delete.kg_delete,
        on=WRITER,
        reply_type=KgDeleteReply,
        audit=kg_delete.kg_delete_changes,
        ingest=True,
    ),
    Route(
        "memory::session::list",
        SessionListRequest,
        session.session_list,
        on=READER,
        reply_type=SessionListReply,
    ),
    Route(
        "memory::session::compact",
        CompactRequest,
        compaction.session_compact,
        on=FLOW,
        reply_type=CompactReply,
        write=compaction.COMPACT,
    ),
    Route(
        "memory::session::repair",
        RepairRequest,
        flows.session_repair,
        on=FLOW,
        reply_type=RepairReply,
        write=flows.REPAIR,
    ),
    Route(
        "memory::stats", StatsRequest, flows.stats, on=FLOW, reply_type=StatsReply, all_tenants=True
    ),
    Route(
        "memory::audit",
        AuditRequest,
        audit.audit_events,
        on=READER,
        reply_type=AuditReply,
        all_tenants=True,
    ),
    Route(
        "memory::get",
        GetRequest,
        life.get_memories,
        on=READER,
        reply_type=GetReply,
        bounded_by="ids",
    ),
    Route("memory::list", ListRequest, listing.list_memories, on=READER, reply_type=ListReply),
    Route(
        "memory::session::get",
        SessionGetRequest,
        listing.session_messages,
        on=READER,
        reply_type=SessionGetReply,
    ),
    Route(
        "memory::forget",
        ForgetRequest,
        worker_life.forget,
        on=FLOW,
        reply_type=ForgetReply,
        ingest=True,
        write=worker_life.FORGET,
    ),
    Route(
        "memory::unforget",
        UnforgetRequest,
        worker_life.unforget,
        on=FLOW,
        reply_type=UnforgetReply,
        ingest=True,
        write=worker_life.UNFORGET,
    ),
    Route(
        "memory::delete",
        DeleteRequest,
        worker_life.delete,
        on=FLOW,
        reply_type=DeleteReply,
        ingest=True,
        write=worker_life.DELETE,
    ),
    Route(
        "memory::update",
        UpdateRequest,
        worker_life.update,
        on=FLOW,
        reply_type=UpdateReply,
        ingest=True,
        write=UPDATE,
    ),
    Route(
        "memory::erase",
        EraseRequest,
        life.erase_agent,
        on=WRITER,
        reply_type=EraseReply,
        audit=life.erase_changes,
        ingest=True,
    ),
    Route(
        "memory::toggle",
        ToggleRequest,
        worker_life.toggle,
        on=FLOW,
        reply_type=ToggleReply,
        ingest=True,
        write=worker_life.TOGGLE,
    ),
    # Section 14: state beside memories. Claims are not ingestible: their reply is the point.
    Route(
        "memory::kv::set",
        KvSetRequest,
        kv.kv_set,
        on=WRITER,
        reply_type=KvSetReply,
        audit=kv.kv_set_changes,
        ingest=True,
    ),
    Route("memory::kv::get", KvGetRequest, kv.kv_get, on=READER, reply_type=KvItem),
    Route(
        "memory::kv::delete",
        KvDeleteRequest,
        kv.kv_delete,
        on=WRITER,
        reply_type=KvDeleteReply,
        audit=kv.kv_delete_changes,
        ingest=True,
    ),
    Route("memory::kv::list", KvListRequest, kv.kv_list, on=READER, reply_type=KvListReply),
    Route(
        "memory::task::post",
        TaskPostRequest,
        tasks.task_post,
        on=WRITER,
        reply_type=TaskPostReply,
        audit=tasks.task_post_changes,
        ingest=True,
        write=state.POST,
    ),
    Route(
        "memory::task::claim",
        TaskClaimRequest,
        tasks.task_claim,
        on=WRITER,
        reply_type=TaskClaimReply,
        audit=tasks.task_claim_changes,
    ),
    Route(
        "memory::task::complete",
        TaskCompleteRequest,
        state.task_complete,
        on=FLOW,
        reply_type=TaskCompleteReply,
        ingest=True,
        write=state.COMPLETE,
    ),
    Route(
        "memory::task::list", TaskListRequest, tasks.task_list, on=READER, reply_type=TaskListReply
    ),
    Route(
        "memory::usage::record",
        UsageRecordRequest,
        usage.usage_record,
        on=WRITER,
        reply_type=UsageRecordReply,
        audit=usage.usage_record_changes,
        ingest=True,
        write=state.RECORD,
    ),
    Route(
        "memory::usage::query",
        UsageQueryRequest,
        usage.usage_query,
        on=READER,
        reply_type=UsageQueryReply,
    ),
    Route(
        "memory::canonical::get",
        CanonicalGetRequest,
        canonical.canonical_get,
        on=READER,
        reply_type=CanonicalSession,
    ),
    Route(
        "memory::canonical::append",
        CanonicalAppendRequest,
        canonical_flow.canonical_append,
        on=FLOW,
        reply_type=CanonicalAppendReply,
        ingest=True,
        write=canonical_flow.APPEND_WRITE,
    ),
)
BY_TRIGGER = {route.trigger: route for route in ROUTES}
INGESTED = {route.ingest_verb: route.trigger for route in ROUTES if route.ingest}


def all_writes() -> dict[str, Write[Any, Any]]:
    """Every decide and apply pair a shard may find in its log, by the trigger it logs."""
    from worker.recall_index.backfill import EMBED, EMBEDDED
    from worker.shards.cron import CRON_WRITES

    routed = {route.trigger: route.writes for route in ROUTES if route.writes is not None}
    extra = maintenance.EXTRA_WRITES | canonical_flow.EXTRA_WRITES | CRON_WRITES
    return routed | extra | {EMBEDDED: EMBED}
