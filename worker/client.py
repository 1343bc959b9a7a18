"""The Python client of a running memory worker: `send(row, request)` for any row of the trigger
table, and a typed async method per trigger of the contract, made from its row.

    from schema.memory import RecallRequest, StoreRequest
    from worker.client import MemoryClient

    async with await MemoryClient.connect("nats://127.0.0.1:4222") as memory:
        await memory.store(StoreRequest(agent_id="a1", content="The deploy key rotates on Fridays"))
        found = await memory.recall(RecallRequest(agent_id="a1", query="deploy key"))

Requests and replies are the worker's own msgspec structs (schema/), so a request the worker
would refuse for its shape is already a type error here. A refusal raises the class of
schema/errors.py that the worker raised (InvalidRequest, Forbidden, NotFound, ...) with its
`status`, `code` and `message`; a failure on this side raises a ClientError (worker/
client_errors.py) saying whether NATS, the worker or the request is the problem. The CLI's
fire, stats and check and the MCP server are built on this class, so connecting, timeouts and
errors are handled in this one place.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable
from functools import partial
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar, overload

import msgspec
import nats.errors

from schema.base import Reply, TriggerRequest
from worker.client_errors import (
    BadReply,
    NoWorker,
    RequestTooLarge,
    Unreachable,
    refusal,
)
from worker.config import Config, load_config, nats_servers
from worker.redact import redact
from worker.registry import BY_TRIGGER
from worker.route import Route
from worker.triggers import (
    canonical,
    facts,
    kg,
    kv,
    life,
    maintenance,
    memory,
    sessions,
    tasks,
    topics,
    usage,
)
from worker.triggers.agents import AGENTS

Q = TypeVar("Q", bound=TriggerRequest)
R = TypeVar("R", bound=Reply)
Q_in = TypeVar("Q_in", bound=TriggerRequest, contravariant=True)
R_out = TypeVar("R_out", bound=Reply, covariant=True)
D = TypeVar("D")
PING_SUBJECT = "$SRV.PING.memory"


class Sender(Protocol[Q_in, R_out]):
    """A named method of the client: the request in, the reply out."""

    def __call__(self, request: Q_in, *, timeout: float | None = None) -> Awaitable[R_out]: ...


class Sends(Generic[Q, R]):
    """The client's method for one row of the trigger table, typed by the row: `store =
    Sends(memory.STORE)` makes `await client.store(StoreRequest(...)) -> StoreReply`."""

    def __init__(self, route: Route[Q, R]) -> None:
        self.route = route

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Sends[Q, R]: ...

    @overload
    def __get__(self, client: MemoryClient, owner: type[Any]) -> Sender[Q, R]: ...

    def __get__(self, client: MemoryClient | None, owner: type[Any]) -> Sends[Q, R] | Sender[Q, R]:
        if client is None:
            return self
        return partial(client.send, self.route)


class ServicePing(msgspec.Struct, frozen=True):
    """A `$SRV.PING` reply: nats.micro answers it by itself; the worker puts its health in the
    metadata (`health`: `ok` or `corrupt`, and a `reason`)."""

    name: str
    id: str
    version: str
    type: str = ""
    metadata: dict[str, str] | None = None


def default_url(config: Config) -> str:
    """The CLI's choice: MEMORY_WORKER_NATS_URL, else the embedded server's port."""
    return config.nats_url or f"nats://127.0.0.1:{config.embedded_port}"


class MemoryClient:
    """One NATS connection to the worker's service. Make it with `await MemoryClient.connect()`
    and close it with `close()` or `async with`."""

    def __init__(self, nc: Any, *, url: str, subject_prefix: str = "", timeout: float = 5.0):
        self.nc = nc
        self.url = url
        self.timeout = timeout
        self.subject_prefix = subject_prefix
        self.subjects = {
            trigger: route.subject(subject_prefix) for trigger, route in BY_TRIGGER.items()
        }
        self._encoder = msgspec.json.Encoder()
        self._decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}

    @classmethod
    async def connect(
        cls,
        url: str | None = None,
        *,
        config: Config | None = None,
        timeout: float = 5.0,
        subject_prefix: str | None = None,
        inbox_prefix: str | None = None,
    ) -> MemoryClient:
        """Connect within `timeout` seconds, which is also each request's default timeout.

        Without `config`, the MEMORY_WORKER_* variables are read, as the CLI reads them: the
        URL (when `url` is None), the subject prefix and the NATS credentials (user and
        password, token, creds file, TLS CA, certificate and key). `inbox_prefix` is the
        private inbox a tenant's user must use under the shipped NATS configuration.
        `url` may list a cluster's servers, comma-separated: they are tried in turn and the
        first that answers is used, a dead one skipped (worker/bus.py `connect`).
        Raises Unreachable when no connection is made within the timeout (refused, TLS,
        credentials: the message names each server and the setting to look at), ValueError
        naming the entry of `url` that is not a NATS server's address."""
        from worker.connection import ConnectionFailed, connect

        config = load_config(os.environ) if config is None else config
        url = url or default_url(config)
        nats_servers(url)  # refused before any connection is tried
        try:
            nc = await connect(
                url, config, reconnect=False, timeout=timeout, inbox_prefix=inbox_prefix
            )
        except ConnectionFailed as error:
            raise Unreachable(redact(str(error))) from None
        prefix = config.subject_prefix if subject_prefix is None else subject_prefix
        return cls(nc, url=url, subject_prefix=prefix, timeout=timeout)

    @property
    def server(self) -> str:
        """The server this client is connected to (of a list, the one that answered), or the
        URL it was given once the connection is gone."""
        current = self.nc.connected_url
        return str(current.geturl()) if current is not None else self.url

    @property
    def closed(self) -> bool:
        """The connection is gone: closed here, or lost (this client does not reconnect)."""
        return bool(self.nc.is_closed)

    async def close(self) -> None:
        if not self.nc.is_closed:
            await self.nc.close()

    async def __aenter__(self) -> MemoryClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def exchange(self, subject: str, body: bytes, timeout: float | None = None) -> bytes:
        """The reply's bytes to body sent on subject; a worker's error reply is raised as its
        class of schema/errors.py, a failure on the way as a ClientError."""
        wait = self.timeout if timeout is None else timeout
        shown = redact(self.server)  # the URL may carry a password or token: never show it
        try:
            msg = await self.nc.request(subject, body, timeout=wait)
        except nats.errors.MaxPayloadError:
            raise RequestTooLarge(
                f"the request is {len(body)} bytes, more than the NATS server at {shown} "
                f"accepts (max_payload {self.nc.max_payload} bytes)"
            ) from None
        except nats.errors.NoRespondersError:
            raise NoWorker(f"no memory worker answers on {shown}") from None
        except TimeoutError:  # nats.errors.TimeoutError is one
            why = _inbox_refused(self.nc)
            raise NoWorker(f"no reply within {wait:g}s from {shown}{why}") from None
        except (OSError, nats.errors.Error) as error:
            reason = redact(str(error) or type(error).__name__)
            raise Unreachable(f"lost the connection to NATS at {shown}: {reason}") from None
        refused = refusal(msg.headers, msg.data)
        if refused is not None:
            raise refused
        data: bytes = msg.data
        return data

    async def request(self, trigger: str, body: bytes, *, timeout: float | None = None) -> bytes:
        """Send a trigger's request as JSON bytes and return the reply's JSON bytes, unread
        (what `memory-worker fire` does). KeyError for a trigger the registry does not have."""
        return await self.exchange(self.subjects[trigger], body, timeout)

    async def ping(self, *, timeout: float | None = None) -> ServicePing:
        """The first worker's answer to `$SRV.PING.memory`: it is up, and its health."""
        data = await self.exchange(PING_SUBJECT, b"", timeout)
        return self._decode(data, ServicePing, PING_SUBJECT)

    async def send(self, route: Route[Q, R], request: Q, *, timeout: float | None = None) -> R:
        """Send any row of the trigger table (worker/triggers/) and decode its reply as the
        row's reply type; the named methods below are this for the contract's triggers."""
        subject = self.subjects.get(route.trigger) or route.subject(self.subject_prefix)
        data = await self.exchange(subject, self._encoder.encode(request), timeout)
        return self._decode(data, route.reply_type, route.trigger)

    def _decode(self, data: bytes, reply_type: type[D], what: str) -> D:
        decoder = self._decoders.get(reply_type)
        if decoder is None:
            decoder = self._decoders[reply_type] = msgspec.json.Decoder(reply_type)
        try:
            reply: D = decoder.decode(data)
            return reply
        except msgspec.DecodeError as error:  # another version of the worker, or not a worker
            raise BadReply(f"{what}: the reply is not a {reply_type.__name__}: {error}") from None

    # One method per trigger of the contract, in its order, each typed by its row; every one
    # takes `timeout=` to override the client's.
    store = Sends(memory.STORE)
    recall = Sends(memory.RECALL)
    evict = Sends(maintenance.EVICT)
    consolidate = Sends(maintenance.CONSOLIDATE)
    kg_add = Sends(kg.ADD)
    kg_query = Sends(kg.QUERY)
    kg_delete = Sends(kg.DELETE)
    session_list = Sends(sessions.LIST)
    session_compact = Sends(sessions.COMPACT)
    session_repair = Sends(sessions.REPAIR)
    session_get = Sends(sessions.GET)
    stats = Sends(maintenance.STATS)
    audit = Sends(maintenance.AUDIT)
    get = Sends(life.GET)
    list_memories = Sends(life.LIST)
    update = Sends(memory.UPDATE)
    forget = Sends(life.FORGET)
    unforget = Sends(life.UNFORGET)
    delete = Sends(life.DELETE)
    erase = Sends(life.ERASE)
    toggle = Sends(life.TOGGLE)
    context = Sends(memory.CONTEXT)
    kv_set = Sends(kv.SET)
    kv_get = Sends(kv.GET)
    kv_delete = Sends(kv.DELETE)
    kv_list = Sends(kv.LIST)
    task_post = Sends(tasks.POST)
    task_claim = Sends(tasks.CLAIM)
    task_complete = Sends(tasks.COMPLETE)
    task_list = Sends(tasks.LIST)
    usage_record = Sends(usage.RECORD)
    usage_query = Sends(usage.QUERY)
    canonical_get = Sends(canonical.GET)
    canonical_append = Sends(canonical.APPEND)
    fact_assert = Sends(facts.ASSERT)
    fact_end = Sends(facts.END)
    fact_retract = Sends(facts.RETRACT)
    fact_query = Sends(facts.QUERY)
    topic_list = Sends(topics.LIST)
    topic_get = Sends(topics.GET)
    session_resume = Sends(topics.RESUME)
    agents = Sends(AGENTS)


def _inbox_refused(nc: Any) -> str:
    """What a timeout's message adds when the server refused the subscription to this client's
    reply inbox (a tenant's user of the shipped NATS configuration without its own prefix): no
    reply could have come back, whether or not a worker answered."""
    error = str(nc.last_error or "")
    if "permissions violation for subscription" not in error.lower():
        return ""
    return (
        f"; the server refused this client's reply inbox ({error}): a tenant's user connects "
        "with its own (`inbox_prefix`; `--inbox-prefix _INBOX_<user>` on the command line)"
    )
