"""The NATS side: connection options from the config, and the `memory` nats.micro service.

nats-py runs one subscription's callbacks one after another, so each endpoint hands its request
to a task of its own: a slow compaction never holds up a recall. The tasks are tracked so that
shutdown can wait for the ones in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

import nats
import nats.errors
import structlog
from nats.micro import add_service
from nats.micro.request import Request as MicroRequest
from nats.micro.service import EndpointConfig, Group, GroupManager, Service

from worker.config import Config, nats_servers
from worker.dispatch import Dispatcher
from worker.payload import reply_budget, too_large
from worker.reachability import Reachability
from worker.redact import redact
from worker.route import Route, prefix_groups

log = structlog.get_logger()
SERVICE_NAME = "memory"
SERVICE_VERSION = "0.1.0"
QUEUE_GROUP = "memory-worker"


class ConnectionFailed(RuntimeError):
    """The first connection to NATS was refused; the message names the server and why."""


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


def describe_failure(url: str, config: Config, error: BaseException) -> str:
    """One line: which server, what went wrong, and the setting to look at."""
    text = redact(str(error) or type(error).__name__)
    if isinstance(error, TimeoutError):
        text = "no NATS greeting in time (is a NATS server listening there?)"
    message = f"cannot connect to NATS at {redact(url)}: {text}"
    if "authorization violation" in text.lower():
        return message + (
            " (check MEMORY_WORKER_NATS_USER/_PASSWORD, MEMORY_WORKER_NATS_TOKEN or "
            "MEMORY_WORKER_NATS_CREDS)"
        )
    if isinstance(error, ssl.SSLCertVerificationError):
        return message + " (is MEMORY_WORKER_NATS_TLS_CA the CA that signed its certificate?)"
    if isinstance(error, (ssl.SSLError, ConnectionError)) and (
        config.nats_tls_ca or config.nats_tls_cert or url.startswith("tls://")
    ):
        return message + (
            " (the server ended the TLS handshake: does it require a client certificate "
            "(MEMORY_WORKER_NATS_TLS_CERT/_KEY) signed by a CA it trusts?)"
        )
    return message


def _refused(error: BaseException) -> bool:
    """Errors that retrying cannot fix: credentials, certificates, missing files."""
    text = str(error).lower()
    return (
        "authorization" in text
        or "authentication" in text
        or isinstance(error, ssl.SSLError | FileNotFoundError | PermissionError)
        or "certificate" in text
    )


async def connect(
    url: str,
    config: Config,
    *,
    reconnect: bool = True,
    on_closed: Callable[[str], None] | None = None,
    timeout: float = 10.0,
    inbox_prefix: str | None = None,
) -> Any:
    """The worker's long-lived connection (reconnecting, logging its state), or with
    reconnect=False a short-lived quiet client connection for the CLI, given up after timeout.
    url may list a cluster's servers, comma-separated (config.nats_servers): the worker's
    connection moves among them; a client's tries them in turn, skipping those that fail.

    A refused CONNECT, TLS handshake or missing credentials file raises ConnectionFailed naming
    the server and the cause, instead of being retried; a server that is merely not up yet (or
    gone) is waited for, saying so at a calm pace, for the reconnect budget
    (config.nats_reconnect_budget, worker/reachability.py): past it the first connection raises
    ConnectionFailed, and a lost one is closed and `on_closed` called with the reason.
    `inbox_prefix` is where replies come back: a tenant's user may subscribe only to its own
    (`_INBOX_<user>`, README "Tenants and trust")."""
    try:
        options = connect_options(config)
    except OSError as error:
        raise ConnectionFailed(describe_failure(url, config, error)) from error
    if inbox_prefix:
        options["inbox_prefix"] = inbox_prefix
    if not reconnect:
        return await _connect_once(url, config, options, timeout)

    connected = False
    client: list[Any] = []  # the connection, once made, for the callbacks to look at
    first_failure: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
    reach = Reachability(url, config.nats_reconnect_budget)
    gave_up: list[str] = []

    async def on_error(error: Exception) -> None:
        if not connected and _refused(error):
            if not first_failure.done():
                first_failure.set_result(error)
            return
        if not client or client[0].is_reconnecting:
            # Not up yet (compose and systemd may start us first), or gone: waited for.
            reach.failed(error, refused=_refused(error))
            return
        log.warning("nats.error", url=redact(url), error=redact(str(error) or type(error).__name__))

    async def close_for_good() -> None:
        gave_up.append(reach.gave_up())
        log.error("nats.gave_up", reason=gave_up[0])
        await client[0].close()

    async def on_disconnected() -> None:
        # nats-py calls this on closing too, after marking the client closed: that is our own
        # drain at shutdown, or a close for good that on_closed reports; neither is a warning.
        if client and client[0].is_closed:
            return
        log.warning("nats.disconnected", url=redact(url))
        reach.down(give_up=lambda: background(close_for_good()))

    async def on_reconnected() -> None:
        reach.back()
        log.info("nats.reconnected")

    async def on_closed_cb() -> None:
        reach.close()
        log.info("nats.closed")
        if connected and on_closed is not None:
            on_closed(gave_up[0] if gave_up else "the NATS connection was closed for good")

    connecting = asyncio.ensure_future(
        nats.connect(
            nats_servers(url),
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            error_cb=on_error,
            disconnected_cb=on_disconnected,
            reconnected_cb=on_reconnected,
            closed_cb=on_closed_cb,
            **options,
        )
    )
    reach.down()
    waiting: list[asyncio.Future[Any]] = [connecting, first_failure]
    try:
        await asyncio.wait(waiting, timeout=reach.budget, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not connecting.done():
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await connecting
    if first_failure.done():
        failure = first_failure.result()
        raise ConnectionFailed(describe_failure(url, config, failure)) from failure
    first_failure.cancel()
    if connecting.cancelled():
        raise ConnectionFailed(reach.gave_up())
    connected = True
    reach.back()
    client.append(connecting.result())
    return client[0]


_background: set[asyncio.Task[None]] = set()


def background(work: Coroutine[Any, Any, None]) -> None:
    """Run work from a timer callback, holding the task until it is done."""
    task = asyncio.ensure_future(work)
    _background.add(task)
    task.add_done_callback(_background.discard)


async def _connect_once(url: str, config: Config, options: dict[str, Any], timeout: float) -> Any:
    """The first of url's servers that answers, tried in the order listed within timeout.

    Each server gets an equal share of the time still left for it and the ones after it: a
    dead port fails at once and hands its share on, a server that never greets cannot use up
    the others' time. ConnectionFailed names every server and why it failed."""
    servers = nats_servers(url)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    failures: list[tuple[str, BaseException | None, float]] = []
    for index, server in enumerate(servers):
        share = max(deadline - loop.time(), 0.001) / (len(servers) - index)
        try:
            return await _attempt(server, options, share)
        except _AttemptFailed as failed:
            failures.append((server, failed.cause, share))
    lines = [
        describe_failure(server, config, cause)
        if cause is not None
        else f"cannot connect to NATS at {redact(server)}: no connection within {share:.3g}s"
        for server, cause, share in failures
    ]
    last = failures[-1][1]
    if len(lines) == 1:
        raise ConnectionFailed(lines[0]) from last
    raise ConnectionFailed(
        f"none of the {len(lines)} NATS servers listed answered: " + "; ".join(lines)
    ) from last


class _AttemptFailed(Exception):
    """One server did not give a connection; cause is its error, None when time ran out."""

    def __init__(self, cause: BaseException | None) -> None:
        super().__init__(cause)
        self.cause = cause


async def _attempt(server: str, options: dict[str, Any], timeout: float) -> Any:
    """One attempt at one server, ended by its first error or by timeout.

    nats-py never gives up on a server that refuses the TCP connection unless
    max_reconnect_attempts is above 0: its server-selection loop reports the error to error_cb
    and tries again, allow_reconnect=False or not. So the first error ends the attempt here."""
    failure: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

    async def on_error(error: Exception) -> None:
        if not failure.done():
            failure.set_result(error)

    connecting = asyncio.ensure_future(
        nats.connect(
            [server],
            allow_reconnect=False,
            max_reconnect_attempts=1,
            error_cb=on_error,
            **options,
        )
    )
    waiting: list[asyncio.Future[Any]] = [connecting, failure]
    try:
        await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not connecting.done():
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await connecting
    if connecting.done() and not connecting.cancelled():
        error = connecting.exception()
        if error is None:
            return connecting.result()
        if not failure.done():
            failure.set_result(error)
    raise _AttemptFailed(failure.result() if failure.done() else None)


# The nats-py release whose private endpoint counters count_in_micro_stats writes. The pin in
# pyproject.toml is the same; tests/test_stats.py fails when they differ, to have it re-checked.
MICRO_STATS_PATCHED_FOR = "2.16.0"
MICRO_ENDPOINT_COUNTERS = (
    "_name",
    "_num_requests",
    "_num_errors",
    "_last_error",
    "_processing_time",
    "_average_processing_time",
)


def count_in_micro_stats(
    service: Service, endpoint_name: str, elapsed_ns: int, error: str | None
) -> None:
    """Add a request's real processing time, and its error, to `$SRV.STATS`: the one place
    that writes nats.micro's private counters (MICRO_ENDPOINT_COUNTERS).

    nats.micro times only its endpoint handler, which hands the request to a task of ours so
    that one endpoint serves many requests at once (a subscription's handler runs one message
    at a time), and it counts an error only when the handler raises, while the task answers
    errors itself with our own body. Its public API has no way in: `stats_handler` fills only
    each endpoint's `data`, not the counters."""
    for endpoint in service._endpoints:
        if endpoint._name == endpoint_name:
            endpoint._processing_time += elapsed_ns
            endpoint._average_processing_time = int(
                endpoint._processing_time / max(1, endpoint._num_requests)
            )
            if error is not None:
                endpoint._num_errors += 1
                endpoint._last_error = error
            return


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

    def _handler(self, route: Route[Any, Any]) -> Any:
        async def accept(request: MicroRequest) -> None:
            task = asyncio.get_running_loop().create_task(self._serve(route, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return accept

    async def _serve(self, route: Route[Any, Any], request: MicroRequest) -> None:
        started = time.perf_counter_ns()
        # Under tenancy no headers at all (`{}`) is a request from the worker's own account,
        # which no service import stamped; None keeps the dispatcher from looking.
        headers = (request.headers or {}) if self._tenanted else None
        # What the server takes in one message now (its INFO, which a reconnect may change).
        budget = reply_budget(self._nc)
        outcome = await self._dispatcher.handle(
            route.trigger, request.data, headers=headers, budget=budget
        )
        error = outcome.error
        assert self._service is not None
        count_in_micro_stats(
            self._service,
            route.endpoint,
            time.perf_counter_ns() - started,
            None if error is None else f"{error.status}:{error.message}",
        )
        try:
            if error is None:
                await request.respond(outcome.body)
            else:
                await request.respond_error(error.status, error.message, data=outcome.body)
        except nats.errors.MaxPayloadError:
            # Dispatch holds replies to the budget; should the server have lowered max_payload
            # meanwhile, the caller is told so too rather than left to its timeout.
            refused = too_large(len(outcome.body), reply_budget(self._nc), route.bounded_by)
            log.warning("reply.too_large", trigger=route.trigger, bytes=len(outcome.body))
            count_in_micro_stats(
                self._service, route.endpoint, 0, f"{refused.status}:{refused.message}"
            )
            with contextlib.suppress(Exception):
                await request.respond_error(refused.status, refused.message)
        except Exception as failure:
            log.warning("reply.failed", trigger=route.trigger, error=str(failure))

    async def stop(self, timeout: float) -> None:
        """Stop taking requests, then wait (up to timeout) for those in flight. On a connection
        that closed under it (a shard whose NATS went away) the subscriptions went with it."""
        if self._service is not None and not self._nc.is_closed:
            await self._service.stop()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
