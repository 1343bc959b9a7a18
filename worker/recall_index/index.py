"""Per-agent scoring columns kept in memory, in step with every committed write.

The writer connection carries temporary triggers that log which memories a transaction inserted,
deleted or re-scored; after each commit the writer applies that log here. Recall then ranks an
agent without touching SQLite. Agents load on first use and leave, least recently used first,
when the index outgrows its memory budget. An agent is a (tenant, agentId) pair everywhere here,
so that agent `a1` of two tenants is two indexes that share nothing (contract section 15).

A load reads the agent's rows without holding the lock (a large agent takes seconds, and the
writer applies every commit under the lock, so holding it would stall every write and every
other recall). Changes applied while the load runs are kept and replayed onto the loaded index
under the lock before it is installed: a change committed before the load's snapshot began is in
it, one committed after is replayed (replaying one already in the snapshot changes nothing).

All of the index's concurrency lives in this class, behind three calls: `attach` once on the
writer's connection, `after_commit` from the writer thread after each commit, and `with_snapshot`
from the event loop for each recall.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

import apsw
import structlog

from handlers.recall import Columns
from worker.readers import Readers
from worker.recall_index.agent_index import ROW_SQL, AgentIndex, AgentKey

log = structlog.get_logger()
# A forgotten memory (contract section 12), or one whose recall policy is `never` (section 13),
# is never recalled: not loaded, dropped once forgotten, back once restored.
RECALLABLE = " AND forgotten_at IS NULL AND recall_policy != 'never'"
T = TypeVar("T")

# A row moved to another tenant or agent leaves the old one's index and joins the new one's; a
# row whose content, summary or taxonomy changed (memory::update) is re-added, so that its
# keywords and filter columns are the new ones.
CHANGE_LOG = """
CREATE TEMP TABLE IF NOT EXISTS index_changes
    (tenant TEXT, agent_id TEXT, memory_id TEXT, op TEXT);
CREATE TEMP TRIGGER IF NOT EXISTS index_on_insert AFTER INSERT ON main.memories BEGIN
    INSERT INTO index_changes VALUES (new.tenant, new.agent_id, new.id, 'upsert'); END;
CREATE TEMP TRIGGER IF NOT EXISTS index_on_delete AFTER DELETE ON main.memories BEGIN
    INSERT INTO index_changes VALUES (old.tenant, old.agent_id, old.id, 'delete'); END;
CREATE TEMP TRIGGER IF NOT EXISTS index_on_rescore
    AFTER UPDATE OF confidence, importance, timestamp, embedding, forgotten_at
    ON main.memories BEGIN
    INSERT INTO index_changes VALUES (new.tenant, new.agent_id, new.id, 'upsert'); END;
CREATE TEMP TRIGGER IF NOT EXISTS index_on_rewrite
    AFTER UPDATE OF content, role, session_id, metadata, pinned, summary, category, sensitivity,
    recall_policy, tags ON main.memories BEGIN
    INSERT INTO index_changes VALUES (old.tenant, old.agent_id, old.id, 'delete');
    INSERT INTO index_changes VALUES (new.tenant, new.agent_id, new.id, 'upsert'); END;
CREATE TEMP TRIGGER IF NOT EXISTS index_on_move
    AFTER UPDATE OF tenant, agent_id ON main.memories BEGIN
    INSERT INTO index_changes VALUES (old.tenant, old.agent_id, old.id, 'delete');
    INSERT INTO index_changes VALUES (new.tenant, new.agent_id, new.id, 'upsert'); END;
"""


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

    __slots__ = ("_agent", "_lock", "columns")

    def __init__(self, columns: Columns, agent: AgentIndex, lock: threading.RLock) -> None:
        self.columns = columns
        self._agent = agent
        self._lock = lock

    def count_access(self, memory_ids: list[str]) -> dict[str, int]:
        """Count one access of each memory in the index; their counts after it."""
        with self._lock:
            return self._agent.count_access(memory_ids)


class MemoryIndex:
    def __init__(
        self,
        readers: Readers,
        max_bytes: int,
        clock: Callable[[], int],
        *,
        open_reader: Callable[[], apsw.Connection] | None = None,
        codes: bool = False,
    ) -> None:
        """Loads run on the `readers` pool (a thread each) over connections of their own
        (`open_reader`, by default `readers.fresh`), closed when the load is done. With `codes`
        each agent keeps its vectors' sign codes too (handlers/vector_index.py)."""
        self._codes = codes
        self._readers = readers
        self._open_reader = open_reader or readers.fresh
        self._clock = clock
        self._max_bytes = max_bytes
        self._agents: OrderedDict[AgentKey, AgentIndex] = OrderedDict()
        self._loading: dict[AgentKey, _Load] = {}
        # Bumped when another process wrote the file: loads begun before must not be kept.
        self._generation = 0
        # Private: a caller holding it while waiting for a load would deadlock with that load.
        self._lock = threading.RLock()
        # The writer connection's `data_version` at its last commit (see `after_commit`).
        self._data_version: int | None = None
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
            return Snapshot(found.columns(), found, self._lock)

    def agent(self, key: AgentKey) -> AgentIndex:
        """The agent's index, loaded from SQLite if absent or too fragmented; one load per agent
        at a time, which other callers needing that agent wait for (so call it from a thread
        that may block)."""
        with self._lock:
            found = self._agents.get(key)
            if found is not None and found.dead <= max(1024, len(found.row_of)):
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
            return self.agent(key)  # it failed, or another process wrote meanwhile
        try:
            pending.result = self._load(key, pending)
            return pending.result
        finally:
            with self._lock:
                del self._loading[key]
            pending.done.set()

    def _load(self, key: AgentKey, pending: _Load) -> AgentIndex:
        loaded = AgentIndex(anchor_ms=self._clock(), codes=self._codes)
        conn = self._open_reader()
        try:
            # One statement, one read snapshot, begun after `pending` was registered.
            loaded.load(
                conn.execute(
                    f"{ROW_SQL} WHERE tenant = ? AND agent_id = ?{RECALLABLE} ORDER BY rowid",
                    key,
                )
            )
            with self._lock:
                # Once per memory: the replay reads its row as it is now, whatever the changes.
                for memory_id, op in dict(pending.changes).items():
                    _apply_one(conn, key, loaded, memory_id, op)
                if pending.generation == self._generation:
                    self._agents[key] = loaded
                    self._shrink(keep=key)
            return loaded
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

    def forget_all(self) -> None:
        """Drop every agent (they reload on demand), and keep no load begun before."""
        with self._lock:
            self._agents.clear()
            self._generation += 1

    def loaded_agents(self, tenant: str | None = None) -> int:
        """Agents loaded now: of every tenant, or (for a tenant's memory::stats) of one. Without
        the lock, as the event loop calls it: copying the keys is one atomic step."""
        if tenant is None:
            return len(self._agents)
        return sum(1 for loaded, _ in list(self._agents) if loaded == tenant)

    def attach(self, conn: apsw.Connection) -> None:
        """Log the changes of the writer's connection for `after_commit`, and note which
        version of the file it reads now."""
        install_change_log(conn)
        self._data_version = int(conn.pragma("data_version"))

    def after_commit(self, conn: apsw.Connection) -> None:
        """On the writer thread after each commit: apply this worker's changes, and drop the
        index if another process wrote to the file (its changes are not in our change log)."""
        try:
            self.apply(conn, take_changes(conn))
            version = int(conn.pragma("data_version"))
            if version != self._data_version:
                self._data_version = version
                self.forget_all()
        except Exception as error:
            log.error("index.catch_up_failed", error=type(error).__name__)
            self.forget_all()

    def apply(self, conn: apsw.Connection, changes: Iterable[tuple[AgentKey, str, str]]) -> None:
        """Apply ((tenant, agent), memory id, op) changes committed on conn to the loaded agents,
        and keep them for the agents being loaded."""
        with self._lock:
            for key, memory_id, op in changes:
                pending = self._loading.get(key)
                if pending is not None:
                    pending.changes.append((memory_id, op))
                index = self._agents.get(key)
                if index is not None:
                    _apply_one(conn, key, index, memory_id, op)


def _apply_one(
    conn: apsw.Connection, key: AgentKey, index: AgentIndex, memory_id: str, op: str
) -> None:
    """Bring one memory of the agent's index to its row as conn now reads it (absent, or no
    longer this tenant's agent's: removed), so that an index never holds another's memory."""
    if op == "delete":
        index.remove(memory_id)
        return
    row = conn.execute(
        ROW_SQL + f" WHERE id = ? AND tenant = ? AND agent_id = ?{RECALLABLE}", (memory_id, *key)
    ).fetchone()
    if row is None:
        index.remove(memory_id)
    else:
        index.upsert(row)


def install_change_log(conn: apsw.Connection) -> None:
    conn.execute(CHANGE_LOG)


def take_changes(conn: apsw.Connection) -> list[tuple[AgentKey, str, str]]:
    """The changes logged since the last call, in order; clears the log."""
    changes = [((r[0], r[1]), r[2], r[3]) for r in conn.execute("SELECT * FROM index_changes")]
    if changes:
        conn.execute("DELETE FROM index_changes")
    return changes
