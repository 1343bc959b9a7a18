"""What a row of the trigger table is: a trigger's name, its request and reply, what runs it, and
where its request goes in sharded mode. The feature modules of worker/triggers/ make the rows;
worker/registry.py assembles them into the table.

A row is one of three kinds, by the part it carries:

- `read=`: a pure handler `(conn, request, *, now) -> reply`, run by dispatch on a reader
  thread (a paged listing's also gets `budget`, the bytes its reply may hold);
- `write=`: a Write (worker/writes.py), committed by dispatch: its `prepare` outside the writer
  (an embedding, the sanitiser, waiting for recalls), decide and apply in one writer
  transaction with the audit's changes; then the row's `after`, what the write does once
  committed (telemetry, queuing the backfill);
- `flow=`: `async (services, request) -> reply`, for a trigger that awaits several steps (a
  recall and its access counts, maintenance in chunks, a compaction's LLM call). A flow commits
  its writes itself and names them, so that a shard can replay its log: `write=` the one it
  logs under its own trigger, `also_logs=` those it logs under names of their own.

A row that carries a part its kind ignores, or a scope its request cannot follow, is refused
when it is made, naming the trigger: a table with such a row does not import.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import msgspec

from schema.base import Agent, Reply, TriggerRequest, tenant_of
from worker.writes import Write

if TYPE_CHECKING:
    from worker.services import Context, Services

Q = TypeVar("Q", bound=TriggerRequest)
R = TypeVar("R", bound=Reply)
Kind = Literal["read", "write", "flow"]
# Ask each partition named its own request; their replies by partition (worker/shards/router.py).
Ask = Callable[[dict[int, Any]], Awaitable[dict[int, Any]]]
# How the replies of every partition add up to one: (request, partitions, ask, reply budget).
AddUp = Callable[[Any, int, Ask, int], Awaitable[Any]]


class RowError(TypeError):
    """A row the table cannot hold; raised when the row is made, so at import."""


@dataclass(frozen=True)
class Scope:
    """Whose rows a request acts on, so which partition serves it in sharded mode
    (worker/shards/router.py) and where an ingested write keeps its message's key
    (worker/writes.py).

    `holder="agent"`: the partition of the request's agent. `"tenant"`: the partition of the
    tenant's agent "" (the task board, one per tenant whoever posts or claims). `shared`: a
    request with `namespace: "shared"` instead of an agent is the tenant's too (the shared keys).
    `every`: a request that names no agent runs on every partition, and this adds up their
    replies (worker/shards/fanout.py)."""

    holder: Literal["agent", "tenant"]
    shared: bool = False
    every: AddUp | None = None

    def home(self, request: Any) -> Agent | None:
        """The (tenant, agentId) whose partition holds what the request acts on; None for a
        request over every agent."""
        tenant = tenant_of(request)
        if self.holder == "tenant":
            return (tenant, "")
        agent_id = getattr(request, "agent_id", None)  # a listing of agents names none
        if isinstance(agent_id, str):
            return (tenant, agent_id)
        if self.shared and request.namespace == "shared":
            return (tenant, "")
        return None

    def keeper(self, request: Any) -> Agent:
        """Where the request's write keeps what belongs to no agent of its own (an ingested
        message's key): its home, else the tenant's agent ""."""
        return self.home(request) or (tenant_of(request), "")


AGENT = Scope("agent")
TENANT = Scope("tenant")
AGENT_OR_SHARED = Scope("agent", shared=True)


def every_agent(add_up: AddUp) -> Scope:
    """For a request that never names an agent but reads every agent's rows: every
    partition, replies added up so."""
    return Scope("agent", every=add_up)


def agent_or_every(add_up: AddUp) -> Scope:
    """The named agent's partition; without one, every partition, replies added up so."""
    return Scope("agent", every=add_up)


@dataclass(frozen=True, eq=False)
class Route(Generic[Q, R]):
    trigger: str
    request_type: type[Q]
    _: KW_ONLY
    # What a success replies, and what the Python client (worker/client.py) decodes it as.
    reply_type: type[R]
    # The row's kind is the one of these it carries (a flow may name its own write too).
    read: Callable[..., R] | None = None
    write: Write[Any, Any] | None = None
    flow: Callable[[Services, Q], Awaitable[R]] | None = None
    # For a write row: awaited after the commit with (services, request, prepared, reply).
    after: Callable[[Services, Any, Any, Any], Awaitable[None]] | None = None
    # For a flow: the writes it commits under names of their own (`trigger:part`).
    also_logs: Mapping[str, Write[Any, Any]] = field(default_factory=dict)
    scope: Scope = AGENT
    # The reply has a `durationMs` that dispatch fills with the time the call took.
    timed: bool = False
    # After a success, what operators are told beyond `trigger.handled` (maintenance counts):
    # called with the services, the trigger, the source, the scoped request and the reply.
    report: Callable[[Context, str, str, Any, Any], None] | None = None
    # Under tenancy, an administrative request may omit `tenant` to act on every tenant.
    all_tenants: bool = False
    # Fire-and-forget publishers may also send it through durable ingestion, on
    # `memory.ingest.<verb>` (worker/ingest.py); only a write can be ingested.
    ingest: bool = False
    # The request key that makes the reply smaller (`limit`, `ids`), named by the 413 of a reply
    # too large for NATS (worker/payload.py); None: no key does.
    bounded_by: str | None = None

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem is not None:
            raise RowError(f"{self.trigger}: {problem}")

    @property
    def kind(self) -> Kind:
        """How dispatch runs it (worker/dispatch.py `execute`)."""
        if self.read is not None:
            return "read"
        return "flow" if self.flow is not None else "write"

    def logged(self) -> dict[str, Write[Any, Any]]:
        """Every write the row commits, by the trigger it is logged under: what a shard must be
        able to replay."""
        own = {} if self.write is None else {self.trigger: self.write}
        return own | dict(self.also_logs)

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
    def verb(self) -> str:
        """Its subject's part after `memory.` (`kg.add`): the same words end every subject that
        names the trigger (`ingest_subject`, `partition_subject`)."""
        return ".".join((*self.groups[1:], self.endpoint))

    def subject(self, prefix: str = "") -> str:
        """Where the endpoint is served: the prefix's segments, the groups, then the name, as
        nats.micro joins them (worker/bus.py builds the groups from the same parts)."""
        return ".".join((*prefix_groups(prefix), *self.groups, self.endpoint))

    def ingest_subject(self, prefix: str = "") -> str:
        """Where a publisher sends it for durable ingestion: `memory.ingest.kg.add` (under
        tenancy the worker's account sees `memory.ingest.<tenant>.kg.add`)."""
        return f"{prefix}memory.ingest.{self.verb}"

    def partition_subject(self, partition: int, token: str) -> str:
        """Where a shard asks a partition's owner: `memory.p.<k>.<agent token>.kg.add`, what
        nats-server maps a client's `memory.a.<token>.kg.add` to (deploy/nats/cluster.conf)."""
        return f"memory.p.{partition}.{token}.{self.verb}"


def prefix_groups(prefix: str) -> tuple[str, ...]:
    """A subject prefix (`prod.`) as the nats.micro groups in front of `memory`."""
    return tuple(segment for segment in prefix.split(".") if segment)


def table(*features: Iterable[Route[Any, Any]]) -> tuple[Route[Any, Any], ...]:
    """The features' rows as one table; a trigger made twice is refused, naming it."""
    rows = tuple(route for feature in features for route in feature)
    triggers = [route.trigger for route in rows]
    for trigger in triggers:
        if triggers.count(trigger) > 1:
            raise RowError(f"{trigger}: two rows make it")
    return rows


def ingestible(routes: Iterable[Route[Any, Any]]) -> dict[str, str]:
    """The trigger of each verb that durable ingestion takes (`kg.add` -> memory::kg::add)."""
    return {route.verb: route.trigger for route in routes if route.ingest}


def _problem(route: Route[Any, Any]) -> str | None:
    """What is wrong with a row, in words naming the part; None: nothing."""
    parts = {"read": route.read, "write": route.write, "flow": route.flow}
    given = [name for name, part in parts.items() if part is not None]
    if not given:
        return "a row needs one of read=, write= and flow="
    if route.read is not None and len(given) > 1:
        return f"a read row ignores {_named(given[1:])}: a read writes nothing"
    if route.read is not None and route.ingest:
        return "a read row ignores ingest=True: only a write can be ingested"
    if route.read is not None and route.after is not None:
        return "a read row ignores after=: it runs only after a write row's commit"
    if route.flow is not None and route.after is not None:
        return "a flow ignores after=: a flow does what follows its writes itself"
    if route.flow is None and route.also_logs:
        return "only a flow commits writes under other names: also_logs= is ignored"
    if route.flow is not None and route.ingest and route.write is None:
        return "ingest=True needs the write the flow commits under its own trigger (write=)"
    if route.paged and route.kind != "read":
        return "a request with a cursor is a paged listing: it must be a read row"
    return _fit(route)


def _fit(route: Route[Any, Any]) -> str | None:
    """The parts that must agree with the request and reply structs."""
    fields = {f.name: f for f in msgspec.structs.fields(route.request_type)}
    keys = {f.encode_name for f in fields.values()}
    if route.bounded_by is not None and route.bounded_by not in keys:
        return f"bounded_by={route.bounded_by!r} is not a key of its request"
    if route.timed and "duration_ms" not in route.reply_type.__struct_fields__:
        return "timed=True needs a `durationMs` in its reply"
    scope = route.scope
    if scope.holder == "tenant":
        return None if not (scope.shared or scope.every) else "a tenant scope is one partition"
    agent = fields.get("agent_id")
    if agent is None:
        if scope.every is not None and not scope.shared:
            return None  # over the tenant's agents, wherever they are (memory::agents)
        return "its request names no agent: give it a tenant scope"
    if scope.shared and "namespace" not in fields:
        return "a shared scope needs a `namespace` in its request"
    if not agent.required and not (scope.shared or scope.every):
        return "its request may name no agent: say where it goes then (shared=, every=)"
    if agent.required and scope.every is not None:
        return "every= is for requests that may name no agent; its request always names one"
    return None


def _named(parts: list[str]) -> str:
    return " and ".join(f"{part}=" for part in parts)
