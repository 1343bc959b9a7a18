"""Reading the permanent change log (migration 0008) that keeps the recall index in step.

The triggers on `memories` log every change of every writer of the file: this worker's, a
second worker's, an import's. The writer's connection reads what was logged since it last looked
(`take_changes`) after each commit, so a change by another process reaches the index at this
worker's next commit (at most a second later: App._watch_other_writers) instead of dropping the
whole index. A persisted snapshot of an agent records the sequence it is complete through
(`Mark`) and replays only the agent's changes since (`changes_since`).

The log is trimmed from the oldest end (`trim`); for each agent whose changes were trimmed the
newest trimmed sequence is kept, so that a snapshot older than that is known to have missed
something and is rebuilt, while a snapshot of an agent that did not change stays good however
long ago it was written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import apsw

AgentKey = tuple[str, str]
# Changes kept in the log: replaying more than this many is slower than a fresh load anyway.
KEEP = 200_000
# Rows trimmed per trim, so that one trim holds the writer for a few milliseconds only.
TRIM_BATCH = 20_000
Change = tuple[AgentKey, str, str]  # ((tenant, agent), memory id, "upsert" | "readd")


def tag_of(memory_id: str) -> str:
    """A digest of the memory id logged at a position: it tells one file's log from another's
    as well as the id, and a snapshot that records it holds nothing of a memory removed since
    (the id is never written beside the database)."""
    return hashlib.blake2b(memory_id.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Mark:
    """A position in the log: its sequence and the `tag_of` the memory logged there, which
    tells this file's log from that of another file (a restored copy) that reached the same
    number."""

    seq: int
    tag: str

    def holds(self, conn: apsw.Connection) -> bool:
        """Whether conn's log is the one this mark was taken in (still holds the same entry)."""
        if self.seq == 0:
            return True
        found = conn.execute(
            "SELECT memory_id FROM memory_changes WHERE seq = ?", (self.seq,)
        ).fetchone()
        return found is not None and tag_of(str(found[0])) == self.tag


def last_mark(conn: apsw.Connection) -> Mark:
    found = conn.execute(
        "SELECT seq, memory_id FROM memory_changes ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    return Mark(0, "") if found is None else Mark(int(found[0]), tag_of(str(found[1])))


def _op(readd: int) -> str:
    return "readd" if readd else "upsert"


class ChangeReader:
    """The writer connection's position in the log: what `take_changes` has handed out."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.mark = last_mark(conn)

    def take(self, conn: apsw.Connection) -> list[Change]:
        """The changes logged since the last call, in order. Raises LogGap when the log no
        longer reaches back to the last position (another file, or trimmed past it)."""
        rows = conn.execute(
            "SELECT seq, tenant, agent_id, memory_id, readd FROM memory_changes WHERE seq >= ? "
            "ORDER BY seq",
            (self.mark.seq,),
        ).fetchall()
        if self.mark.seq > 0 and (not rows or rows[0][0] != self.mark.seq):
            raise LogGap(f"the change log no longer holds sequence {self.mark.seq}")
        if self.mark.seq > 0:
            if tag_of(str(rows[0][3])) != self.mark.tag:
                raise LogGap("the change log is another file's")
            rows = rows[1:]
        if rows:
            self.mark = Mark(int(rows[-1][0]), tag_of(str(rows[-1][3])))  # type: ignore[arg-type]
        return [((str(t), str(a)), str(i), _op(int(r))) for _, t, a, i, r in rows]  # type: ignore[arg-type]


class LogGap(RuntimeError):
    """The log does not reach back to a position: what happened since is unknown."""


def changes_since(conn: apsw.Connection, key: AgentKey, mark: Mark) -> list[tuple[str, str]]:
    """The agent's (memory id, op) changes after `mark`; LogGap when the log cannot say (the
    mark is not in this file's log, or the agent's changes after it were trimmed)."""
    if not mark.holds(conn):
        raise LogGap("the snapshot's position is not in this file's change log")
    trimmed = conn.execute(
        "SELECT through FROM memory_changes_trimmed WHERE tenant = ? AND agent_id = ?", key
    ).fetchone()
    if trimmed is not None and int(trimmed[0]) > mark.seq:
        raise LogGap("changes of the agent after the snapshot were trimmed")
    return [
        (str(memory_id), _op(int(readd)))
        for memory_id, readd in conn.execute(
            "SELECT memory_id, readd FROM memory_changes WHERE seq > ? AND tenant = ? "
            "AND agent_id = ? ORDER BY seq",
            (mark.seq, *key),
        )
    ]


def trim(conn: apsw.Connection, keep: int = KEEP, batch: int = TRIM_BATCH) -> int:
    """Drop up to `batch` of the oldest changes beyond the newest `keep`, noting per agent the
    newest one dropped; the number dropped. Runs in a transaction of its own."""
    with conn:
        newest = conn.execute("SELECT max(seq) FROM memory_changes").get
        if newest is None:
            return 0
        below = min(int(newest) - keep, _oldest(conn) + batch)
        if below <= _oldest(conn):
            return 0
        conn.execute(
            "INSERT INTO memory_changes_trimmed (tenant, agent_id, through) "
            "SELECT tenant, agent_id, max(seq) FROM memory_changes WHERE seq < ? "
            "GROUP BY tenant, agent_id "
            "ON CONFLICT (tenant, agent_id) DO UPDATE SET through = max(through, excluded.through)",
            (below,),
        )
        conn.execute("DELETE FROM memory_changes WHERE seq < ?", (below,))
        dropped: int = conn.changes()
    return dropped


def _oldest(conn: apsw.Connection) -> int:
    found = conn.execute("SELECT min(seq) FROM memory_changes").get
    return 0 if found is None else int(found)
