"""Durable ingestion for fire-and-forget publishers: JetStream streams of write requests.

A message on `memory.ingest.<verb>` is the request of a write trigger whose row says it is
ingestible (worker/route.py): `memory.ingest.store` is memory::store, `memory.ingest.kg.add`
memory::kg::add. It is acknowledged only after its write is committed, so what is published
while no worker runs waits in the stream. A redelivery after a crash (committed, not yet
acknowledged) changes nothing: the write records the message's key in its own transaction and a
write whose key is recorded is not applied again (handlers/ingested.py). Messages of one batch
run concurrently: ingestion keeps no order between them (a delete published right after the add
it undoes may run first). A message that can never succeed (a 4xx refusal) is terminated and
republished with its error on `memory.deadletter.<verb>`, kept in the MEMORY_DEADLETTER stream
for inspection; a transient failure is retried after a delay.

Under tenancy (MEMORY_WORKER_TENANCY=account) JetStream keeps no `Nats-Request-Info`, so the
tenant travels in the subject instead: `memory.ingest.<tenant>.store`. A tenant cannot choose
that token: the worker's account exports `memory.ingest.*.>` with the importer's account name
as its third token, and each tenant imports its own (`to: memory.ingest.>` lets it publish on
`memory.ingest.store` as before). Each tenant's messages go to a stream of its own
(worker/ingest_streams.py), made when the tenant first publishes: the worker listens on
`memory.ingest.>` for what no stream took. A message of a tenant without a stream makes it; the
worker publishes the message there and answers the publisher with that stream's
acknowledgement. A message of a tenant whose stream exists is the stream's, and the worker
leaves it; one published in the milliseconds while the stream was being made is not answered
and must be published again, as any publish without an acknowledgement. The dead letter keeps
the token: `memory.deadletter.<tenant>.store`. Only clients of the worker's own account can
name any tenant here, and they are trusted already.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import msgspec
import structlog
from nats.js.api import StorageType, StreamConfig

from handlers.ingested import Delivery
from schema.errors import Repeated
from worker.dispatch import Dispatcher
from worker.ingest_streams import (
    INGEST_STREAM,
    RETIRED,
    StreamConsumer,
    all_streams,
    ensure_stream,
    stream_config,
    stream_name,
)
from worker.outgoing import ERROR_CODE, ERROR_TEXT
from worker.route import ingestible
from worker.tenancy import ADMIN, Caller

log = structlog.get_logger()
DEADLETTER_STREAM = "MEMORY_DEADLETTER"
DEADLETTER_DAYS = 14
ARRIVALS_QUEUE = "memory-ingest-streams"


class Ingest:
    def __init__(
        self,
        nc: Any,
        dispatcher: Dispatcher,
        prefix: str = "",
        *,
        tenancy: str = "none",
        replicas: int = 1,
    ) -> None:
        """`replicas`: copies of the ingest and dead-letter streams (a shard's cluster keeps
        MEMORY_WORKER_REPLICAS of everything)."""
        self._nc = nc
        self._replicas = replicas
        self._tenanted = tenancy == "account"
        self._own_account = dispatcher.services.config.account
        self._js = nc.jetstream()
        self._dispatcher = dispatcher
        # The rows it serves that durable ingestion takes, by verb.
        self._ingested = ingestible(dispatcher.routes.values())
        self._prefix = prefix
        self._base = f"{prefix}memory.ingest."
        # The stream consumed for each tenant ('' without tenancy), and a retired shared one.
        self.consumers: dict[str, StreamConsumer] = {}
        self._retired: list[StreamConsumer] = []
        self._arrivals: Any = None

    async def start(self) -> None:
        await ensure_stream(
            self._js,
            StreamConfig(
                name=DEADLETTER_STREAM,
                subjects=[f"{self._prefix}memory.deadletter.>"],
                storage=StorageType.FILE,
                max_age=DEADLETTER_DAYS * 86_400.0,
                num_replicas=self._replicas,
            ),
        )
        if not self._tenanted:
            config = stream_config(INGEST_STREAM, f"{self._base}>", self._replicas)
            await ensure_stream(self._js, config)
            await self._consume("", INGEST_STREAM)
            return
        for info in await all_streams(self._js):
            await self._resume(info.config)
        self._arrivals = await self._nc.subscribe(
            f"{self._base}>", queue=ARRIVALS_QUEUE, cb=self._arrived
        )

    async def _resume(self, config: StreamConfig) -> None:
        """Consume a stream found at start: a tenant's, or the old shared one (retired)."""
        name, subjects = config.name or "", config.subjects or []
        retiring = any(consumer.name == name for consumer in self._retired)
        if name == INGEST_STREAM and subjects in ([f"{self._base}>"], [self._prefix + RETIRED]):
            if retiring:
                return
            if subjects != [self._prefix + RETIRED]:
                retired = dataclasses.replace(config, subjects=[self._prefix + RETIRED])
                await self._js.update_stream(retired)
                log.info("ingest.stream_retiring", stream=name)
            consumer = StreamConsumer(self._js, name, self._process, retire=True)
            await consumer.start()
            self._retired.append(consumer)
            return
        if not name.startswith(f"{INGEST_STREAM}_") or len(subjects) != 1:
            return
        tenant = subjects[0].removeprefix(self._base).removesuffix(".>")
        if subjects[0] == f"{self._base}{tenant}.>" and name == stream_name(tenant):
            await self._consume(tenant, name)

    async def _consume(self, tenant: str, name: str) -> None:
        if tenant in self.consumers:  # a start tried again (a shard's) found it consumed
            return
        consumer = StreamConsumer(
            self._js, name, self._process, gone=lambda: self.consumers.pop(tenant, None)
        )
        self.consumers[tenant] = consumer
        try:
            await consumer.start()
        except BaseException:
            self.consumers.pop(tenant, None)
            raise

    async def _arrived(self, message: Any) -> None:
        """A message on `memory.ingest.>` as every subscriber sees it (under tenancy): what a
        tenant without a stream yet published makes its stream; the rest is the streams'."""
        try:
            await self._take(message)
        except Exception as error:
            log.error("ingest.arrival_failed", subject=message.subject, error=repr(error))

    async def _take(self, message: Any) -> None:
        tenant, _, verb = message.subject.removeprefix(self._base).partition(".")
        if not verb or tenant == self._own_account:
            why = (
                f"tenant: {tenant!r} is the worker's own account, not a tenant"
                if verb
                else f"no tenant in the subject: under tenancy it is "
                f"`memory.ingest.<tenant>.<trigger>`, not `memory.ingest.{tenant}`"
            )
            await self._refuse(message, why)
            return
        if tenant in self.consumers:
            return
        name = stream_name(tenant)
        config = stream_config(name, f"{self._base}{tenant}.>", self._replicas)
        # Missing when this message came: no stream took it, so it goes there now.
        missing = await ensure_stream(self._js, config)
        if tenant not in self.consumers:
            await self._consume(tenant, name)
        if missing:
            ack = await self._nc.request(
                message.subject, message.data, headers=message.headers, timeout=10.0
            )
            if message.reply:
                await self._nc.publish(message.reply, ack.data, headers=ack.headers)

    async def _refuse(self, message: Any, reason: str) -> None:
        """A message no stream takes that can never be applied: dead-lettered, and the
        publisher told, as a stream would tell it."""
        kind = message.subject.removeprefix(self._base)
        headers = {ERROR_CODE: "400", ERROR_TEXT: reason}
        await self._js.publish(
            f"{self._prefix}memory.deadletter.{kind}", message.data, headers=headers
        )
        log.warning("ingest.dead_letter", subject=message.subject, code="400")
        if message.reply:
            body = {"error": {"code": 400, "description": reason}}
            await self._nc.publish(message.reply, msgspec.json.encode(body))

    def _caller(self, rest: str) -> tuple[Caller, str] | str:
        """The caller and the trigger's subject token after `memory.ingest.`, or why the
        subject names none (a tenant token is required under tenancy)."""
        if not self._tenanted:
            return ADMIN, rest
        tenant, _, kind = rest.partition(".")
        if not kind:
            return (
                f"no tenant in the subject: under tenancy it is "
                f"`memory.ingest.<tenant>.<trigger>`, not `memory.ingest.{rest}`"
            )
        return Caller(tenant=tenant), kind

    async def _process(self, message: Any, delivery: Delivery) -> None:
        found = self._caller(message.subject.removeprefix(self._base))
        if isinstance(found, str):
            await self._dead(message, "400", found)
            return
        caller, kind = found
        trigger = self._ingested.get(kind)
        if trigger is None:
            verbs = ", ".join(sorted(self._ingested))
            await self._dead(message, "400", f"no ingestible trigger `{kind}` (only {verbs})")
            return
        outcome = await self._dispatcher.handle(
            trigger, message.data, source="ingest", caller=caller, message=delivery
        )
        if outcome.error is None or isinstance(outcome.error, Repeated):
            await message.ack()
        elif outcome.error.status.startswith("4"):
            await self._dead(message, outcome.error.status, outcome.error.message)
        else:
            await message.nak(delay=2.0)

    async def _dead(self, message: Any, status: str, reason: str) -> None:
        kind = message.subject.removeprefix(self._base)
        headers = {ERROR_CODE: status, ERROR_TEXT: reason}
        try:
            await self._js.publish(
                f"{self._prefix}memory.deadletter.{kind}", message.data, headers=headers
            )
        finally:
            await message.term()
        log.warning("ingest.dead_letter", subject=message.subject, code=status)

    async def stop(self, timeout: float) -> None:
        """Take no new tenant; finish each stream's batch in hand (its messages are
        acknowledged), then stop fetching."""
        if self._arrivals is not None:
            await self._arrivals.unsubscribe()
        consumers = [*self.consumers.values(), *self._retired]
        await asyncio.gather(*(consumer.stop(timeout) for consumer in consumers))
