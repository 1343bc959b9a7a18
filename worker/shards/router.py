"""Requests to the partition that holds their agent, whichever shard they reached.

Every shard serves the plain subjects (`memory.store`, ...) in the usual queue group, so clients
change nothing. Dispatch decodes and scopes a request there as in single mode (tenancy, grants,
the audit's caller), then hands it to the router: a partition this shard owns runs it at once;
any other is asked of its owner on `memory.p.<k>.<token>.<verb>` (queue group `memory-p<k>`),
with the caller in headers that only the worker's own account can set (the deployment lets no
tenant publish under `memory.p.>`). While a partition has no owner (a failover), the router
retries for up to two lease TTLs before it answers 503.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
import nats.errors
import structlog

from handlers.audit import Call
from schema.base import tenant_of
from schema.errors import Unavailable, WorkerError, error_reply
from worker.audit import CALL
from worker.client_errors import refusal
from worker.dispatch import execute, turn_of
from worker.outgoing import ERROR_CODE, ERROR_TEXT
from worker.registry import ROUTES, Route
from worker.shards.fanout import ALL_AUDIT, added_up, audit_pages, usage_added_up
from worker.shards.log import Superseded
from worker.shards.node import NotOwner, PartitionNode
from worker.shards.partition import agent_token, partition_of_token
from worker.turns import TURN

log = structlog.get_logger()
# What runs on every partition when no agent is named (SCALE.md "Across agents").
FANNED_OUT = frozenset(
    {"memory::evict", "memory::consolidate", "memory::stats", "memory::usage::query", ALL_AUDIT}
)
# A tenant's task board is one, whoever posts or claims: it lives in the partition of the
# tenant's agent "" (as do its `shared` keys).
TENANT_WIDE = frozenset(
    {"memory::task::post", "memory::task::claim", "memory::task::complete", "memory::task::list"}
)
ALL_AGENTS = "_"  # the token of a fanned-out request's subject
SOURCE = "Memory-Source"
REQUESTER = "Memory-Requester"
BY_VERB = {route.ingest_verb: route for route in ROUTES}
RETRY_S = 0.2


def partition_subject(partition: int, token: str, route: Route) -> str:
    return f"memory.p.{partition}.{token}.{route.ingest_verb}"


class Router:
    def __init__(
        self,
        nc: Any,
        partitions: int,
        owned: Callable[[int], PartitionNode | None],
        on_superseded: Callable[[int], None],
        *,
        wait_for_owner: float,
        timeout: float = 30.0,
    ) -> None:
        self.nc = nc
        self.partitions = partitions
        self.owned = owned
        self.on_superseded = on_superseded
        self.wait_for_owner = wait_for_owner
        self.timeout = timeout
        self._encoder = msgspec.json.Encoder()

    async def __call__(self, route: Route, request: Any) -> Any:
        owner = owner_of(route, request)
        if owner is not None:
            token = agent_token(*owner)
            return await self._at(partition_of_token(token, self.partitions), token, route, request)
        if route.trigger not in FANNED_OUT:
            raise Unavailable(
                f"{route.trigger} without agentId (every agent at once) is not served in "
                "sharded mode yet; name the agent"
            )
        return await self._fan_out(route, request)

    async def _fan_out(self, route: Route, request: Any) -> Any:
        """Every partition's owner runs it over its own agents; the replies add up. A
        partition without an owner is named in the refusal, never silently left out."""
        if route.trigger == ALL_AUDIT:
            return await audit_pages(request, self.partitions, self._every(route))
        replies = await self._every(route)({k: request for k in range(self.partitions)})
        answered = [replies[k] for k in range(self.partitions)]
        if route.trigger == "memory::usage::query":
            return usage_added_up(answered)
        return added_up(answered)

    def _every(self, route: Route) -> Any:
        """Ask each partition named its own request; their replies by partition."""

        async def ask(requests: dict[int, Any]) -> dict[int, Any]:
            found = await asyncio.gather(
                *(self._at(k, ALL_AGENTS, route, r) for k, r in requests.items()),
                return_exceptions=True,
            )
            replies = dict(zip(requests, found, strict=True))
            missing = [k for k, reply in replies.items() if isinstance(reply, BaseException)]
            if missing:
                raise Unavailable(
                    f"{route.trigger}: partitions {missing} did not answer (no owner yet?); "
                    "the others did, retry for all"
                )
            return replies

        return ask

    async def _at(self, partition: int, token: str, route: Route, request: Any) -> Any:
        node = self.owned(partition)
        if node is not None and node.services is not None:
            try:
                return await execute(node.services, route, request)
            except (Superseded, NotOwner):
                self.on_superseded(partition)  # then ask whoever owns it now
        return await self._forward(partition, token, route, request)

    async def _forward(self, partition: int, token: str, route: Route, request: Any) -> Any:
        call = CALL.get()
        headers = {SOURCE: "bus" if call is None else call.source}
        if call is not None and call.requester:
            headers[REQUESTER] = call.requester
        body = self._encoder.encode(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_for_owner
        subject = partition_subject(partition, token, route)
        while True:
            try:
                msg = await self.nc.request(subject, body, timeout=self.timeout, headers=headers)
            except nats.errors.NoRespondersError:
                if loop.time() > deadline:
                    raise Unavailable(
                        f"partition {partition} has no owner yet (a shard is taking it over); retry"
                    ) from None
                await asyncio.sleep(RETRY_S)
                continue
            error = refusal(msg.headers, msg.data)
            if error is None:
                return msgspec.json.decode(msg.data, type=route.reply_type)
            if error.status == "503" and loop.time() <= deadline:
                await asyncio.sleep(RETRY_S)  # it stepped down meanwhile: ask the next owner
                continue
            raise error


def owner_of(route: Route, request: Any) -> tuple[str, str] | None:
    """The (tenant, agentId) whose partition holds what the request acts on; None for a request
    over every agent."""
    tenant = tenant_of(request)
    if route.trigger in TENANT_WIDE:
        return (tenant, "")
    agent_id = getattr(request, "agent_id", None)
    if isinstance(agent_id, str):
        return (tenant, agent_id)
    if getattr(request, "namespace", None) == "shared":
        return (tenant, "")
    return None


async def serve_partition(
    nc: Any, node: PartitionNode, msg: Any, on_superseded: Callable[[], None]
) -> None:
    """Answer one request forwarded to a partition this shard owns."""
    encoder = msgspec.json.Encoder()
    headers = msg.headers or {}
    verb = ".".join(msg.subject.split(".")[4:])
    route = BY_VERB.get(verb)
    try:
        if route is None:
            raise Unavailable(f"no trigger {verb!r} here")
        if not node.owner or node.services is None:
            raise Unavailable(f"partition {node.partition} is not owned here any more")
        request = msgspec.json.decode(msg.data, type=route.request_type)
        token = CALL.set(Call(route.trigger, headers.get(SOURCE, "bus"), headers.get(REQUESTER)))
        # The front took the request's turn; here its reads and its query take the tenant's.
        agent = getattr(request, "agent_id", None)
        turn = TURN.set(
            turn_of(
                node.services.config.tenancy,
                tenant_of(request),
                agent if isinstance(agent, str) else None,
            )
        )
        try:
            reply = await execute(node.services, route, request)
        finally:
            TURN.reset(turn)
            CALL.reset(token)
        await nc.publish(msg.reply, encoder.encode(reply))
    except WorkerError as error:
        await _respond_error(nc, msg, error)
    except (Superseded, NotOwner) as error:
        on_superseded()
        await _respond_error(nc, msg, Unavailable(f"partition {node.partition}: {error}; retry"))
    except Exception as error:
        log.error("shard.request_failed", partition=node.partition, error=repr(error))
        await _respond_error(nc, msg, Unavailable(f"partition {node.partition}: {error}"))


async def _respond_error(nc: Any, msg: Any, error: WorkerError) -> None:
    body = msgspec.json.encode(error_reply(error))
    headers = {ERROR_CODE: error.status, ERROR_TEXT: error.message}
    await nc.publish(msg.reply, body, headers=headers)
