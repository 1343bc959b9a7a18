"""What a recall ranks on: one agent's columns, shared with the writer rather than copied (the
guarantees that sharing leaves are the class's docstring), and the handle that counts the
accesses of what the ranking returned. Made by worker/recall_index/index.py under its lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import apsw

from handlers.recall.columns import Columns
from worker.recall_index.agent_index import AgentIndex, AgentKey


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
      overwritten), so its score may be that of neither version, and so may the runs around
      it (handlers/recall/runs.py), so the expanded mode may find the neighbours of memories
      near it by either version;
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

    def count_access(
        self,
        conn: apsw.Connection,
        ranked: list[tuple[str, int]],
        known: Mapping[str, int] | None = None,
    ) -> dict[str, int]:
        """Count one access of each memory in the index, given as (id, its slot in these
        columns); their counts after it. A count not held yet is read from conn first (outside
        the lock), unless `known` (counts read from conn in this transaction) has it."""
        with self._lock:
            unknown = self._agent.unknown_access(ranked)
        stored = {} if known is None else {i: known[i] for i in unknown if i in known}
        unknown = [memory_id for memory_id in unknown if memory_id not in stored]
        if unknown:
            marks = ",".join("?" * len(unknown))
            stored |= dict(
                conn.execute(
                    f"SELECT id, access_count FROM memories WHERE +tenant = ? AND +agent_id = ? "
                    f"AND id IN ({marks})",
                    (*self._key, *unknown),
                )
            )
        with self._lock:
            return self._agent.count_access(ranked, stored)
