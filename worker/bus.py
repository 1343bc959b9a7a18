"""The NATS side: connection options from the config, and the `memory` nats.micro service.

nats-py runs one subscription's callbacks one after another, so each endpoint hands its request
to a task of its own: a slow compaction never holds up a recall. The tasks are tracked so that
shutdown can wait for the ones in flight.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any

import nats
import structlog
from nats.micro import add_service
from nats.micro.request import Request as MicroRequest
from nats.micro.service import EndpointConfig, Service

from worker.config import Config
from worker.dispatch import Dispatcher
from worker.registry import Route

log = structlog.get_logger()
SERVICE_NAME = "memory"
SERVICE_VERSION = "0.1.0"
QUEUE_GROUP = "memory-worker"


def connect_options(config: Config) -> dict[str, Any]:
    options: dict[str, Any] = {"name": "memory-worker"}
    if config.nats_user:
        options["user"] = config.nats_user
        options["password"] = config.nats_password
    if config.nats_token:
        options["token"] = config.nats_token
    if config.nats_creds:
        options["user_credentials"] = config.nats_creds
    if config.nats_tls_ca or config.nats_tls_cert:
        context = ssl.create_default_context(cafile=config.nats_tls_ca or None)
        if config.nats_tls_cert:
            context.load_cert_chain(config.nats_tls_cert, config.nats_tls_key)
        options["tls"] = context
    return options


async def connect(url: str, config: Config, *, reconnect: bool = True) -> Any:
    """The worker's long-lived connection (reconnecting, logging its state), or with
    reconnect=False a short-lived quiet client connection for the CLI."""
    if not reconnect:
        return await nats.connect(
            url, allow_reconnect=False, max_reconnect_attempts=0, **connect_options(config)
        )

    async def on_error(error: Exception) -> None:
        log.warning("nats.error", error=str(error))

    async def on_disconnected() -> None:
        log.warning("nats.disconnected")

    async def on_reconnected() -> None:
        log.info("nats.reconnected")

    return await nats.connect(
        url,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        error_cb=on_error,
        disconnected_cb=on_disconnected,
        reconnected_cb=on_reconnected,
        **connect_options(config),
    )


class MemoryService:
    def __init__(self, nc: Any, dispatcher: Dispatcher, prefix: str) -> None:
        self._nc = nc
        self._dispatcher = dispatcher
        self._prefix = prefix
        self._service: Service | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, routes: tuple[Route, ...]) -> None:
        self._service = await add_service(
            self._nc,
            name=SERVICE_NAME,
            version=SERVICE_VERSION,
            description="Agent memory: store, recall, maintenance, knowledge graph, sessions",
            queue_group=QUEUE_GROUP,
        )
        for route in routes:
            await self._service.add_endpoint(
                EndpointConfig(
                    name=route.endpoint,
                    subject=route.subject(self._prefix),
                    handler=self._handler(route),
                    metadata={"trigger": route.trigger},
                )
            )

    def _handler(self, route: Route) -> Any:
        async def accept(request: MicroRequest) -> None:
            task = asyncio.get_running_loop().create_task(self._serve(route, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return accept

    def _count_in_micro_stats(self, route: Route, elapsed_ns: int, error: str | None) -> None:
        """nats.micro times only the hand-off to our task and never sees its errors (the task
        answers them); add the real processing time and errors so `$SRV.STATS` is right."""
        assert self._service is not None
        for endpoint in self._service._endpoints:
            if endpoint._name == route.endpoint:
                endpoint._processing_time += elapsed_ns
                endpoint._average_processing_time = int(
                    endpoint._processing_time / max(1, endpoint._num_requests)
                )
                if error is not None:
                    endpoint._num_errors += 1
                    endpoint._last_error = error
                return

    async def _serve(self, route: Route, request: MicroRequest) -> None:
        started = time.perf_counter_ns()
        outcome = await self._dispatcher.handle(route.trigger, request.data)
        error = outcome.error
        self._count_in_micro_stats(
            route,
            time.perf_counter_ns() - started,
            None if error is None else f"{error.status}:{error.message}",
        )
        try:
            if outcome.error is None:
                await request.respond(outcome.body)
            else:
                await request.respond_error(
                    outcome.error.status, outcome.error.message, data=outcome.body
                )
        except Exception as error:
            log.warning("reply.failed", trigger=route.trigger, error=str(error))

    async def stop(self, timeout: float) -> None:
        """Stop taking requests, then wait (up to timeout) for those in flight."""
        if self._service is not None:
            await self._service.stop()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
