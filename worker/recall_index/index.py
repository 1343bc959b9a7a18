"""Per-agent scoring columns kept in memory, in step with every committed write.

The writer connection carries temporary triggers that log which memories a transaction inserted,
deleted or re-scored; after each commit the writer applies that log here. Recall then ranks an
agent without touching SQLite. Agents load on first use and leave, least recently used first,
when the index outgrows its memory budget. An agent is a (tenant, agentId) pair everywhere here,
so that agent `a1` of two tenants is two indexes that share nothing (contract section 15).

A load reads the agent's persisted snapshot (worker/recall_index/persist.py) and replays the
agent's changes since, or, when there is none it can trust, the agent's rows from SQLite (then
a snapshot is written in the background: worker/recall_index/saver.py). It runs without holding
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import apsw
import structlog

from handlers.recall import Columns
from worker.readers import Readers
from worker.recall_index.agent_index import ROW_SQL, AgentIndex, AgentKey
from worker.recall_index.changes import ChangeReader, LogGap, Mark, changes_since, last_mark, trim
from worker.recall_index.persist import Frozen, Store, freeze
from worker.recall_index.saver import Saver

log = structlog.get_logger()
# A forgotten memory (contract section 12), or one whose recall policy is `never` (section 13),
# is never recalled: not loaded, dropped once forgotten, back once restored.
RECALLABLE = " AND forgotten_at IS NULL AND recall_policy != 'never'"
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


class Snapshot:
    """One agent's columns to rank on a reader thread without the lock, and the handle that counts
    the accesses of what the ranking returned.

    It shares the columns with the writer rather than copying them. Copying the columns a
    rescore writes in place (live, timestamp, static, growth, has_vector) on each recall raised
    the bench's recall p50 at 100000 memories from 2.1 to 2.3 ms (the copy alone: 0.5 ms), and
    would still leave the vectors, which a re-embedding overwrites in place too and which take
    about 28 ms to copy. So it guarantees this much, and no more:
    - memories stored after it lie beyond `columns.rows`: a ranking never sees them;
    - a memory it holds may be rescored, re-embedded or deleted by a commit that the writer
      applies while the ranking runs; the ranking may then read that memory's old values, its
      new ones, or a mix of both (an old static part with a new recency, a vector half
      overwritten), so its score may be that of neither version;
    - a memory deleted meanwhile may still be ranked but is never returned (`count_access`
      skips what the index no longer holds, and the rows come from SQLite), so the reply may
      then hold fewer than `limit` memories.
    Only memories whose rows change during that very recall are affected.
    """

    __slots__ = ("_agent", "_key", "_lock", "columns")

    def __init__(
        self, columns: Columns, agent: AgentIndex, lock: threading.RLock, key: AgentKey
    ) -> None:
        self.columns = columns
        self._agent = agent
        self._lock = lock
        self._key = key

    def count_access(self, conn: apsw.Connection, memory_ids: list[str]) -> dict[str, int]:
        """Count one access of each memory in the index; their counts after it. A count not
        held yet is read from conn first (outside the lock)."""
        with self._lock:
            unknown = self._agent.unknown_access(memory_ids)
        stored: dict[str, int] = {}
        if unknown:
            marks = ",".join("?" * len(unknown))
            stored = dict(
                conn.execute(
                    f"SELECT id, access_count FROM memories WHERE +tenant = ? AND +agent_id = ? "
                    f"AND id IN ({marks})",
                    (*self._key, *unknown),
                )
            )
        with self._lock:
            return self._agent.count_access(memory_ids, stored)


class MemoryIndex:
    def __init__(
        self,
        readers: Readers,
        max_bytes: int,
        clock: Callable[[], int],
        *,
        open_reader: Callable[[], apsw.Connection] | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        """Loads run on the `readers` pool (a thread each) over connections of their own
        (`open_reader`, by default `readers.fresh`), closed when the load is done. With a
        `cache_dir`, agents are persisted there (`attach` starts the saver)."""
        self._readers = readers
        self._open_reader = open_reader or readers.fresh
        self._clock = clock
        self._max_bytes = max_bytes
        self._agents: OrderedDict[AgentKey, AgentIndex] = OrderedDict()
        self._loading: dict[AgentKey, _Load] = {}
        # Bumped when the index cannot follow the change log: loads begun before are not kept.
        self._generation = 0
        # Private: a caller holding it while waiting for a load would deadlock with that load.
        self._lock = threading.RLock()
        # The writer connection's position in the change log (see `after_commit`).
        self._reader: ChangeReader | None = None
        self._commits = 0
        self._store = None if cache_dir is None else Store(cache_dir)
        self._saver = (
            None if self._store is None else Saver(self._store, self._freeze, self._freeze_cold)
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

    def agent(self, key: AgentKey) -> AgentIndex:
        """The agent's index, loaded if absent or too fragmented; one load per agent at a time,
        which other callers needing that agent wait for (so call it from a thread that may
        block)."""
        with self._lock:
            found = self._agents.get(key)
            if found is not None and found.dead <= max(1024, found.live_count):
                self._agents.move_to_end(key)
                return found
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
            opened = None if fragmented else self._open_persisted(key, conn)
            from_disk = opened is not None
            if opened is None:
                loaded, removed = self._read_rows(key, conn), False
            else:
                loaded, removed = opened
            with self._lock:
                # Once per memory: the replay reads its row as it is now, whatever the changes.
                for memory_id, op in collapse(pending.changes).items():
                    removed |= _apply_one(conn, key, loaded, memory_id, op)
                if self._reader is not None and loaded.complete is not None:
                    loaded.complete = later(loaded.complete, self._reader.mark)
                if pending.generation == self._generation:
                    self._agents[key] = loaded
                    self._shrink(keep=key)
                    if self._saver is not None and loaded.complete is not None:
                        self._saver.loaded(key, from_disk=from_disk)
            if removed and self._saver is not None:
                self._saver.removed(key)
            return loaded
        finally:
            conn.close()

    def _read_rows(self, key: AgentKey, conn: apsw.Connection) -> AgentIndex:
        """The agent from SQLite, in one read transaction begun after `pending` was registered,
        and the change log's position in it."""
        loaded = AgentIndex(anchor_ms=self._clock())
        with conn:
            loaded.complete = last_mark(conn) if self._store is not None else None
            loaded.load(
                conn.execute(
                    f"{ROW_SQL} WHERE tenant = ? AND agent_id = ?{RECALLABLE} ORDER BY rowid",
                    key,
                )
            )
        if self._store is not None and self._store.maybe_has(key):
            loaded.disk_rows = len(loaded.ids)  # an older snapshot may hold any of them
        return loaded

    def _open_persisted(
        self, key: AgentKey, conn: apsw.Connection
    ) -> tuple[AgentIndex, bool] | None:
        """The agent's snapshot caught up with the change log, and whether the catch-up removed
        a row it holds; None (and the snapshot dropped when it is damaged or cannot be caught
        up) to load from SQLite instead."""
        if self._store is None:
            return None
        try:
            found = self._store.open(key)
            if found is None:
                return None
            loaded, mark = found
            removed = False
            with conn:  # one read transaction: the changes and the rows they name
                changes = changes_since(conn, key, mark)
                for memory_id, op in collapse(changes).items():
                    removed |= _apply_one(conn, key, loaded, memory_id, op)
                loaded.complete = last_mark(conn)
            return loaded, removed
        except (LogGap, ValueError, OSError, KeyError, TypeError) as error:
            log.warning("index.snapshot_unusable", error=f"{type(error).__name__}: {error}")
            self._store.drop(key)
            return None

    def _freeze(self, key: AgentKey) -> Frozen | None:
        with self._lock:
            found = self._agents.get(key)
            if found is None or found.complete is None:
                return None
            frozen = freeze(key, found, found.complete)
            found.disk_rows = max(found.disk_rows, frozen.rows)
            return frozen

    def _freeze_cold(self, key: AgentKey) -> Frozen | None:
        """An agent that is not loaded, from its snapshot caught up (on the saver's thread, on
        a connection of its own); None when it has none that can be used."""
        conn = self._open_reader()
        try:
            opened = self._open_persisted(key, conn)
            if opened is None or opened[0].complete is None:
                return None
            return freeze(key, opened[0], opened[0].complete)
        finally:
            conn.close()

    def _shrink(self, keep: AgentKey) -> None:
        total = sum(index.nbytes() for index in self._agents.values())
        while total > self._max_bytes and len(self._agents) > 1:
            oldest = next(iter(self._agents))
            if oldest == keep:
                self._agents.move_to_end(oldest)
                continue
            total -= self._agents.pop(oldest).nbytes()
            if self._saver is not None:
                self._saver.left(oldest)

    def forget_all(self) -> None:
        """Drop every agent (they reload on demand), and keep no load begun before."""
        with self._lock:
            for key in self._agents:
                if self._saver is not None:
                    self._saver.left(key)
            self._agents.clear()
            self._generation += 1

    def loaded_agents(self, tenant: str | None = None) -> int:
        """Agents loaded now: of every tenant, or (for a tenant's memory::stats) of one. Without
        the lock, as the event loop calls it: copying the keys is one atomic step."""
        if tenant is None:
            return len(self._agents)
        return sum(1 for loaded, _ in list(self._agents) if loaded == tenant)

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
                    if _apply_one(conn, key, index, memory_id, op):
                        removed.add(key)
                    counts[key] = counts.get(key, 0) + 1
                elif pending is None and self._gone_from_cold(conn, key, memory_id, op):
                    removed.add(key)
            if self._reader is not None:
                for index in self._agents.values():
                    if index.complete is not None:
                        index.complete = later(index.complete, self._reader.mark)
        if self._saver is not None:
            for key, count in counts.items():
                self._saver.changed(key, count)
            for key in removed:
                self._saver.removed(key)

    def _gone_from_cold(
        self, conn: apsw.Connection, key: AgentKey, memory_id: str, op: str
    ) -> bool:
        """Whether a change of an agent that is not loaded removed a row its snapshot on disk
        may hold: re-indexed, or no longer recallable as this agent's."""
        if self._store is None or not self._store.maybe_has(key):
            return False
        if op != "upsert":
            return True
        found = conn.execute(
            f"SELECT 1 FROM memories WHERE id = ? AND tenant = ? AND agent_id = ?{RECALLABLE}",
            (memory_id, *key),
        ).fetchone()
        return found is None


def later(one: Mark, other: Mark) -> Mark:
    return one if one.seq >= other.seq else other


def collapse(changes: Iterable[tuple[str, str]]) -> dict[str, str]:
    """One op per memory: `readd` if any of its changes was one (its row is read again)."""
    found: dict[str, str] = {}
    for memory_id, op in changes:
        if found.get(memory_id) != "readd":
            found[memory_id] = op
    return found


def _apply_one(
    conn: apsw.Connection, key: AgentKey, index: AgentIndex, memory_id: str, op: str
) -> bool:
    """Bring one memory of the agent's index to its row as conn now reads it (absent, or no
    longer this tenant's agent's: removed), so that an index never holds another's memory;
    whether a row that may be on disk was removed (`AgentIndex.remove`)."""
    removed = False
    if op in ("delete", "readd"):
        removed = index.remove(memory_id)
        if op == "delete":
            return removed
    row = conn.execute(
        ROW_SQL + f" WHERE id = ? AND tenant = ? AND agent_id = ?{RECALLABLE}", (memory_id, *key)
    ).fetchone()
    if row is None:
        return index.remove(memory_id) or removed
    index.upsert(row)
    return removed
