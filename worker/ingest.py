"""Durable ingestion for fire-and-forget publishers: the MEMORY_INGEST JetStream stream.

A message on `memory.ingest.<verb>` is the request of a write trigger the registry marks
ingestible: `memory.ingest.store` is memory::store, `memory.ingest.kg.add` memory::kg::add. It is
acknowledged only after its write is committed, so what is published while no worker runs waits
in the stream, and a redelivery after a crash is harmless (each ingestible write is idempotent:
content dedup, upserts, deleting what is gone counts it missing). Messages of one batch run
concurrently: ingestion keeps no order between them (a delete published right after the add it
undoes may run first). A message that can never succeed (a 4xx refusal) is terminated and
republished with its error on `memory.deadletter.<verb>`, kept in the MEMORY_DEADLETTER stream
for inspection; a transient failure is retried after a delay.

Under tenancy (MEMORY_WORKER_TENANCY=account) JetStream keeps no `Nats-Request-Info`, so the
tenant travels in the subject instead: `memory.ingest.<tenant>.store`. A tenant cannot choose
that token: the worker's account exports `memory.ingest.*.>` with the importer's account name
as its third token, and each tenant imports its own (`to: memory.ingest.>` lets it publish on
`memory.ingest.store` as before). The dead letter keeps the token:
`memory.deadletter.<tenant>.store`. Only clients of the worker's own account can name any
tenant here, and they are trusted already.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from worker.dispatch import Dispatcher
from worker.outgoing import ERROR_CODE, ERROR_TEXT
from worker.registry import INGESTED
from worker.tenancy import ADMIN, Caller

log = structlog.get_logger()
INGEST_STREAM = "MEMORY_INGEST"
DEADLETTER_STREAM = "MEMORY_DEADLETTER"
CONSUMER = "memory-worker"
BATCH = 128
DEADLETTER_DAYS = 14


async def _ensure_stream(js: Any, config: StreamConfig) -> None:
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)
        log.info("ingest.stream_created", stream=config.name)


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
        self._js = nc.jetstream()
        self._dispatcher = dispatcher
        self._prefix = prefix
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._subscription: Any = None

    async def start(self) -> None:
        await _ensure_stream(
            self._js,
            StreamConfig(
                name=INGEST_STREAM,
                subjects=[f"{self._prefix}memory.ingest.>"],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
                duplicate_window=120.0,
                num_replicas=self._replicas,
            ),
        )
        await _ensure_stream(
            self._js,
            StreamConfig(
                name=DEADLETTER_STREAM,
                subjects=[f"{self._prefix}memory.deadletter.>"],
                storage=StorageType.FILE,
                max_age=DEADLETTER_DAYS * 86_400.0,
                num_replicas=self._replicas,
            ),
        )
        subscription = await self._js.pull_subscribe(
            f"{self._prefix}memory.ingest.>",
            durable=CONSUMER,
            stream=INGEST_STREAM,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=60.0),
        )
        self._subscription = subscription
        self._task = asyncio.create_task(self._consume(subscription))

    async def _consume(self, subscription: Any) -> None:
        while not self._stopping.is_set():
            try:
                messages = await subscription.fetch(BATCH, timeout=1.0)
            except TimeoutError:
                continue
            except Exception as error:
                log.warning("ingest.fetch_failed", error=type(error).__name__)
                await asyncio.sleep(1.0)
                continue
            await asyncio.gather(*(self._process(message) for message in messages))

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

    async def _process(self, message: Any) -> None:
        found = self._caller(message.subject.removeprefix(f"{self._prefix}memory.ingest."))
        if isinstance(found, str):
            await self._dead(message, "400", found)
            return
        caller, kind = found
        trigger = INGESTED.get(kind)
        if trigger is None:
            verbs = ", ".join(sorted(INGESTED))
            await self._dead(message, "400", f"no ingestible trigger `{kind}` (only {verbs})")
            return
        outcome = await self._dispatcher.handle(
            trigger, message.data, source="ingest", caller=caller
        )
        if outcome.error is None:
            await message.ack()
        elif outcome.error.status.startswith("4"):
            await self._dead(message, outcome.error.status, outcome.error.message)
        else:
            await message.nak(delay=2.0)

    async def _dead(self, message: Any, status: str, reason: str) -> None:
        kind = message.subject.removeprefix(f"{self._prefix}memory.ingest.")
        headers = {ERROR_CODE: status, ERROR_TEXT: reason}
        try:
            await self._js.publish(
                f"{self._prefix}memory.deadletter.{kind}", message.data, headers=headers
            )
        finally:
            await message.term()
        log.warning("ingest.dead_letter", subject=message.subject, code=status)

    async def stop(self, timeout: float) -> None:
        """Finish the batch in hand (its messages are acknowledged), then stop fetching."""
        self._stopping.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, timeout)
        if self._subscription is not None:
            # An open pull subscription would hold the connection's drain for its full timeout.
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
