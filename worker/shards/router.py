"""Requests to the partition that holds their agent, whichever shard they reached.

Every shard serves the plain subjects (`memory.store`, ...) in the usual queue group, so clients
change nothing. Dispatch decodes and scopes a request there as in single mode (tenancy, grants,
the audit's caller), then hands it to the router, which reads where it goes from its row's
scope (worker/route.py): the agent's partition, the tenant's (its agent ""), or, for a request
that names no agent, every partition, whose replies the scope adds up. A partition this shard
owns runs it at once; any other is asked of its owner on `Route.partition_subject` (queue group
`memory-p<k>`), with the caller (and an ingested message's delivery) in headers that only the
worker's own account can set (the deployment lets no tenant publish under `memory.p.>`). While a
partition has no owner (a failover), the router retries for up to two lease TTLs before it
answers 503.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import msgspec
import nats.errors
import structlog

from handlers.audit import Call
from handlers.ingested import Delivery, IngestKey
from schema.base import tenant_of
from schema.errors import Unavailable, WorkerError, error_reply
from worker.audit import CALL
from worker.client_errors import refusal
from worker.dispatch import execute, turn_of
from worker.outgoing import ERROR_CODE, ERROR_TEXT
from worker.payload import reply_budget, too_large
from worker.route import Route
from worker.shards.log import Superseded
from worker.shards.node import NotOwner, PartitionNode
from worker.shards.partition import agent_token, partition_of_token
from worker.turns import TURN

log = structlog.get_logger()
ALL_AGENTS = "_"  # the token of a fanned-out request's subject
SOURCE = "Memory-Source"
REQUESTER = "Memory-Requester"
INGESTED = "Memory-Ingested"  # the ingested message a write belongs to (handlers/ingested.py)
RETRY_S = 0.2


class Router:
    def __init__(
        self,
        nc: Any,
        partitions: int,
        owned: Callable[[int], PartitionNode | None],
        on_superseded: Callable[[int], Awaitable[Any]],
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

    async def __call__(self, route: Route[Any, Any], request: Any) -> Any:
        home = route.scope.home(request)
        if home is not None:
            token = agent_token(*home)
            return await self._at(partition_of_token(token, self.partitions), token, route, request)
        add_up = route.scope.every
        if add_up is None:
            raise Unavailable(
                f"{route.trigger} without agentId (every agent at once) is not served in "
                "sharded mode yet; name the agent"
            )
        # Every partition's owner runs it over its own agents; the replies add up.
        return await add_up(request, self.partitions, self._every(route), reply_budget(self.nc))

    def _every(self, route: Route[Any, Any]) -> Any:
        """Ask each partition named its own request; their replies by partition. A partition
        without an owner is named in the refusal, never silently left out."""

        async def ask(requests: dict[int, Any]) -> dict[int, Any]:
            found = await asyncio.gather(
                *(self._at(k, ALL_AGENTS, route, r) for k, r in requests.items()),
                return_exceptions=True,
            )
            replies = dict(zip(requests, found, strict=True))
            for reply in replies.values():  # a refusal (a 413) is the answer for all
                if isinstance(reply, WorkerError) and not isinstance(reply, Unavailable):
                    raise reply
            missing = [k for k, reply in replies.items() if isinstance(reply, BaseException)]
            if missing:
                raise Unavailable(
                    f"{route.trigger}: partitions {missing} did not answer (no owner yet?); "
                    "the others did, retry for all"
                )
            return replies

        return ask

    async def _at(self, partition: int, token: str, route: Route[Any, Any], request: Any) -> Any:
        node = self.owned(partition)
        if node is not None and node.services is not None:
            try:
                return await execute(node.services, route, request)
            except (Superseded, NotOwner) as error:
                log.info("shard.write_refused", partition=partition, error=str(error))
                await self.on_superseded(partition)  # stepped down: ask whoever owns it now
        return await self._forward(partition, token, route, request)

    async def _forward(
        self, partition: int, token: str, route: Route[Any, Any], request: Any
    ) -> Any:
        call = CALL.get()
        headers = {SOURCE: "bus" if call is None else call.source}
        if call is not None and call.requester:
            headers[REQUESTER] = call.requester
        if call is not None and call.message is not None:
            headers[INGESTED] = msgspec.json.encode(call.message.delivery).decode()
        body = self._encoder.encode(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_for_owner
        subject = route.partition_subject(partition, token)
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


def by_verb(routes: Iterable[Route[Any, Any]]) -> dict[str, Route[Any, Any]]:
    """The rows by the words that end their partition subjects (`Route.verb`)."""
    return {route.verb: route for route in routes}


async def serve_partition(
    nc: Any,
    node: PartitionNode,
    msg: Any,
    on_superseded: Callable[[], object],
    routes: dict[str, Route[Any, Any]],
) -> None:
    """Answer one request forwarded to a partition this shard owns; `routes`: by verb."""
    encoder = msgspec.json.Encoder()
    headers = msg.headers or {}
    verb = ".".join(msg.subject.split(".")[4:])
    route = routes.get(verb)
    try:
        if route is None:
            raise Unavailable(f"no trigger {verb!r} here")
        if not node.owner or node.services is None:
            raise Unavailable(f"partition {node.partition} is not owned here any more")
        request = msgspec.json.decode(msg.data, type=route.request_type)
        message = headers.get(INGESTED)
        key = None
        if message is not None:  # kept where the asking shard's dispatch keeps it
            delivery = msgspec.json.decode(message, type=Delivery)
            key = IngestKey(*route.scope.keeper(request), delivery)
        token = CALL.set(
            Call(route.trigger, headers.get(SOURCE, "bus"), headers.get(REQUESTER), key)
        )
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
        body = encoder.encode(reply)
        budget = reply_budget(nc)
        if len(body) > budget:  # what the asking shard would answer: never a reply NATS drops
            raise too_large(len(body), budget, route.bounded_by)
        await nc.publish(msg.reply, body)
    except WorkerError as error:
        await _respond_error(nc, msg, error)
    except (Superseded, NotOwner) as error:
        log.info("shard.write_refused", partition=node.partition, error=str(error))
        on_superseded()
        await _respond_error(nc, msg, Unavailable(f"partition {node.partition}: {error}; retry"))
    except Exception as error:
        log.error("shard.request_failed", partition=node.partition, error=repr(error))
        await _respond_error(nc, msg, Unavailable(f"partition {node.partition}: {error}"))


async def _respond_error(nc: Any, msg: Any, error: WorkerError) -> None:
    body = msgspec.json.encode(error_reply(error))
    headers = {ERROR_CODE: error.status, ERROR_TEXT: error.message}
    await nc.publish(msg.reply, body, headers=headers)
