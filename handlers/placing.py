"""Where a memory's content goes as it is stored: a new memory, a duplicate of one the agent has
(dedup by the content's hash per agent), or a forgotten one that storing restores. Shared by
every write that makes memories (store, a canonical append, compaction, repair): each memory is
written the same way, and a batch of them by the same few statements as one.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any, NamedTuple

import apsw
import msgspec
import numpy as np

from schema.base import Agent

Embedding = tuple[str, np.ndarray[Any, np.dtype[np.float32]]]


def new_memory_id(now: int) -> str:
    """A new memory's id: a UUID of version 7 (RFC 9562), whose first 48 bits are `now` in
    milliseconds and the rest random. Memories stored one after another get ids next to each
    other in the id's index; a random uuid4 put each new id on a page of its own, which each
    commit wrote to the WAL again (issue 33: a fifth of the writer's time per store)."""
    rand = random.getrandbits(80)  # unique, not secret: a memory is reached through its agent
    value = (now & _MS) << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64 | 0x2 << 62 | rand & _B
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


_MS = (1 << 48) - 1
_B = (1 << 62) - 1


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


class Description(msgspec.Struct, frozen=True):
    """What a new memory says about itself beyond its content: its summary and taxonomy as
    their columns hold them (`tags`: a JSON array, or NULL)."""

    summary: str | None = None
    category: str = "note"
    sensitivity: str = "internal"
    recall_policy: str = "auto"
    tags: str | None = None
    flags: str | None = None  # what the sanitiser found: a JSON array, or NULL


class Placed(NamedTuple):
    """Where a memory's content went: its id, whether the agent had the content already, and
    whether that memory was forgotten and so is restored."""

    id: str
    deduplicated: bool
    restored: bool


class NewMemory(NamedTuple):
    """A memory to place, as a write decided it: its content, who holds it, and its columns."""

    agent: Agent
    content: str
    role: str
    timestamp: int
    importance: float
    memory_id: str  # the id it gets unless the agent has its content already
    created_at: int
    session_id: str | None = None
    metadata: dict[str, Any] | None = None
    embedding: Embedding | None = None
    described: Description = Description()


class Held(NamedTuple):
    """A memory as the agent holds it, as far as placing reads it."""

    id: str
    role: str
    timestamp: int
    forgotten: bool


# A new memory's row, bound (rows read from JSON by SQLite cost more: it parsed a row's JSON
# again for each column).
_INSERT = (
    "INSERT INTO memories (id, tenant, agent_id, role, content, hash, session_id, importance, "
    "confidence, access_count, last_accessed, timestamp, metadata, embedding, embedding_model, "
    "created_at, summary, category, sensitivity, recall_policy, tags, flags) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1.0, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_HELD = (
    "SELECT m.tenant, m.agent_id, m.hash, m.id, m.role, m.timestamp, m.forgotten_at "
    "FROM json_each(?) AS k JOIN memories AS m "
    "ON m.tenant = k.value->>0 AND m.agent_id = k.value->>1 AND m.hash = k.value->>2"
)
_JSON = msgspec.json.Encoder()


def _row(new: NewMemory, digest: str) -> list[Any]:
    d, vector = new.described, new.embedding
    return [
        new.memory_id,
        *new.agent,
        new.role,
        new.content,
        digest,
        new.session_id,
        new.importance,
        new.timestamp,
        new.timestamp,
        None if new.metadata is None else _JSON.encode(new.metadata).decode(),
        None if vector is None else vector[1].astype(np.float32).tobytes(),
        None if vector is None else vector[0],
        new.created_at,
        d.summary,
        d.category,
        d.sensitivity,
        d.recall_policy,
        d.tags,
        d.flags,
    ]


def placed_with_refs(conn: apsw.Connection, news: Sequence[NewMemory]) -> list[tuple[Placed, Held]]:
    """place_memories, each with the memory as the agent holds it (its role and time), which a
    session's list names."""
    digests = [content_hash(new.content) for new in news]
    keys = _JSON.encode([[*new.agent, digest] for new, digest in zip(news, digests, strict=True)])
    held = {
        (str(t), str(a), str(h)): Held(str(i), str(role), int(at), gone is not None)
        for t, a, h, i, role, at, gone in conn.execute(_HELD, (keys.decode(),))
    }
    rows: list[list[Any]] = []
    restored: list[str] = []
    placed = []
    for new, digest in zip(news, digests, strict=True):
        key = (*new.agent, digest)
        found = held.get(key)
        if found is None:
            held[key] = found = Held(new.memory_id, new.role, new.timestamp, False)
            rows.append(_row(new, digest))
            placed.append((Placed(new.memory_id, False, False), found))
            continue
        if found.forgotten:  # storing forgotten content again restores it (section 12)
            restored.append(found.id)
            held[key] = found._replace(forgotten=False)
        placed.append((Placed(found.id, True, found.forgotten), found))
    if restored:
        conn.execute(
            "UPDATE memories SET forgotten_at = NULL WHERE id IN (SELECT value FROM json_each(?))",
            (_JSON.encode(restored).decode(),),
        )
    if rows:
        conn.executemany(_INSERT, rows)
    return placed


def place_memories(conn: apsw.Connection, news: Sequence[NewMemory]) -> list[Placed]:
    """Each memory stored unless its agent has its content already (a later one with an
    earlier one's content is that one's duplicate), as insert_memory would one after the other,
    by three statements whatever their number: one look-up by the contents' hashes, one INSERT
    stepped for each new one and one UPDATE of the forgotten ones that storing restores.
    Issue 33: four statements per store each let go of the GIL on the writer thread, and each
    took it back from the event loop only once the loop let go of it."""
    return [placed for placed, _ in placed_with_refs(conn, news)]
