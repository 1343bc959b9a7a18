"""Per-agent scoring columns kept in memory, in step with every committed write.

Triggers on `memories` log which memories each transaction inserted, deleted, re-scored or
re-indexed; after each commit the writer applies what the log gained here. Recall then ranks an
agent without touching SQLite. Agents load on first use, or from the write side once they take
many changes (worker/recall_index/saver.py `adopt`), and leave, least recently used first, when
the index outgrows its memory budget (worker/recall_index/budget.py). An agent is a (tenant,
agentId) pair everywhere here, so that agent `a1` of two tenants is two indexes that share
nothing (contract section 15).

A load reads the agent's persisted snapshot (worker/recall_index/persist.py) and replays the
agent's changes since, or, when there is none it can trust, the agent's rows from SQLite (then
a snapshot is written in the background: worker/recall_index/saver.py); how is
worker/recall_index/loading.py, when and under which lock is here. It runs without holding
the lock (a large agent takes seconds from SQLite, and the writer applies every commit under the
lock, so holding it would stall every write and every other recall). Changes applied while the
load runs are kept and replayed onto the loaded index before it is installed, the last few of
them under the lock: a change committed before the load's read began is in it, one committed
after is replayed (replaying one already in it changes nothing). A loaded agent is opened again
from each snapshot the saver writes of it (`reopen`), the same way.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import apsw
import structlog

from worker.readers import Readers
from worker.recall_index.agent_index import AgentIndex, AgentKey
from worker.recall_index.budget import Budget
from worker.recall_index.changes import ChangeReader, LogGap, trim
from worker.recall_index.frozen import Frozen, freeze
from worker.recall_index.loading import Loader, apply_many, collapse, later
from worker.recall_index.persist import Store
from worker.recall_index.release import RELEASER, Releaser
from worker.recall_index.saver import ADOPT_AFTER, Saver
from worker.recall_index.stand_in import stand_in
from worker.recall_index.view import Snapshot

log = structlog.get_logger()
T = TypeVar("T")

# Commits between trims of the change log.
TRIM_EVERY = 200
# Changes that came while a load ran are replayed onto it without the lock until no more than
# this many are left, which are replayed under the lock as it is installed: the writer, which
# applies each commit under the lock, never waits for a long replay.
REPLAY_UNDER_LOCK = 256
# How long a recall waits for its agent's load (a large agent read from SQLite: 30 s or more at
# a million memories) before it ranks a stand-in instead (`with_snapshot`).
HOLD_S = 0.5


@dataclass
class _Load:
    """A load in progress: changes applied meanwhile, and its result for callers that waited."""

    generation: int
    changes: list[tuple[str, str]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    result: AgentIndex | None = None


class MemoryIndex(Budget):
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
        super().__init__(max_bytes, releaser)
        self._clock = clock
        # How long a recall waits for its agent's load before it ranks a stand-in.
        self.hold_s = HOLD_S
        self._readers = readers
        self._open_reader = open_reader or readers.fresh
        self._loading: dict[AgentKey, _Load] = {}
        # The writer connection's position in the change log (see `after_commit`).
        self._reader: ChangeReader | None = None
        self._commits = 0
        self._store = None if cache_dir is None else Store(cache_dir)
        self._loader = Loader(self._store, clock, self._open_reader, codes=codes)
        if self._store is not None:
            freeze, cold = self._freeze, self._loader.frozen_cold
            saver = Saver(self._store, freeze, cold, self.saving, self.agent, self.reopen)
            self._saver = saver
        # On the event loop only: loads that recalls of one agent await together.
        self._shared_loads: dict[AgentKey, asyncio.Future[AgentIndex]] = {}

    async def with_snapshot(
        self,
        key: AgentKey,
        fn: Callable[[apsw.Connection, Snapshot], T],
        *,
        query: str | None = None,
    ) -> T:
        """Run fn on a reader thread, in one read transaction, with a snapshot of the agent.

        An agent not loaded is loaded first on a reader thread; recalls that need it meanwhile
        await that same load here, on the event loop, rather than each holding a reader thread
        while it runs, so that recalls of other agents still find a free one. The snapshot is
        taken on the reader thread, not here: it needs the lock, which the writer holds while it
        applies a commit, and the event loop must not wait for that. An agent that left (or was
        dropped) before fn ran is loaded again there, sharing a load the way `agent` does.

        A recall (`query` given) that has waited `hold_s` for a load still running (a large
        agent read from SQLite: a first start without a snapshot) ranks a stand-in of the
        agent's likeliest rows instead (worker/recall_index/stand_in.py); the load goes on."""
        if key not in self._agents:  # without the lock: a dict lookup is atomic
            load = self._shared_loads.get(key)
            if load is None:
                load = asyncio.ensure_future(self._readers.run(lambda _: self.agent(key)))
                self._shared_loads[key] = load
                load.add_done_callback(lambda done: self._load_ended(key, done))
            if query is not None:
                await asyncio.wait({load}, timeout=self.hold_s)
                if not load.done():
                    return await self._readers.run(
                        lambda conn: fn(conn, self._stand_in(conn, key, query))
                    )
            await asyncio.shield(load)
        return await self._readers.run(lambda conn: fn(conn, self.snapshot(key)))

    def _load_ended(self, key: AgentKey, load: asyncio.Future[AgentIndex]) -> None:
        """A load's end: a failure is logged here too (recalls that took a stand-in no longer
        await it)."""
        self._shared_loads.pop(key, None)
        if not load.cancelled() and load.exception() is not None:
            log.warning("index.load_failed", error=type(load.exception()).__name__)

    def _stand_in(self, conn: apsw.Connection, key: AgentKey, query: str) -> Snapshot:
        """A snapshot of the agent's stand-in for this recall, read on conn."""
        found = stand_in(conn, key, query, anchor_ms=self._clock(), codes=self._loader.codes)
        return Snapshot(found.columns(), found, self._lock, key)

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
        loaded = self._load_as(key, pending, fragmented=found is not None)
        assert loaded is not None  # only a reopen leaves the agent as it was
        return loaded

    def reopen(self, key: AgentKey) -> None:
        """Open the loaded agent again from the snapshot the saver has just written of it (on
        the saver's thread): what it gathered in RAM since it was opened goes back to the
        mapped files, its room for appends is renewed, and a keyword's posting is one piece
        again. Recalls meanwhile rank the agent as it was; nothing happens to an agent that
        left or is being loaded."""
        with self._lock:
            if key not in self._agents or key in self._loading:
                return
            pending = self._loading[key] = _Load(self._generation)
        self._load_as(key, pending, fragmented=False, reopen=True)

    def _load_as(
        self, key: AgentKey, pending: _Load, *, fragmented: bool, reopen: bool = False
    ) -> AgentIndex | None:
        """`_load`, as the agent's load in progress, which other callers may wait for."""
        try:
            pending.result = self._load(key, pending, fragmented=fragmented, reopen=reopen)
            return pending.result
        finally:
            with self._lock:
                del self._loading[key]
            pending.done.set()

    def _load(
        self, key: AgentKey, pending: _Load, *, fragmented: bool, reopen: bool = False
    ) -> AgentIndex | None:
        """Load (or `reopen`: None when its snapshot cannot be opened) and install the agent."""
        conn = self._open_reader()
        try:
            opened = None if fragmented else self._loader.open_persisted(key, conn)
            from_disk = opened is not None
            if opened is None:
                if reopen:
                    return None
                loaded, removed, replayed = self._loader.read_rows(key, conn), False, 0
            else:
                loaded, removed, replayed = opened
            # A load from SQLite gathers about what it holds in lists it then lets go of.
            freed = 0 if from_disk else loaded.nbytes()
            done = 0
            while True:
                with self._lock:
                    waiting = pending.changes[done:]
                    current = pending.generation == self._generation
                    if len(waiting) <= REPLAY_UNDER_LOCK or not current:
                        removed |= self._replay(conn, key, loaded, waiting)
                        installed = current and (not reopen or key in self._agents)
                        if installed:
                            freed += self._install(key, loaded, from_disk, replayed, reopen)
                        break
                # The loaded index is this thread's alone until it is installed.
                removed |= self._replay(conn, key, loaded, waiting)
                done += len(waiting)
            if removed and self._saver is not None:
                self._saver.removed(key)
            self._releaser.freed(freed)
            return loaded if installed or not reopen else None
        finally:
            conn.close()

    def _replay(
        self,
        conn: apsw.Connection,
        key: AgentKey,
        loaded: AgentIndex,
        changes: list[tuple[str, str]],
    ) -> bool:
        """Once per memory: the replay reads its row as it is now, whatever the changes."""
        return apply_many(conn, key, loaded, collapse(changes))

    def _install(
        self, key: AgentKey, loaded: AgentIndex, from_disk: bool, replayed: int, reopen: bool
    ) -> int:
        """Put the loaded agent in place (under the lock); the bytes of the one it replaced."""
        if self._reader is not None and loaded.complete is not None:
            loaded.complete = later(loaded.complete, self._reader.mark)
        freed = self._sizes.get(key, 0)  # a fragmented or reopened agent's, replaced
        replaced = self._agents.get(key)
        if replaced is not None:  # the access counts it holds, which SQLite may not have yet
            for slot, count in replaced.access.items():
                at = loaded.slot_of(replaced.ids[slot])
                if at is not None:
                    loaded.access[at] = count
        self._agents[key] = loaded
        self._cold.pop(key, None)
        self._count(key)
        self._shrink(keep=key)
        if self._saver is not None and loaded.complete is not None and not reopen:
            rows = len(loaded.ids)
            self._saver.loaded(key, from_disk=from_disk, rows=rows, replayed=replayed)
        return freed

    def _freeze(self, key: AgentKey) -> Frozen | None:
        with self._lock:
            found = self._agents.get(key)
            if found is None or found.complete is None:
                return None
            frozen = freeze(key, found, found.complete)
            found.disk_rows = max(found.disk_rows, frozen.rows)
            return frozen

    def attach(self, conn: apsw.Connection) -> None:
        """Follow the change log from its end on the writer's connection; start the saver."""
        self._reader = ChangeReader(conn)
        if self._store is not None and self._saver is not None:
            self._saver.start()

    def close(self) -> None:
        """Write the snapshots worth writing (clean shutdown), after the loads in progress: an
        agent still read from SQLite (a stop soon after a first start) is written too, not read
        from SQLite again at the next start. The readers' close would wait for those loads."""
        with self._lock:
            loads = list(self._loading.values())
        for pending in loads:
            pending.done.wait()
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
        adopt: list[tuple[AgentKey, int]] = []
        by_agent: dict[AgentKey, list[tuple[str, str]]] = {}
        for key, memory_id, op in changes:
            by_agent.setdefault(key, []).append((memory_id, op))
        with self._lock:
            for key, changed in by_agent.items():
                pending = self._loading.get(key)
                if pending is not None:
                    pending.changes.extend(changed)
                index = self._agents.get(key)
                if index is not None:
                    if apply_many(conn, key, index, collapse(changed)):
                        removed.add(key)
                    counts[key] = len(changed)
                elif pending is None:
                    if any(self._loader.gone_from_cold(conn, key, *one) for one in changed):
                        removed.add(key)
                    before = self._cold.get(key, 0)
                    cold = self._cold[key] = before + len(changed)
                    if cold // ADOPT_AFTER > before // ADOPT_AFTER:
                        adopt.append((key, cold))
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
                found = self._agents.get(key)
                self._saver.changed(key, count, rows=0 if found is None else len(found.ids))
            for key in removed:
                self._saver.removed(key)
            for key, cold in adopt:
                self._saver.adopt(key, cold)
