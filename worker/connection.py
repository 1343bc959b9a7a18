"""The worker's connection to NATS, and a command's: options from the config, a list of servers
tried in turn, refusals named in one line, and the reconnect budget (worker/reachability.py)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

import nats
import nats.errors
import structlog

from worker.config import Config, nats_servers
from worker.reachability import Reachability
from worker.redact import redact

log = structlog.get_logger()


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
