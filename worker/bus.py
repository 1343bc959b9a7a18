"""The `memory` nats.micro service: an endpoint per trigger row (connections: worker/connection.py).

nats-py runs one subscription's callbacks one after another, so each endpoint hands its request
to a task of its own: a slow compaction never holds up a recall. The tasks are tracked so that
shutdown can wait for the ones in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import Any

import nats
import nats.errors
import structlog
from nats.aio.msg import Msg
from nats.micro import add_service
from nats.micro.request import ERROR_CODE_HEADER, ERROR_HEADER
from nats.micro.request import Request as MicroRequest
from nats.micro.service import EndpointConfig, Group, GroupManager, Service

from schema.errors import WorkerError
from worker.dispatch import Dispatcher
from worker.payload import reply_budget, too_large
from worker.route import Route, prefix_groups

log = structlog.get_logger()
SERVICE_NAME = "memory"
SERVICE_VERSION = "0.1.0"
QUEUE_GROUP = "memory-worker"


# The nats-py release whose private endpoint counters count_in_micro_stats writes. The pin in
# pyproject.toml is the same; tests/test_stats.py fails when they differ, to have it re-checked.
MICRO_STATS_PATCHED_FOR = "2.16.0"
MICRO_ENDPOINT_COUNTERS = (
    "_name",
    "_subscription",
    "_num_requests",
    "_num_errors",
    "_last_error",
    "_processing_time",
    "_average_processing_time",
)


def count_in_micro_stats(endpoint: Any, elapsed_ns: int, error: str | None) -> None:
    """Add a request's real processing time, and its error, to `$SRV.STATS`: the one place
    that writes nats.micro's private counters (MICRO_ENDPOINT_COUNTERS) of an endpoint.

    nats.micro times only its endpoint handler, which hands the request to a task of ours so
    that one endpoint serves many requests at once (a subscription's handler runs one message
    at a time), and it counts an error only when the handler raises, while the task answers
    errors itself with our own body. Its public API has no way in: `stats_handler` fills only
    each endpoint's `data`, not the counters."""
    endpoint._processing_time += elapsed_ns
    endpoint._average_processing_time = int(
        endpoint._processing_time / max(1, endpoint._num_requests)
    )
    if error is not None:
        endpoint._num_errors += 1
        endpoint._last_error = error


class MemoryService:
    def __init__(self, nc: Any, dispatcher: Dispatcher, prefix: str) -> None:
        self._nc = nc
        self._dispatcher = dispatcher
        self._prefix = prefix
        # Only under tenancy do a request's headers matter: they name its caller.
        self._tenanted = dispatcher.services.config.tenancy == "account"
        self._service: Service | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, routes: Iterable[Route[Any, Any]], metadata: dict[str, str]) -> None:
        """metadata is kept, not copied: what the worker writes into it later (its health)
        is in every $SRV.PING and $SRV.INFO reply from then on."""
        service = self._service = await add_service(
            self._nc,
            name=SERVICE_NAME,
            version=SERVICE_VERSION,
            description="Agent memory: store, recall, maintenance, knowledge graph, sessions",
            queue_group=QUEUE_GROUP,
            metadata=metadata,
        )
        groups: dict[tuple[str, ...], Group] = {}

        def group(path: tuple[str, ...]) -> Group:
            """The group for a path of names (`prod`, `memory`, `kg`), each made once."""
            if path not in groups:
                parent: GroupManager = service if len(path) == 1 else group(path[:-1])
                groups[path] = parent.add_group(name=path[-1])
            return groups[path]

        for route in routes:
            # `memory::kg::add` is the endpoint `add` in the group prefix -> memory -> kg, served
            # at `<prefix>memory.kg.add` (Route.subject says the same from the same parts).
            await group((*prefix_groups(self._prefix), *route.groups)).add_endpoint(
                EndpointConfig(
                    name=route.endpoint,
                    handler=self._handler(route),
                    metadata={"trigger": route.trigger},
                )
            )
            self._take_messages(route, service._endpoints[-1])
        # The subscriptions reach the server before start returns (a PING answered after them):
        # a client that sends as soon as the worker says it has started finds a responder.
        await self._nc.flush()

    def _handler(self, route: Route[Any, Any]) -> Any:
        """nats.micro's handler of the endpoint, for a message that reached it (a subscription
        made before _take_messages): the request to a task of its own."""

        async def accept(request: MicroRequest) -> None:
            self._start(route, request._msg, None)

        return accept

    def _take_messages(self, route: Route[Any, Any], endpoint: Any) -> None:
        """The endpoint's subscription hands each message to a task of ours directly, counted
        as nats.micro counts it, without its Request around each one and its timing of a
        handler that only starts a task (issue 33: at 64 stores in flight, the plumbing around
        a request cost as much as the store). $SRV.PING, INFO and STATS answer as before."""
        subscription = endpoint._subscription

        async def accept(msg: Msg) -> None:
            endpoint._num_requests += 1
            self._start(route, msg, endpoint)

        subscription._cb = accept

    def _start(self, route: Route[Any, Any], msg: Msg, endpoint: Any) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(route, msg, endpoint))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, route: Route[Any, Any], msg: Msg, endpoint: Any) -> None:
        started = time.perf_counter_ns()
        # Under tenancy no headers at all (`{}`) is a request from the worker's own account,
        # which no service import stamped; None keeps the dispatcher from looking.
        headers = (msg.headers or {}) if self._tenanted else None
        # What the server takes in one message now (its INFO, which a reconnect may change).
        budget = reply_budget(self._nc)
        outcome = await self._dispatcher.handle(
            route.trigger, msg.data, headers=headers, budget=budget
        )
        error = outcome.error
        if endpoint is not None:
            count_in_micro_stats(
                endpoint,
                time.perf_counter_ns() - started,
                None if error is None else f"{error.status}:{error.message}",
            )
        try:
            if not msg.reply:  # a publish, not a request: done, with nowhere to answer
                raise ValueError("no reply subject set")
            if error is None:
                await self._nc.publish(msg.reply, outcome.body)
            else:
                await self._nc.publish(msg.reply, outcome.body, headers=_error(error))
        except nats.errors.MaxPayloadError:
            # Dispatch holds replies to the budget; should the server have lowered max_payload
            # meanwhile, the caller is told so too rather than left to its timeout.
            refused = too_large(len(outcome.body), reply_budget(self._nc), route.bounded_by)
            log.warning("reply.too_large", trigger=route.trigger, bytes=len(outcome.body))
            if endpoint is not None:
                count_in_micro_stats(endpoint, 0, f"{refused.status}:{refused.message}")
            with contextlib.suppress(Exception):
                await self._nc.publish(msg.reply, b"", headers=_error(refused))
        except Exception as failure:
            log.warning("reply.failed", trigger=route.trigger, error=str(failure))

    async def stop(self, timeout: float) -> None:
        """Stop taking requests, then wait (up to timeout) for those in flight. On a connection
        that closed under it (a shard whose NATS went away) the subscriptions went with it."""
        if self._service is not None and not self._nc.is_closed:
            await self._service.stop()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)


def _error(error: WorkerError) -> dict[str, str]:
    """The NATS service error headers of a refusal, as nats.micro's respond_error sets them."""
    return {ERROR_HEADER: error.message, ERROR_CODE_HEADER: error.status}
