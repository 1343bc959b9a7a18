"""Where an agent's index comes from, and how it is brought up to date: its persisted snapshot
(worker/recall_index/persist.py) caught up with the change log, or its rows read from SQLite;
and the changes of an agent's memories applied to an index (`apply_many`). None of it takes
the index's lock: worker/recall_index/index.py decides when it runs and installs what it
returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import apsw
import structlog

from worker.recall_index.agent_index import ROW_SQL, AgentIndex, AgentKey, Row
from worker.recall_index.changes import LogGap, Mark, changes_since, last_mark
from worker.recall_index.frozen import Frozen, freeze
from worker.recall_index.mapping import read_at_random
from worker.recall_index.persist import Store, room

log = structlog.get_logger()
# A forgotten memory (contract section 12), or one whose recall policy is `never` (section 13),
# is never recalled: not loaded, dropped once forgotten, back once restored.
RECALLABLE = " AND forgotten_at IS NULL AND recall_policy != 'never'"
# Rows read per query when many changes are applied at once.
BATCH = 500


class Loader:
    def __init__(
        self,
        store: Store | None,
        clock: Callable[[], int],
        open_reader: Callable[[], apsw.Connection],
        *,
        codes: bool = False,
    ) -> None:
        """`codes`: agents keep their vectors' sign codes (handlers/recall/codes.py)."""
        self.store = store
        self.codes = codes
        self._clock = clock
        self._open_reader = open_reader

    def read_rows(self, key: AgentKey, conn: apsw.Connection) -> AgentIndex:
        """The agent from SQLite, in one read transaction, and the change log's position in it
        (when persisted: the position a snapshot of it is complete through)."""
        with conn:
            # Sized once: growing by doubling copied every column and vector ~17 times at 100k.
            count = conn.execute(
                "SELECT count(*) FROM memories WHERE tenant = ? AND agent_id = ?", key
            ).get
            capacity = room(int(count or 0))
            loaded = AgentIndex(anchor_ms=self._clock(), capacity=capacity, codes=self.codes)
            loaded.complete = last_mark(conn) if self.store is not None else None
            loaded.load(
                conn.execute(
                    f"{ROW_SQL} WHERE tenant = ? AND agent_id = ?{RECALLABLE} ORDER BY rowid",
                    key,
                )
            )
        if self.store is not None and self.store.maybe_has(key):
            loaded.disk_rows = len(loaded.ids)  # an older snapshot may hold any of them
        return loaded

    def open_persisted(
        self, key: AgentKey, conn: apsw.Connection
    ) -> tuple[AgentIndex, bool, int] | None:
        """The agent's snapshot caught up with the change log, whether the catch-up removed a
        row it holds, and how many changes it replayed; None (and the snapshot dropped when it
        is damaged or cannot be caught up) to load from SQLite instead."""
        if self.store is None:
            return None
        try:
            found = self.store.open(key)
            if found is None:
                return None
            loaded, mark = found
            if not self.codes:
                loaded.codes = None
            elif loaded.codes is None or set(loaded.codes) != set(loaded.vectors):
                loaded.keep_codes()  # a snapshot written without them: made from its vectors
            for matrix in loaded.vectors.values() if self.codes else ():
                read_at_random(matrix)
            loaded.rebuild_bounds()  # not persisted: one pass over three columns
            with conn:  # one read transaction: the changes and the rows they name
                changes = changes_since(conn, key, mark)
                removed = apply_many(conn, key, loaded, collapse(changes))
                loaded.complete = last_mark(conn)
            return loaded, removed, len(changes)
        except (LogGap, ValueError, OSError, KeyError, TypeError) as error:
            log.warning("index.snapshot_unusable", error=f"{type(error).__name__}: {error}")
            self.store.drop(key)
            return None

    def frozen_cold(self, key: AgentKey) -> Frozen | None:
        """An agent that is not loaded, from its snapshot caught up (on the saver's thread, on
        a connection of its own); None when it has none that can be used."""
        conn = self._open_reader()
        try:
            opened = self.open_persisted(key, conn)
            if opened is None or opened[0].complete is None:
                return None
            return freeze(key, opened[0], opened[0].complete)
        finally:
            conn.close()

    def gone_from_cold(self, conn: apsw.Connection, key: AgentKey, memory_id: str, op: str) -> bool:
        """Whether a change of an agent that is not loaded removed a row its snapshot on disk
        may hold: re-indexed, or no longer recallable as this agent's."""
        if self.store is None or not self.store.maybe_has(key):
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


def apply_many(
    conn: apsw.Connection, key: AgentKey, index: AgentIndex, changes: dict[str, str]
) -> bool:
    """Bring each of the agent's changed memories (`collapse`d) to its row as conn now reads it
    (absent, or no longer this tenant's agent's: removed), so that an index never holds
    another's memory; whether a row that may be on disk was removed (`AgentIndex.remove`).
    The rows are read in a few queries, and new memories appended without looking their ids up
    one by one: a commit of stores is most of what an agent's index follows."""
    removed = False
    for memory_id, op in changes.items():
        if op in ("delete", "readd"):
            removed |= index.remove(memory_id)
    wanted = [memory_id for memory_id, op in changes.items() if op != "delete"]
    rows: dict[str, Row] = {}
    for start in range(0, len(wanted), BATCH):
        chunk = wanted[start : start + BATCH]
        marks = ",".join("?" * len(chunk))
        # `+tenant`, `+agent_id`: by primary key, not by scanning the agent's rows.
        sql = f"{ROW_SQL} WHERE id IN ({marks}) AND +tenant = ? AND +agent_id = ?{RECALLABLE}"
        rows.update((row[0], row) for row in conn.execute(sql, (*chunk, *key)))
    new = index.ids.never_held([memory_id for memory_id in wanted if memory_id in rows])
    for memory_id in wanted:
        row = rows.get(memory_id)
        if row is None:
            removed |= index.remove(memory_id)
        else:
            index.upsert(row, new=memory_id in new)
    return removed
