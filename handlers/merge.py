"""memory::consolidate's `mergeThreshold`: paraphrases of one fact become one memory.

Deciding reads one agent's vectors and groups them greedily, newest first: the newest memory
not yet taken leads a group of every older one whose cosine with it reaches the threshold.
Every merged memory is that close to the memory it merges into (no chain of near-misses drifts
to another fact), and a group never mixes roles, embedding models, recall policies or
sensitivities. Similarities are computed in BLOCK x BLOCK tiles, so an agent of 100k
memories needs its vectors and a few MB more, never the n x n matrix.

The survivor is the group's newest memory (by timestamp, then by when it was stored): when a
merge is wrong it is mostly a fact restated with a change (MiniLM puts "rotates on Fridays" and
"on Mondays" at 0.93; README "memory::consolidate"), and the newer statement is the one to keep.
It keeps its id, content, timestamp (the newest), summary, metadata and taxonomy, and takes
the group's highest importance, highest confidence, latest access and summed access count. The
others are removed as eviction removes them; their places in sessions point at the survivor (or
go, where the session holds the survivor already: a memory is in a session's list once).

Applying re-checks every memory as eviction does: a memory whose content or scores changed
since the decision, that was pinned, forgotten or deleted, or whose agent was switched off, is
left out; a group whose survivor is no longer as decided is skipped. Apply reads nothing but
the rows it changes, so a decision replayed (a shard's log) gives the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import apsw
import msgspec
import numpy as np
import numpy.typing as npt
from msgspec import UNSET

from handlers.audit import MAX_IDS, Change
from handlers.evict import KEPT, scope_of
from handlers.facts.beliefs import memories_gone
from handlers.session_refs import remove_memories
from handlers.switch import SWITCHED_ON
from schema.base import Agent
from schema.memory import ConsolidateRequest

# Rows and columns of one tile of similarities: 4 MiB of float32.
BLOCK = 1024
# What merging may touch: what decay may (neither pinned nor `always`, agent switched on), not
# forgotten, and with a vector to compare.
CANDIDATE = (
    f"embedding IS NOT NULL AND embedding_model IS NOT NULL AND forgotten_at IS NULL AND {KEPT}"
    + SWITCHED_ON
)
Matrix = npt.NDArray[np.float32]
# Float32 products of unit vectors are good to about 1e-7: a threshold of 1.0 must still
# merge two identical vectors, whose computed cosine may be 0.99999994.
SLACK = 1e-6


class Member(msgspec.Struct, frozen=True, array_like=True):
    """One memory of a group, with what it was chosen by (apply merges it only unchanged)."""

    memory_id: str
    hash: str
    importance: float
    confidence: float
    timestamp: int


class Group(msgspec.Struct, frozen=True, array_like=True):
    """Memories of one agent that say one thing: the survivor, the memories merged into it,
    and the survivor's new scores (over the whole group)."""

    tenant: str
    agent_id: str
    survivor: Member
    merged: list[Member]
    importance: float
    confidence: float
    timestamp: int


class Merged(msgspec.Struct, frozen=True, array_like=True):
    """What applying one group did: the memories removed into the survivor."""

    tenant: str
    agent_id: str
    survivor: str
    removed: list[str]


def merge_agents(conn: apsw.Connection, req: ConsolidateRequest) -> list[Agent]:
    """The agents a consolidation covers that have memories merging may touch."""
    scope, params = scope_of(req)
    return [
        (str(row[0]), str(row[1]))
        for row in conn.execute(
            f"SELECT DISTINCT tenant, agent_id FROM memories WHERE {CANDIDATE}{scope} "
            "ORDER BY tenant, agent_id",
            params,
        )
    ]


# One agent's candidates by what must match within a group (role, embedding model, recall
# policy, sensitivity, vector bytes): the memories newest first, and their vectors.
Candidates = dict[tuple[str, str, str, str, int], tuple[list[Member], list[bytes]]]


def read_candidates(conn: apsw.Connection, agent: Agent) -> Candidates:
    """The read half of deciding (on a reader); the grouping needs no connection."""
    kinds: Candidates = {}
    for row in conn.execute(
        "SELECT id, hash, importance, confidence, timestamp, role, embedding_model, "
        "recall_policy, sensitivity, embedding FROM memories "
        f"WHERE tenant = ? AND agent_id = ? AND {CANDIDATE} "
        "ORDER BY timestamp DESC, created_at DESC, id DESC",
        agent,
    ):
        blob = bytes(row[9])
        key = (str(row[5]), str(row[6]), str(row[7]), str(row[8]), len(blob))
        members, blobs = kinds.setdefault(key, ([], []))
        members.append(Member(str(row[0]), str(row[1]), float(row[2]), float(row[3]), int(row[4])))
        blobs.append(blob)
    return kinds


def find_groups(agent: Agent, kinds: Candidates, threshold: float) -> list[Group]:
    """The groups of one agent at cosine >= threshold."""
    groups: list[Group] = []
    for members, blobs in kinds.values():
        if len(members) < 2 or len(blobs[0]) % 4:
            continue
        vectors = unit_rows(np.frombuffer(b"".join(blobs), dtype=np.float32), len(blobs))
        blobs.clear()  # the matrix holds them now
        for leader, taken in greedy_groups(vectors, threshold):
            groups.append(group_of(agent, members[leader], [members[i] for i in taken]))
    return groups


def plan_agent_merges(conn: apsw.Connection, agent: Agent, threshold: float) -> list[Group]:
    return find_groups(agent, read_candidates(conn, agent), threshold)


def unit_rows(flat: npt.NDArray[np.float32], count: int) -> Matrix:
    """Vectors as rows of unit length in float64's care (an imported vector need not be unit);
    a zero vector stays zero and so never reaches a threshold above 0."""
    rows = flat.reshape(count, -1).astype(np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: Matrix = (rows / norms).astype(np.float32)
    return unit


def greedy_groups(
    vectors: Matrix, threshold: float, block: int = BLOCK
) -> list[tuple[int, list[int]]]:
    """(leader, taken) by row number: each row not yet taken, in order, takes every later row
    not yet taken whose cosine with it is >= threshold. Tile by tile: a row's leaders all come
    before it, in earlier row tiles or earlier in its own tile's diagonal, so the tiles give
    the same groups as the whole matrix would."""
    count = len(vectors)
    taken = np.zeros(count, dtype=np.bool_)
    found: dict[int, list[int]] = {}
    for lo in range(0, count, block):
        hi = min(count, lo + block)
        for start in range(lo, count, block):
            end = min(count, start + block)
            close = (vectors[lo:hi] @ vectors[start:end].T) >= threshold - SLACK
            if start == lo:  # the diagonal tile: later rows only
                close &= np.triu(np.ones_like(close), k=1)
            close &= ~taken[start:end]
            for row in np.flatnonzero(close.any(axis=1)):
                if taken[lo + row]:
                    continue
                hits = np.flatnonzero(close[row] & ~taken[start:end]) + start
                if len(hits):
                    taken[hits] = True
                    found.setdefault(int(lo + row), []).extend(int(hit) for hit in hits)
    return sorted(found.items())


def group_of(agent: Agent, survivor: Member, merged: list[Member]) -> Group:
    everyone = [survivor, *merged]
    return Group(
        *agent,
        survivor=survivor,
        merged=merged,
        importance=max(member.importance for member in everyone),
        confidence=max(member.confidence for member in everyone),
        timestamp=max(member.timestamp for member in everyone),
    )


_UNCHANGED = (
    "SELECT access_count, last_accessed FROM memories WHERE id = ? AND tenant = ? "
    "AND agent_id = ? AND hash = ? AND importance = ? AND confidence = ? AND timestamp = ? "
    f"AND {CANDIDATE}"
)
# Without INDEXED BY, SQLite plans on the primary key's agent prefix (see session_refs.py).
_REPOINT = (
    "UPDATE session_messages INDEXED BY session_messages_by_memory SET memory_id = ? "
    "WHERE tenant = ? AND agent_id = ? AND memory_id = ? AND session_id NOT IN "
    "(SELECT session_id FROM session_messages INDEXED BY session_messages_by_memory "
    "WHERE tenant = ? AND agent_id = ? AND memory_id = ?)"
)


def _accesses(conn: apsw.Connection, agent: Agent, member: Member) -> tuple[int, int] | None:
    """(access count, last accessed) of a memory still as decided and still for merging."""
    key = (member.memory_id, *agent, member.hash, member.importance, member.confidence)
    row = conn.execute(_UNCHANGED, (*key, member.timestamp)).fetchone()
    return None if row is None else (int(str(row[0])), int(str(row[1])))


def apply_merges(conn: apsw.Connection, groups: Sequence[Group]) -> list[Merged]:
    """Merge each group whose survivor is as decided, with those of its members that are. One
    statement per memory, never an IN list: a group may hold thousands."""
    done = []
    for group in groups:
        agent = (group.tenant, group.agent_id)
        found = {m.memory_id: _accesses(conn, agent, m) for m in (group.survivor, *group.merged)}
        present = [member for member in group.merged if found[member.memory_id] is not None]
        if not present or found[group.survivor.memory_id] is None:
            continue
        whole = len(present) == len(group.merged)
        kept = group if whole else group_of(agent, group.survivor, present)
        accesses = [access for access in found.values() if access is not None]
        survivor = group.survivor.memory_id
        removed = [member.memory_id for member in present]
        conn.execute(
            "UPDATE memories SET importance = ?, confidence = ?, timestamp = ?, "
            "access_count = ?, last_accessed = ? WHERE id = ?",
            (
                kept.importance,
                kept.confidence,
                kept.timestamp,
                sum(count for count, _ in accesses),
                max(last for _, last in accesses),
                survivor,
            ),
        )
        conn.executemany(
            _REPOINT, [(survivor, *agent, memory_id, *agent, survivor) for memory_id in removed]
        )
        remove_memories(conn, agent, removed)  # in sessions that hold the survivor already
        conn.executemany("DELETE FROM memories WHERE id = ?", [(m,) for m in removed])
        memories_gone(conn, agent, removed)
        done.append(Merged(*agent, survivor, removed))
    return done


def merged_changes(done: Sequence[Merged]) -> list[Change]:
    """The audit of a chunk: per agent, the memories removed and (for at most MAX_IDS of them)
    which survivor each went into. Ids only, never content. Named memory::consolidate outright:
    a shard replays the chunk under the write's own name (worker/triggers/chunked.py MERGE)."""
    by_agent: dict[Agent, dict[str, str]] = {}
    for merged in done:
        into = by_agent.setdefault((merged.tenant, merged.agent_id), {})
        into.update({memory_id: merged.survivor for memory_id in merged.removed})
    return [
        Change(
            agent,
            list(into),
            trigger="memory::consolidate",
            detail={"mergedInto": into} if len(into) <= MAX_IDS else {"merged": len(into)},
        )
        for agent, into in by_agent.items()
    ]


def count_removed(done: Sequence[Merged]) -> int:
    return sum(len(merged.removed) for merged in done)


def merge_all(conn: apsw.Connection, req: ConsolidateRequest) -> int:
    """Decide and apply every agent's merges at once (tests, and callers that want it all at
    once); how many memories were removed."""
    if req.merge_threshold is UNSET:
        return 0
    threshold = req.merge_threshold
    return sum(
        count_removed(apply_merges(conn, plan_agent_merges(conn, agent, threshold)))
        for agent in merge_agents(conn, req)
    )
