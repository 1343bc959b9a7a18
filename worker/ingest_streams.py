"""The JetStream streams durable ingestion consumes, and the consumer loop of each.

Without tenancy there is one stream, MEMORY_INGEST on `memory.ingest.>`. Under tenancy every tenant
has a stream of its own, `MEMORY_INGEST_<tenant>` on `memory.ingest.<tenant>.>`: a tenant's
`Nats-Msg-Id`s are deduplicated against its own messages only, and the sequence in the
acknowledgement it gets counts its own messages only. A stream of one tenant's was MEMORY_INGEST on
`memory.ingest.>` in versions before: under tenancy that stream is retired (it no longer takes
messages, its remaining ones are applied, then it is deleted), since its subjects overlap the
tenants' and JetStream allows no overlap.

Each stream has the durable pull consumer `memory-worker`. A message is handed on with its
delivery (handlers/ingested.py): the stream's identity (its name and creation time), its sequence,
and the consumer's ack floor, so that its write records the key and forgets those no redelivery
can ask about.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from handlers.ingested import Delivery

log = structlog.get_logger()
INGEST_STREAM = "MEMORY_INGEST"
CONSUMER = "memory-worker"
BATCH = 128
FETCH_S = 5.0  # how long an idle consumer's pull request waits (one request per period)
ACK_WAIT_S = 60.0  # a message not acknowledged this long after delivery is delivered again
FLOOR_S = 1.0  # how often the consumer's ack floor is read again while messages arrive
RETIRED = "memory.ingest-retired"  # the old shared stream's subject once retired: nobody's
READABLE = re.compile(r"[A-Za-z0-9_-]{1,200}")

Handle = Callable[[Any, Delivery], Awaitable[None]]


def stream_name(tenant: str) -> str:
    """A tenant's stream: its name when that is a valid stream name, else a hash of it (`=` is
    in no readable name, so the two kinds never meet)."""
    if READABLE.fullmatch(tenant):
        return f"{INGEST_STREAM}_{tenant}"
    return f"{INGEST_STREAM}_={hashlib.sha256(tenant.encode()).hexdigest()[:32]}"


def stream_config(name: str, subject: str, replicas: int) -> StreamConfig:
    return StreamConfig(
        name=name,
        subjects=[subject],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        duplicate_window=120.0,
        num_replicas=replicas,
    )


async def ensure_stream(js: Any, config: StreamConfig) -> bool:
    """Create the stream unless it exists; whether it was missing."""
    assert config.name is not None
    try:
        await js.stream_info(config.name)
        return False
    except NotFoundError:
        await js.add_stream(config)  # also succeeds when another worker just made it alike
        log.info("ingest.stream_created", stream=config.name)
        return True


async def all_streams(js: Any) -> list[Any]:
    """Every stream of the account (the server lists them a page at a time)."""
    found: list[Any] = []
    while True:
        page = await js.streams_info(offset=len(found))
        if not page:
            return found
        found.extend(page)


class StreamConsumer:
    """One stream's durable consumer: fetches batches and hands each message, with its delivery,
    to `handle`; the messages of a batch run concurrently. `retire`: the old shared stream,
    deleted once it holds no message. `gone` is called when the stream disappears."""

    def __init__(
        self,
        js: Any,
        name: str,
        handle: Handle,
        *,
        retire: bool = False,
        gone: Callable[[], object] = lambda: None,
    ) -> None:
        self.name = name
        self._js = js
        self._handle = handle
        self._retire = retire
        self._gone = gone
        self._identity = name
        self._floor = (0, 0.0)  # the ack floor, and when it was read (monotonic)
        self._busy = False
        self._stopping = False
        self._subscription: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        info = await self._js.stream_info(self.name)
        if info.created is not None:
            self._identity = f"{self.name}@{int(info.created.timestamp() * 1_000_000)}"
        try:
            await self._js.consumer_info(self.name, CONSUMER)
        except NotFoundError:  # without a filter: the stream's subjects are its tenant's alone
            config = ConsumerConfig(
                durable_name=CONSUMER, ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_S
            )
            await self._js.add_consumer(self.name, config)
        self._subscription = await self._js.pull_subscribe_bind(CONSUMER, self.name)
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self._stopping:
            try:
                messages = await self._subscription.fetch(BATCH, timeout=FETCH_S)
            except TimeoutError:
                if self._retire and await self._drained():
                    return
                continue
            except Exception as error:
                if await self._vanished():
                    return
                log.warning("ingest.fetch_failed", stream=self.name, error=type(error).__name__)
                await asyncio.sleep(1.0)
                continue
            self._busy = True
            try:
                floor = await self._ack_floor()
                await asyncio.gather(
                    *(
                        self._handle(m, Delivery(self._identity, m.metadata.sequence.stream, floor))
                        for m in messages
                    )
                )
            finally:
                self._busy = False

    async def _ack_floor(self) -> int:
        """The consumer's ack floor, read again at most every FLOOR_S: a stale one is lower,
        which only keeps keys a little longer."""
        floor, read_at = self._floor
        if time.monotonic() - read_at >= FLOOR_S:
            with contextlib.suppress(Exception):
                info = await self._js.consumer_info(self.name, CONSUMER)
                floor = info.ack_floor.stream_seq if info.ack_floor is not None else floor
                self._floor = (floor, time.monotonic())
        return floor

    async def _drained(self) -> bool:
        """The retired stream holds nothing more: delete it."""
        info = await self._js.stream_info(self.name)
        if info.state.messages:
            return False
        with contextlib.suppress(NotFoundError):
            await self._js.delete_stream(self.name)
        log.info("ingest.stream_retired", stream=self.name)
        return True

    async def _vanished(self) -> bool:
        try:
            await self._js.stream_info(self.name)
            return False
        except NotFoundError:
            log.warning("ingest.stream_gone", stream=self.name)
            self._gone()
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
            return True
        except Exception:
            return False

    async def stop(self, timeout: float) -> None:
        """Finish the batch in hand (its messages are acknowledged); an idle fetch is cut."""
        self._stopping = True
        if self._task is not None:
            if not self._busy:
                self._task.cancel()
            await asyncio.wait([self._task], timeout=timeout)
            self._task.cancel()  # a batch past the timeout: its messages come again
        if self._subscription is not None:
            # An open pull subscription would hold the connection's drain for its full timeout.
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
