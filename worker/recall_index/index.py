"""Per-agent scoring columns kept in memory, in step with every committed write.

Triggers on `memories` log which memories each transaction inserted, deleted, re-scored or
re-indexed; after each commit the writer applies what the log gained here. Recall then ranks an
agent without touching SQLite. Agents load on first use and leave, least recently used first,
when the index outgrows its memory budget: each counted as what it holds (AgentIndex.nbytes),
with what the saver allocates while it writes a snapshot (`saving`); what leaves is given back
to the system (worker/recall_index/release.py). An agent is a (tenant, agentId) pair everywhere
here, so that agent `a1` of two tenants is two indexes that share nothing (contract section 15).

A load reads the agent's persisted snapshot (worker/recall_index/persist.py) and replays the
agent's changes since, or, when there is none it can trust, the agent's rows from SQLite (then
a snapshot is written in the background: worker/recall_index/saver.py); how is
worker/recall_index/loading.py, when and under which lock is here. It runs without holding
the lock (a large agent takes seconds from SQLite, and the writer applies every commit under the
lock, so holding it would stall every write and every other recall). Changes applied while the
load runs are kept and replayed onto the loaded index under the lock before it is installed: a
change committed before the load's read began is in it, one committed after is replayed
(replaying one already in it changes nothing).

Changes come from the permanent change log (worker/recall_index/changes.py), which every writer
of the file fills, so a write by another process (a second worker, an import) is applied like
this worker's own at its next commit.

All of the index's concurrency lives in this class, behind three calls: `attach` once on the
writer's connection, `after_commit` from the writer thread after each commit, and `with_snapshot`
from the event loop for each recall; `close` at shutdown.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import apsw
import structlog

from worker.readers import Readers
from worker.recall_index.agent_index import AgentIndex, AgentKey
from worker.recall_index.changes import ChangeReader, LogGap, trim
from worker.recall_index.frozen import Frozen, freeze
from worker.recall_index.loading import Loader, apply_one, collapse, later
from worker.recall_index.persist import Store
from worker.recall_index.release import RELEASER, Releaser
from worker.recall_index.saver import Saver
from worker.recall_index.view import Snapshot

log = structlog.get_logger()
T = TypeVar("T")

# Commits between trims of the change log.
TRIM_EVERY = 200


@dataclass
class _Load:
    """A load in progress: changes applied meanwhile, and its result for callers that waited."""

    generation: int
    changes: list[tuple[str, str]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    result: AgentIndex | None = None


class MemoryIndex:
    def __init__(
        self,
        readers: Readers,
        max_bytes: int,
        clock: Callable[[], int],
        *,
        open_reader: Callable[[], apsw.Connection] | None = None,
        cache_dir: Path | None = None,
        codes: bool = False,
        releaser: Releaser = RELEASER,
    ) -> None:
        """Loads run on the `readers` pool (a thread each) over connections of their own
        (`open_reader`, by default `readers.fresh`), closed when the load is done. With a
        `cache_dir`, agents are persisted there (`attach` starts the saver). With `codes` each
        agent keeps its vectors' sign codes too (handlers/recall/codes.py)."""
        self._readers = readers
        self._open_reader = open_reader or readers.fresh
        self._max_bytes = max_bytes
        self._agents: OrderedDict[AgentKey, AgentIndex] = OrderedDict()
        # Each loaded agent's bytes as last counted (AgentIndex.nbytes), and their sum: counted
        # again when the agent changes or is recalled, not all of them at each load.
        self._sizes: dict[AgentKey, int] = {}
        self._recalled: dict[AgentKey, tuple[int, int]] = {}  # AgentIndex.recalled when counted
        self._total = 0
        # What the saver holds while it writes a snapshot (`saving`), and the agent it writes.
        self._held = 0
        self._saving: AgentKey | None = None
        # Told what the index lets go of, gives freed memory back (worker/recall_index/release.py).
        self._releaser = releaser
        self._loading: dict[AgentKey, _Load] = {}
        # Bumped when the index cannot follow the change log: loads begun before are not kept.
        self._generation = 0
        # Private: a caller holding it while waiting for a load would deadlock with that load.
        self._lock = threading.RLock()
        # The writer connection's position in the change log (see `after_commit`).
        self._reader: ChangeReader | None = None
        self._commits = 0
        self._store = None if cache_dir is None else Store(cache_dir)
        self._loader = Loader(self._store, clock, self._open_reader, codes=codes)
        self._saver = (
            None
            if self._store is None
            else Saver(self._store, self._freeze, self._loader.frozen_cold, self.saving)
        )
        # On the event loop only: loads that recalls of one agent await together.
        self._shared_loads: dict[AgentKey, asyncio.Future[AgentIndex]] = {}

    async def with_snapshot(self, key: AgentKey, fn: Callable[[apsw.Connection, Snapshot], T]) -> T:
        """Run fn on a reader thread, in one read transaction, with a snapshot of the agent.

        An agent not loaded is loaded first on a reader thread; recalls that need it meanwhile
        await that same load here, on the event loop, rather than each holding a reader thread
        while it runs, so that recalls of other agents still find a free one. The snapshot is
        taken on the reader thread, not here: it needs the lock, which the writer holds while it
        applies a commit, and the event loop must not wait for that. An agent that left (or was
        dropped) before fn ran is loaded again there, sharing a load the way `agent` does."""
        if key not in self._agents:  # without the lock: a dict lookup is atomic
            load = self._shared_loads.get(key)
            if load is None:
                load = asyncio.ensure_future(self._readers.run(lambda _: self.agent(key)))
                self._shared_loads[key] = load
                load.add_done_callback(lambda _: self._shared_loads.pop(key, None))
            await asyncio.shield(load)
        return await self._readers.run(lambda conn: fn(conn, self.snapshot(key)))

    def snapshot(self, key: AgentKey) -> Snapshot:
        """The agent's snapshot, loading it if needed (blocks: call it from a reader thread)."""
        found = self.agent(key)
        with self._lock:
            return Snapshot(found.columns(), found, self._lock, key)

    def loaded_snapshot(self, key: AgentKey) -> Snapshot | None:
        """The agent's snapshot if it is loaded and usable and the lock is free now, else None
        (take `with_snapshot`): for a caller on the event loop, which must not wait."""
        if key not in self._agents or not self._lock.acquire(blocking=False):
            return None
        try:
            found = self._usable(key)
            return None if found is None else Snapshot(found.columns(), found, self._lock, key)
        finally:
            self._lock.release()

    def _usable(self, key: AgentKey) -> AgentIndex | None:
        """Under the lock: the agent's index if loaded and not too fragmented, as used now."""
        found = self._agents.get(key)
        if found is None or found.dead > max(1024, found.live_count):
            return None
        self._agents.move_to_end(key)
        if found.recalled() != self._recalled.get(key):
            self._count(key)  # what recalls added since (access counts, words' bits)
        self._shrink(keep=key)
        return found

    def agent(self, key: AgentKey) -> AgentIndex:
        """The agent's index, loaded if absent or too fragmented; one load per agent at a time,
        which other callers needing that agent wait for (so call it from a thread that may
        block)."""
        with self._lock:
            usable = self._usable(key)
            if usable is not None:
                return usable
            found = self._agents.get(key)
            pending = self._loading.get(key)
            mine = pending is None
            if pending is None:
                pending = self._loading[key] = _Load(self._generation)
        if not mine:
            pending.done.wait()
            if pending.result is not None and pending.generation == self._generation:
                return pending.result
            return self.agent(key)  # it failed, or the index was dropped meanwhile
        try:
            pending.result = self._load(key, pending, fragmented=found is not None)
            return pending.result
        finally:
            with self._lock:
                del self._loading[key]
            pending.done.set()

    def _load(self, key: AgentKey, pending: _Load, *, fragmented: bool) -> AgentIndex:
        conn = self._open_reader()
        try:
            opened = None if fragmented else self._loader.open_persisted(key, conn)
            from_disk = opened is not None
            if opened is None:
                loaded, removed = self._loader.read_rows(key, conn), False
            else:
                loaded, removed = opened
            # A load from SQLite gathers about what it holds in lists it then lets go of.
            freed = 0 if from_disk else loaded.nbytes()
            with self._lock:
                # Once per memory: the replay reads its row as it is now, whatever the changes.
                for memory_id, op in collapse(pending.changes).items():
                    removed |= apply_one(conn, key, loaded, memory_id, op)
                if self._reader is not None and loaded.complete is not None:
                    loaded.complete = later(loaded.complete, self._reader.mark)
                if pending.generation == self._generation:
                    freed += self._sizes.get(key, 0)  # a fragmented agent's, replaced
                    self._agents[key] = loaded
                    self._count(key)
                    self._shrink(keep=key)
                    if self._saver is not None and loaded.complete is not None:
                        self._saver.loaded(key, from_disk=from_disk)
            if removed and self._saver is not None:
                self._saver.removed(key)
            self._releaser.freed(freed)
            return loaded
        finally:
            conn.close()

    def _freeze(self, key: AgentKey) -> Frozen | None:
        with self._lock:
            found = self._agents.get(key)
            if found is None or found.complete is None:
                return None
            frozen = freeze(key, found, found.complete)
            found.disk_rows = max(found.disk_rows, frozen.rows)
            return frozen

    def _count(self, key: AgentKey) -> None:
        """Count the loaded agent's bytes again (under the lock)."""
        agent = self._agents[key]
        size = agent.nbytes()
        self._total += size - self._sizes.get(key, 0)
        self._sizes[key] = size
        self._recalled[key] = agent.recalled()

    def _shrink(self, keep: AgentKey | None = None) -> None:
        """Least recently used agents leave until the counted bytes are within the budget; never
        `keep` (the agent a recall waits for), the agent being saved, or the last agent."""
        while self._total + self._held > self._max_bytes and len(self._agents) > 1:
            oldest = next((k for k in self._agents if k not in (keep, self._saving)), None)
            if oldest is None:
                return
            del self._agents[oldest]
            size = self._sizes.pop(oldest)
            self._recalled.pop(oldest, None)
            self._total -= size
            self._releaser.freed(size)
            if self._saver is not None:
                self._saver.left(oldest)

    @contextmanager
    def saving(self, key: AgentKey, frozen: Frozen) -> Iterator[None]:
        """While the saver writes the agent's snapshot (on its thread): what the writing
        allocates is counted in the budget (and what `frozen` holds, when the agent is not
        loaded: a cold rewrite), other agents leaving to make room; the agent does not leave."""
        with self._lock:
            held = frozen.transient() + (0 if key in self._agents else frozen.nbytes())
            self._held += held
            self._saving = key
            self._shrink(keep=key)
        try:
            yield
        finally:
            with self._lock:
                self._held -= held
                self._saving = None
            self._releaser.freed(held)

    def counted_bytes(self) -> int:
        """The bytes the budget counts now: the loaded agents' and what the saver holds."""
        with self._lock:
            return self._total + self._held

    def forget_all(self) -> None:
        """Drop every agent (they reload on demand), and keep no load begun before."""
        with self._lock:
            for key in self._agents:
                if self._saver is not None:
                    self._saver.left(key)
            self._agents.clear()
            self._sizes.clear()
            self._recalled.clear()
            self._releaser.freed(self._total)
            self._total = 0
            self._generation += 1

    def loaded_agents(
        self, tenant: str | None = None, granted: Callable[[str], bool] | None = None
    ) -> int:
        """Agents loaded now: of every tenant, or (for a tenant's memory::stats) of one, and of
        those the agents `granted` says yes to (a user's grants). Without the lock, as the event
        loop calls it: copying the keys is one atomic step."""
        if tenant is None:
            return len(self._agents)
        return sum(
            1
            for loaded, agent_id in list(self._agents)
            if loaded == tenant and (granted is None or granted(agent_id))
        )

    def attach(self, conn: apsw.Connection) -> None:
        """Follow the change log from its end on the writer's connection; start the saver."""
        self._reader = ChangeReader(conn)
        if self._store is not None and self._saver is not None:
            self._saver.start()

    def close(self) -> None:
        """Write the snapshots worth writing (clean shutdown)."""
        if self._saver is not None:
            self._saver.close()

    def after_commit(self, conn: apsw.Connection) -> None:
        """On the writer thread after each commit: apply what the change log gained since the
        last commit, whoever wrote it (drop the index if the log cannot say)."""
        try:
            if self._reader is None:
                self._reader = ChangeReader(conn)
            try:
                changes = self._reader.take(conn)
            except LogGap as gap:
                log.warning("index.log_gap", error=str(gap))
                self._reader = ChangeReader(conn)
                self.forget_all()
                return
            self.apply(conn, changes)
            self._drop_erased(conn, {key for key, _, _ in changes})
            self._commits += 1
            if self._store is not None and self._commits % TRIM_EVERY == 0:
                trim(conn)
        except Exception as error:
            log.error("index.catch_up_failed", error=type(error).__name__)
            self.forget_all()

    def _drop_erased(self, conn: apsw.Connection, keys: set[AgentKey]) -> None:
        """Delete the snapshots of agents left without a memory (erased): no memory may
        outlive an erasure on disk, not even as a token or an id in a cache."""
        if self._saver is None or self._store is None:
            return
        for key in keys:
            if (
                self._store.maybe_has(key)
                and not conn.execute(
                    "SELECT 1 FROM memories WHERE tenant = ? AND agent_id = ? LIMIT 1", key
                ).fetchall()
            ):
                self._saver.drop(key)

    def apply(self, conn: apsw.Connection, changes: Iterable[tuple[AgentKey, str, str]]) -> None:
        """Apply ((tenant, agent), memory id, op) changes committed on conn to the loaded agents,
        and keep them for the agents being loaded."""
        counts: dict[AgentKey, int] = {}
        removed: set[AgentKey] = set()
        with self._lock:
            for key, memory_id, op in changes:
                pending = self._loading.get(key)
                if pending is not None:
                    pending.changes.append((memory_id, op))
                index = self._agents.get(key)
                if index is not None:
                    if apply_one(conn, key, index, memory_id, op):
                        removed.add(key)
                    counts[key] = counts.get(key, 0) + 1
                elif pending is None and self._loader.gone_from_cold(conn, key, memory_id, op):
                    removed.add(key)
            if self._reader is not None:
                for index in self._agents.values():
                    if index.complete is not None:
                        index.complete = later(index.complete, self._reader.mark)
            for key in counts:
                if key in self._agents:
                    self._count(key)
            self._shrink()
        if self._saver is not None:
            for key, count in counts.items():
                self._saver.changed(key, count)
            for key in removed:
                self._saver.removed(key)
