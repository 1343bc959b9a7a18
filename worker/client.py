"""The Python client of a running memory worker: one typed async method per trigger.

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
from types import TracebackType
from typing import Any, TypeVar

import msgspec
import nats.errors

from schema.base import Reply, TriggerRequest
from schema.context import ContextReply, ContextRequest
from schema.kg import KgAddReply, KgAddRequest, KgQueryReply, KgQueryRequest
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
from worker.client_errors import (
    BadReply,
    NoWorker,
    RequestTooLarge,
    Unreachable,
    refusal,
)
from worker.client_state import STATE_METHODS, StateMethods
from worker.config import Config, load_config, nats_servers
from worker.redact import redact
from worker.registry import BY_TRIGGER

R = TypeVar("R", bound=Reply)
D = TypeVar("D")
PING_SUBJECT = "$SRV.PING.memory"

# The method that sends each trigger; tests/test_client.py fails when a trigger of the registry
# has none, or when its annotations are not the route's request and reply types.
METHODS = {
    "memory::store": "store",
    "memory::recall": "recall",
    "memory::evict": "evict",
    "memory::consolidate": "consolidate",
    "memory::kg::add": "kg_add",
    "memory::kg::query": "kg_query",
    "memory::kg::delete": "kg_delete",
    "memory::session::list": "session_list",
    "memory::session::compact": "session_compact",
    "memory::session::repair": "session_repair",
    "memory::session::get": "session_get",
    "memory::stats": "stats",
    "memory::audit": "audit",
    "memory::get": "get",
    "memory::list": "list_memories",
    "memory::update": "update",
    "memory::forget": "forget",
    "memory::unforget": "unforget",
    "memory::delete": "delete",
    "memory::erase": "erase",
    "memory::toggle": "toggle",
    "memory::context": "context",
} | STATE_METHODS


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


class MemoryClient(StateMethods):
    """One NATS connection to the worker's service. Make it with `await MemoryClient.connect()`
    and close it with `close()` or `async with`."""

    def __init__(self, nc: Any, *, url: str, subject_prefix: str = "", timeout: float = 5.0):
        self.nc = nc
        self.url = url
        self.timeout = timeout
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
        from worker.bus import ConnectionFailed, connect

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
            raise NoWorker(f"no reply within {wait:g}s from {shown}") from None
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

    async def _call(
        self, trigger: str, request: TriggerRequest, reply_type: type[R], timeout: float | None
    ) -> R:
        data = await self.exchange(self.subjects[trigger], self._encoder.encode(request), timeout)
        return self._decode(data, reply_type, trigger)

    def _decode(self, data: bytes, reply_type: type[D], what: str) -> D:
        decoder = self._decoders.get(reply_type)
        if decoder is None:
            decoder = self._decoders[reply_type] = msgspec.json.Decoder(reply_type)
        try:
            reply: D = decoder.decode(data)
            return reply
        except msgspec.DecodeError as error:  # another version of the worker, or not a worker
            raise BadReply(f"{what}: the reply is not a {reply_type.__name__}: {error}") from None

    # One method per trigger, in the order of the contract. `timeout` overrides the client's.

    async def store(self, request: StoreRequest, *, timeout: float | None = None) -> StoreReply:
        return await self._call("memory::store", request, StoreReply, timeout)

    async def recall(self, request: RecallRequest, *, timeout: float | None = None) -> RecallReply:
        return await self._call("memory::recall", request, RecallReply, timeout)

    async def evict(self, request: EvictRequest, *, timeout: float | None = None) -> EvictReply:
        return await self._call("memory::evict", request, EvictReply, timeout)

    async def consolidate(
        self, request: ConsolidateRequest, *, timeout: float | None = None
    ) -> ConsolidateReply:
        return await self._call("memory::consolidate", request, ConsolidateReply, timeout)

    async def kg_add(self, request: KgAddRequest, *, timeout: float | None = None) -> KgAddReply:
        return await self._call("memory::kg::add", request, KgAddReply, timeout)

    async def kg_query(
        self, request: KgQueryRequest, *, timeout: float | None = None
    ) -> KgQueryReply:
        return await self._call("memory::kg::query", request, KgQueryReply, timeout)

    async def kg_delete(
        self, request: KgDeleteRequest, *, timeout: float | None = None
    ) -> KgDeleteReply:
        return await self._call("memory::kg::delete", request, KgDeleteReply, timeout)

    async def session_list(
        self, request: SessionListRequest, *, timeout: float | None = None
    ) -> SessionListReply:
        return await self._call("memory::session::list", request, SessionListReply, timeout)

    async def session_compact(
        self, request: CompactRequest, *, timeout: float | None = None
    ) -> CompactReply:
        return await self._call("memory::session::compact", request, CompactReply, timeout)

    async def session_repair(
        self, request: RepairRequest, *, timeout: float | None = None
    ) -> RepairReply:
        return await self._call("memory::session::repair", request, RepairReply, timeout)

    async def session_get(
        self, request: SessionGetRequest, *, timeout: float | None = None
    ) -> SessionGetReply:
        return await self._call("memory::session::get", request, SessionGetReply, timeout)

    async def stats(self, request: StatsRequest, *, timeout: float | None = None) -> StatsReply:
        return await self._call("memory::stats", request, StatsReply, timeout)

    async def audit(self, request: AuditRequest, *, timeout: float | None = None) -> AuditReply:
        return await self._call("memory::audit", request, AuditReply, timeout)

    async def get(self, request: GetRequest, *, timeout: float | None = None) -> GetReply:
        return await self._call("memory::get", request, GetReply, timeout)

    async def list_memories(
        self, request: ListRequest, *, timeout: float | None = None
    ) -> ListReply:
        return await self._call("memory::list", request, ListReply, timeout)

    async def update(self, request: UpdateRequest, *, timeout: float | None = None) -> UpdateReply:
        return await self._call("memory::update", request, UpdateReply, timeout)

    async def forget(self, request: ForgetRequest, *, timeout: float | None = None) -> ForgetReply:
        return await self._call("memory::forget", request, ForgetReply, timeout)

    async def unforget(
        self, request: UnforgetRequest, *, timeout: float | None = None
    ) -> UnforgetReply:
        return await self._call("memory::unforget", request, UnforgetReply, timeout)

    async def delete(self, request: DeleteRequest, *, timeout: float | None = None) -> DeleteReply:
        return await self._call("memory::delete", request, DeleteReply, timeout)

    async def erase(self, request: EraseRequest, *, timeout: float | None = None) -> EraseReply:
        return await self._call("memory::erase", request, EraseReply, timeout)

    async def toggle(self, request: ToggleRequest, *, timeout: float | None = None) -> ToggleReply:
        return await self._call("memory::toggle", request, ToggleReply, timeout)

    async def context(
        self, request: ContextRequest, *, timeout: float | None = None
    ) -> ContextReply:
        return await self._call("memory::context", request, ContextReply, timeout)
