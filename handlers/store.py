"""memory::store: dedup by content hash per agent, estimate importance, keep the session list."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any, NamedTuple

import apsw
import msgspec
import numpy as np
from msgspec import UNSET

from handlers.session_refs import append_message
from handlers.taxonomy import check_summary, tags_column
from schema.base import Agent, agent_of
from schema.errors import InvalidRequest, PayloadTooLarge
from schema.limits import MAX_METADATA_BYTES, check_nesting
from schema.memory import StoreReply, StoreRequest

ATTENTION_WORDS = ("error", "bug", "fix", "critical")
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


def estimate_importance(content: str, role: str) -> float:
    importance = 0.5
    if role == "assistant":
        importance += 0.1
    if len(content.encode("utf-8")) > 500:
        importance += 0.1
    lowered = content.lower()
    if any(word in lowered for word in ATTENTION_WORDS):
        importance += 0.15
    if "```" in content:
        importance += 0.1
    return min(1.0, importance)


def check_store(req: StoreRequest, max_content_bytes: int) -> None:
    """Refuse what the struct's types cannot express: blank or oversize content, metadata and
    summary."""
    if not req.content.strip():
        raise InvalidRequest("content must not be blank (at `$.content`)")
    size = len(req.content.encode("utf-8", errors="surrogatepass"))
    if size > max_content_bytes:
        raise PayloadTooLarge(
            f"content is {size} bytes, more than the limit of {max_content_bytes} (at `$.content`)"
        )
    if req.metadata is not UNSET:
        check_nesting(req.metadata, "$.metadata")
        encoded = len(msgspec.json.encode(req.metadata))
        if encoded > MAX_METADATA_BYTES:
            raise PayloadTooLarge(
                f"metadata is {encoded} bytes as compact JSON, more than the limit of "
                f"{MAX_METADATA_BYTES} (at `$.metadata`)"
            )
    check_summary(req.summary)
    if req.topic_id is not UNSET and req.session_id is UNSET:
        raise InvalidRequest("topicId names a topic of a session: give sessionId (at `$.topicId`)")


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


class _Held(NamedTuple):
    id: str
    role: str
    timestamp: int
    forgotten: bool


# The row of a new memory as place_memories' INSERT reads it from one JSON array per memory
# (its vector in hex: JSON has no bytes).
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


def _placed(conn: apsw.Connection, news: Sequence[NewMemory]) -> list[tuple[Placed, _Held]]:
    digests = [content_hash(new.content) for new in news]
    keys = _JSON.encode([[*new.agent, digest] for new, digest in zip(news, digests, strict=True)])
    held = {
        (str(t), str(a), str(h)): _Held(str(i), str(role), int(at), gone is not None)
        for t, a, h, i, role, at, gone in conn.execute(_HELD, (keys.decode(),))
    }
    rows: list[list[Any]] = []
    restored: list[str] = []
    placed = []
    for new, digest in zip(news, digests, strict=True):
        key = (*new.agent, digest)
        found = held.get(key)
        if found is None:
            held[key] = found = _Held(new.memory_id, new.role, new.timestamp, False)
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
    by three statements whatever their number: one look-up by the contents' hashes, one INSERT of
    the new ones and one UPDATE of the forgotten ones that storing restores. Issue 33: four
    statements per store each let go of the GIL on the writer thread, and each took it back
    from the event loop only once the loop let go of it."""
    return [placed for placed, _ in _placed(conn, news)]


def insert_memory(
    conn: apsw.Connection,
    *,
    agent: Agent,
    content: str,
    role: str,
    now: int,
    timestamp: int,
    importance: float,
    session_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    embedding: Embedding | None = None,
    append_to_session: bool = True,
    described: Description | None = None,
    memory_id: str | None = None,
) -> Placed:
    """Store one memory unless the agent has its content already (one look-up by the content's
    hash tells a new memory, a duplicate and a forgotten one that storing restores).
    A memory deduplicated keeps its own summary and taxonomy. `memory_id` is the id a new
    memory gets (a write's decision chose it), else a fresh one.

    Shared by store, session compaction and repair, so every memory is written the same way
    (compaction and repair place the new memory in the session's list themselves).
    """
    new = NewMemory(
        agent,
        content,
        role,
        timestamp,
        importance,
        memory_id or new_memory_id(now),
        now,
        session_id,
        metadata,
        embedding,
        described or Description(),
    )
    [(placed, held)] = _placed(conn, [new])
    if session_id is not None and append_to_session:
        append_message(conn, agent, session_id, (placed.id, held.role, held.timestamp), now)
    return placed


def store(
    conn: apsw.Connection,
    req: StoreRequest,
    *,
    now: int,
    max_content_bytes: int,
    embedding: Embedding | None = None,
) -> StoreReply:
    check_store(req, max_content_bytes)
    return write_store(conn, req, now=now, embedding=embedding)


def write_store(
    conn: apsw.Connection,
    req: StoreRequest,
    *,
    now: int,
    embedding: Embedding | None = None,
    memory_id: str | None = None,
    flags: list[str] | None = None,
) -> StoreReply:
    """A checked request's memory written (or found: dedup), with the id and flags chosen."""
    return place_store(
        conn, req, now=now, embedding=embedding, memory_id=memory_id, flags=flags
    ).reply


class StorePlaced(NamedTuple):
    reply: StoreReply
    restored: bool  # the content was a forgotten memory's, restored (audited as an unforget)
    appended: bool = False  # it joined the session's list (a duplicate too, into a new session)
    position: int | None = None  # where it joined the list (in the topic it was placed in)


def new_memory(
    req: StoreRequest,
    *,
    now: int,
    embedding: Embedding | None = None,
    memory_id: str | None = None,
    flags: list[str] | None = None,
    agent: Agent | None = None,
) -> NewMemory:
    """The memory a checked store request places, with the id and flags chosen (and its agent,
    when the caller has it)."""
    described = Description(
        summary=None if req.summary is UNSET else req.summary,
        category=req.category,
        sensitivity=req.sensitivity,
        recall_policy=req.recall_policy,
        tags=tags_column(req.tags),
        flags=_JSON.encode(flags).decode() if flags else None,
    )
    return NewMemory(
        agent=agent or agent_of(req),
        content=req.content,
        role=req.role,
        timestamp=now if req.timestamp is UNSET else req.timestamp,
        importance=(
            estimate_importance(req.content, req.role)
            if req.importance is UNSET
            else req.importance
        ),
        memory_id=memory_id or new_memory_id(now),
        created_at=now,
        session_id=None if req.session_id is UNSET else req.session_id,
        metadata=None if req.metadata is UNSET else req.metadata,
        embedding=embedding,
        described=described,
    )


def placed_reply(placed: Placed) -> StoreReply:
    return StoreReply(
        id=placed.id, stored=not placed.deduplicated, deduplicated=placed.deduplicated
    )


def place_store(
    conn: apsw.Connection,
    req: StoreRequest,
    *,
    now: int,
    embedding: Embedding | None = None,
    memory_id: str | None = None,
    flags: list[str] | None = None,
    topic_id: str | None = None,
) -> StorePlaced:
    """write_store's reply, whether it restored a forgotten memory, and whether (and where) the
    memory joined the session's list (a duplicate does when stored into a session it is not
    in), in `topic_id` when given (section 21)."""
    new = new_memory(req, now=now, embedding=embedding, memory_id=memory_id, flags=flags)
    [(placed, held)] = _placed(conn, [new])
    position = None
    if new.session_id is not None:  # the list names the memory as it is: its role and time
        ref = (placed.id, held.role, held.timestamp)
        position = append_message(conn, new.agent, new.session_id, ref, now, topic_id)
    return StorePlaced(placed_reply(placed), placed.restored, position is not None, position)
