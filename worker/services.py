"""What a route needs to execute a trigger: storage, index, embedder, outside services, clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from handlers.recall.keywords import KeywordMode
from worker.access_counts import AccessCounts
from worker.config import Config
from worker.embedders import Embedder
from worker.readers import Readers
from worker.recall_index.index import MemoryIndex
from worker.recalls_first import RecallsFirst
from worker.telemetry import Telemetry
from worker.tenancy import Grants
from worker.topic_titles import TopicTitler
from worker.writer import Writer


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Context(Protocol):
    """What dispatch and the maintenance report read beside a trigger's execution: Services
    in single mode, what a shard's partitions share (worker/storage.py `Shared`) in sharded
    mode."""

    @property
    def config(self) -> Config: ...

    @property
    def grants(self) -> Grants: ...

    @property
    def telemetry(self) -> Telemetry: ...

    @property
    def clock(self) -> Callable[[], int]: ...


class Backfilling(Protocol):
    """What a trigger asks of the backfill (worker/recall_index/backfill.py): a vector later
    for an agent's memories that have none, or a batch of them now; and its stop."""

    def add(self, tenant: str, agent_id: str) -> None: ...

    async def fill_batch(self, tenant: str, agent_id: str) -> bool: ...

    async def close(self) -> None: ...


@dataclass
class Services:
    config: Config
    writer: Writer
    readers: Readers
    index: MemoryIndex
    embedder: Embedder
    nc: Any = None
    keyword_mode: KeywordMode = "share"
    backfill: Backfilling | None = None
    clock: Callable[[], int] = wall_clock_ms
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    # Recalls' access counts not yet written, gathered for a moment (worker/access_counts.py).
    accesses: AccessCounts = field(default_factory=AccessCounts)
    # Recalled memories' rowids by id, for the next recall's read of their rows (at most
    # ROWIDS_KEPT: worker/triggers/memory.py).
    rowids: dict[str, int] = field(default_factory=dict)
    recalls_first: RecallsFirst = field(default_factory=RecallsFirst)
    # The app's telemetry (built before these services): what memory::stats and the
    # maintenance report read and write; dispatch, the scheduler and metrics get it directly.
    telemetry: Telemetry = field(default_factory=Telemetry)
    # Per-user agent grants under tenancy (MEMORY_WORKER_GRANTS); empty: none.
    grants: Grants = field(default_factory=Grants)
    # Topics' texts asked of the LLM in the background, bounded per process (the Shared one).
    titler: TopicTitler = field(default_factory=TopicTitler)
