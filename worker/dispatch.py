"""decode -> execute -> encode for every trigger, from the bus or the scheduler alike.

Every outcome becomes a reply body plus, for a failure, the error that sets the NATS service
error headers. Nothing here raises: a handler failure never stops the worker.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import msgspec
import structlog

from handlers.audit import Call
from handlers.ingested import Delivery, IngestKey
from schema.errors import (
    Internal,
    InvalidRequest,
    Repeated,
    Unavailable,
    WorkerError,
    error_reply,
)
from worker.audit import CALL
from worker.db import DAMAGED
from worker.json_keys import duplicate_key
from worker.locate import refusal
from worker.logs import REQUEST, info_enabled
from worker.payload import reply_budget, too_large
from worker.route import Route
from worker.services import Context, Services
from worker.telemetry import Telemetry, TriggerStats
from worker.tenancy import ADMIN, Caller, caller_of, scoped, untenanted
from worker.turns import TURN, QueueFull, Turns
from worker.writes import commit

log = structlog.get_logger()
# Triggers that take turns apart from the rest of their tenant's requests (Dispatcher._take_turn).
RECALLS = frozenset({"memory::recall", "memory::context"})
RECALL_TURN = " (recalls)"  # added to the key of their turns


async def execute(services: Services, route: Route[Any, Any], request: Any) -> Any:
    """Run the row as its kind says (worker/route.py): a pure read on a reader, given the time
    (a paged one also the bytes its reply may hold on the services' NATS connection); a write
    prepared, then decided and applied in one writer transaction (worker/writes.py), then its
    row's `after`; a flow with the services."""
    if route.read is not None:
        read = route.read
        paged = {"budget": reply_budget(services.nc)} if route.paged else {}
        return await services.readers.run(
            lambda conn: read(conn, request, now=services.clock(), **paged)
        )
    if route.flow is not None:
        return await route.flow(services, request)
    write = route.write
    assert write is not None, "a row is a read, a write or a flow"
    prepared = None if write.prepare is None else await write.prepare(services, request)
    reply = await commit(services, route.trigger, write, request, prepared=prepared)
    if route.after is not None:
        await route.after(services, request, prepared, reply)
    return reply


@dataclass(frozen=True)
class Outcome:
    body: bytes
    error: WorkerError | None


Executor = Callable[[Route[Any, Any], Any], Awaitable[Any]]


class Dispatcher:
    def __init__(
        self,
        services: Context,
        routes: Iterable[Route[Any, Any]],
        telemetry: Telemetry,
        executor: Executor | None = None,
    ) -> None:
        """Counts every request in telemetry: its figures per trigger and the in-flight count.
        `executor` runs a decoded, scoped request: by default on these services (`execute`);
        a shard hands it to the owner of the request's partition (worker/shards/router.py)."""
        self.services = services
        self.telemetry = telemetry
        if executor is None:
            assert isinstance(services, Services), "a front without services needs an executor"
            executor = partial(execute, services)
        self._execute: Executor = executor
        self.routes = {route.trigger: route for route in routes}
        self._decoders = {
            route.trigger: msgspec.json.Decoder(route.request_type)
            for route in self.routes.values()
        }
        self._encoder = msgspec.json.Encoder()
        config = services.config
        self.turns = Turns(
            config.max_executing,
            per_key=config.tenant_in_flight,
            queue=config.tenant_queue,
            describe=partial(_queue_full, config.tenant_in_flight, config.tenant_queue),
        )
        for trigger in self.routes:
            telemetry.triggers.setdefault(trigger, TriggerStats())

    @property
    def stats(self) -> dict[str, TriggerStats]:
        return self.telemetry.triggers

    @property
    def in_flight(self) -> int:
        return self.telemetry.in_flight

    @in_flight.setter
    def in_flight(self, count: int) -> None:
        self.telemetry.in_flight = count

    def decode(self, trigger: str, data: bytes) -> Any:
        body = data if data.strip() else b"{}"
        try:
            request = self._decoders[trigger].decode(body)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
            # ValidationError is a DecodeError: every refusal is explained in one place.
            raise InvalidRequest(refusal(data, error)) from None
        duplicate = duplicate_key(body)
        if duplicate is not None:
            raise InvalidRequest(f"invalid request: {duplicate}")
        return request

    def scope(self, route: Route[Any, Any], request: Any, caller: Caller) -> Any:
        """The request as its handler gets it: in the tenant it acts in (worker/tenancy.py)."""
        if self.services.config.tenancy == "none":
            return untenanted(request)
        return scoped(
            request,
            caller,
            all_tenants=route.all_tenants,
            grants=self.services.grants,
            own_account=self.services.config.account,
        )

    async def handle(
        self,
        trigger: str,
        data: bytes,
        *,
        source: str = "bus",
        caller: Caller = ADMIN,
        headers: Mapping[str, str] | None = None,
        budget: int | None = None,
        message: Delivery | None = None,
    ) -> Outcome:
        """`headers`, a bus request's, name the caller under tenancy (`Nats-Request-Info`);
        without them the caller is `caller` (ingest knows it from the subject, the scheduler is
        administrative). `budget`, for a reply to be sent over NATS, is the most bytes it may
        hold: a success larger than that is `413 payload_too_large` naming the request key that
        makes it smaller, counted as an error (worker/payload.py), never a reply NATS drops.
        `message`: the ingested message the request came in, whose key its write records (a
        redelivery is refused as `Repeated`: handlers/ingested.py).

        Every line logged while the request runs (an LLM fallback, an embedding failure, the
        maintenance counts) carries its trigger, source, tenant and, once decoded, agent: they
        are the request's log context for the call (worker/logs.py REQUEST), restored after it."""
        context: dict[str, Any] = {
            "trigger": trigger,
            "source": source,
            "agent": None,
            "tenant": caller.tenant,
        }
        token = REQUEST.set(context)
        try:
            return await self._handle(
                trigger, data, source, caller, headers, budget, message, context
            )
        finally:
            REQUEST.reset(token)

    async def _handle(
        self,
        trigger: str,
        data: bytes,
        source: str,
        caller: Caller,
        headers: Mapping[str, str] | None,
        budget: int | None,
        message: Delivery | None,
        context: dict[str, Any],
    ) -> Outcome:
        started = time.perf_counter()
        agent = None
        reported: tuple[Route[Any, Any], Any, Any] | None = (
            None  # a success, for the route's report
        )
        audit_call = None
        telemetry = self.telemetry
        telemetry.in_flight += 1
        try:
            route = self.routes[trigger]
            if headers is not None and self.services.config.tenancy == "account":
                caller = caller_of(headers, self.services.config.account)
                context["tenant"] = caller.tenant
            request = self.decode(trigger, data)
            agent = getattr(request, "agent_id", None)
            agent = agent if isinstance(agent, str) else None
            context["agent"] = agent
            request = self.scope(route, request, caller)
            # An ingested message's key is kept where the request's write goes (its scope).
            key = None if message is None else IngestKey(*route.scope.keeper(request), message)
            audit_call = CALL.set(Call(trigger, source, caller.requester, key))
            reply = await self._take_turn(route, request, self.turn_key(caller, agent))
            if route.timed:
                elapsed = round((time.perf_counter() - started) * 1000, 3)
                reply = msgspec.structs.replace(reply, duration_ms=elapsed)
            body = self._encoder.encode(reply)
            if budget is not None and len(body) > budget:
                raise too_large(len(body), budget, route.bounded_by)
            outcome = Outcome(body, None)
            reported = (route, request, reply)
        except WorkerError as error:
            outcome = Outcome(self._encoder.encode(error_reply(error)), error)
        except DAMAGED as error:
            reason = f"{trigger}: {type(error).__name__}: {error}"
            self.telemetry.health.corrupt(reason)
            log.error("database.corrupt", trigger=trigger, error=reason)
            failure = Internal(f"the database is damaged ({type(error).__name__}); see its health")
            outcome = Outcome(self._encoder.encode(error_reply(failure)), failure)
        except Exception as error:
            log.error("trigger.failed", trigger=trigger, error=type(error).__name__, exc_info=True)
            failure = Internal(f"internal error ({type(error).__name__})")
            outcome = Outcome(self._encoder.encode(error_reply(failure)), failure)
        finally:
            telemetry.in_flight -= 1
            if audit_call is not None:
                CALL.reset(audit_call)
        duration_ms = (time.perf_counter() - started) * 1000
        failed = None if isinstance(outcome.error, Repeated) else outcome.error  # done already
        self._count(trigger, duration_ms, failed, caller.tenant)
        if info_enabled():  # at thousands of requests a second, a line not written costs
            refusal = {} if outcome.error is None else {"field": outcome.error.field}
            log.info(
                "trigger.handled",
                trigger=trigger,
                source=source,
                agent=agent,
                duration_ms=round(duration_ms, 3),
                outcome="ok" if outcome.error is None else outcome.error.code,
                **refusal,
            )
        if reported is not None and reported[0].report is not None:
            reported[0].report(self.services, trigger, source, reported[1], reported[2])
        return outcome

    def turn_key(self, caller: Caller, agent: str | None) -> str:
        """Whose turn a request takes (worker/turns.py): its tenant (the empty key for the
        worker's own account and the scheduler); with tenancy off, its agent."""
        return turn_of(self.services.config.tenancy, caller.tenant, agent)

    async def _take_turn(self, route: Route[Any, Any], request: Any, key: str) -> Any:
        """Execute once it is the key's turn; its work in the reader threads' and the model's
        queues is counted to the key too (TURN). A key's recalls take turns apart from its
        other requests: its own stores in flight do not hold its recalls back.

        Past MEMORY_WORKER_MAX_IN_FLIGHT a request is refused, but under tenancy not that of a
        tenant with nothing in flight: one tenant's flood cannot shut the others out (tenants
        are the configured accounts, so this goes at most one request per tenant past it)."""
        turn = key + RECALL_TURN if route.trigger in RECALLS else key
        limit = self.services.config.max_in_flight
        if self.in_flight > limit and (
            self.services.config.tenancy == "none"
            or self.turns.running(turn)
            or self.turns.waiting(turn)
        ):
            raise Unavailable(f"more than {limit} requests in flight; retry")
        try:
            await self.turns.acquire(turn)
        except QueueFull as full:
            raise Unavailable(str(full)) from None
        marked = TURN.set(key)
        try:
            return await self._execute(route, request)
        finally:
            TURN.reset(marked)
            self.turns.release(turn)

    def _count(
        self, trigger: str, duration_ms: float, error: WorkerError | None, tenant: str | None
    ) -> None:
        code = None if error is None else error.code
        self.telemetry.count(trigger, duration_ms, code, tenant)


def turn_of(tenancy: str, tenant: str | None, agent: str | None) -> str:
    """The key of a request's turns: its tenant under tenancy, else its agent ("" for none)."""
    if tenancy == "none":
        return f"agent {agent}" if agent else ""
    return tenant or ""


def _queue_full(running: int, queue: int, turn: str) -> str:
    key, recalls = turn.removesuffix(RECALL_TURN), turn.endswith(RECALL_TURN)
    whose = f"this tenant ({key})" if key and not key.startswith("agent ") else key or "this caller"
    kind = "recalls" if recalls else "requests"
    return (
        f"{whose} has {running} {kind} in progress and {queue} waiting "
        "(MEMORY_WORKER_TENANT_IN_FLIGHT, MEMORY_WORKER_TENANT_QUEUE); retry later"
    )
