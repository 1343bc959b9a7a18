"""memory::store: dedup by content hash per agent, estimate importance, keep the session list."""

from __future__ import annotations

import hashlib
import uuid
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


def description_of(req: StoreRequest) -> Description:
    return Description(
        summary=None if req.summary is UNSET else req.summary,
        category=req.category,
        sensitivity=req.sensitivity,
        recall_policy=req.recall_policy,
        tags=tags_column(req.tags),
    )


class Placed(NamedTuple):
    """Where a memory's content went: its id, whether the agent had the content already, and
    whether that memory was forgotten and so is restored."""

    id: str
    deduplicated: bool
    restored: bool


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
    digest = content_hash(content)
    row = conn.execute(
        "SELECT id, role, timestamp, forgotten_at FROM memories "
        "WHERE tenant = ? AND agent_id = ? AND hash = ?",
        (*agent, digest),
    ).fetchone()
    restored = False
    if row is not None:
        memory_id, ref_role, ref_timestamp = str(row[0]), str(row[1]), int(row[2])
        deduplicated = True
        restored = row[3] is not None
        if restored:  # storing forgotten content again restores it (section 12)
            conn.execute("UPDATE memories SET forgotten_at = NULL WHERE id = ?", (memory_id,))
    else:
        memory_id, ref_role, ref_timestamp = memory_id or str(uuid.uuid4()), role, timestamp
        deduplicated = False
        described = described or Description()
        conn.execute(
            "INSERT INTO memories (id, tenant, agent_id, role, content, hash, session_id, "
            "importance, confidence, access_count, last_accessed, timestamp, metadata, "
            "embedding, embedding_model, created_at, summary, category, sensitivity, "
            "recall_policy, tags, flags) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1.0, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                memory_id,
                *agent,
                role,
                content,
                digest,
                session_id,
                importance,
                timestamp,
                timestamp,
                None if metadata is None else msgspec.json.encode(metadata).decode(),
                None if embedding is None else embedding[1].astype(np.float32).tobytes(),
                None if embedding is None else embedding[0],
                now,
                described.summary,
                described.category,
                described.sensitivity,
                described.recall_policy,
                described.tags,
                described.flags,
            ),
        )
    if session_id is not None and append_to_session:
        append_message(conn, agent, session_id, (memory_id, ref_role, ref_timestamp), now)
    return Placed(memory_id, deduplicated, restored)


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
    described = msgspec.structs.replace(
        description_of(req), flags=msgspec.json.encode(flags).decode() if flags else None
    )
    agent = agent_of(req)
    session_id = None if req.session_id is UNSET else req.session_id
    timestamp = now if req.timestamp is UNSET else req.timestamp
    placed = insert_memory(
        conn,
        agent=agent,
        content=req.content,
        role=req.role,
        now=now,
        timestamp=timestamp,
        importance=(
            estimate_importance(req.content, req.role)
            if req.importance is UNSET
            else req.importance
        ),
        session_id=session_id,
        metadata=None if req.metadata is UNSET else req.metadata,
        embedding=embedding,
        append_to_session=False,  # below, to know whether it joined the list
        described=described,
        memory_id=memory_id,
    )
    position = None
    if session_id is not None:
        ref: tuple[str, str, int] = (placed.id, req.role, timestamp)
        if placed.deduplicated:  # the list names the memory as it is: its role and time
            held: Any = conn.execute(
                "SELECT role, timestamp FROM memories WHERE id = ?", (placed.id,)
            ).fetchone()
            ref = (placed.id, str(held[0]), int(held[1]))
        position = append_message(conn, agent, session_id, ref, now, topic_id)
    reply = StoreReply(
        id=placed.id, stored=not placed.deduplicated, deduplicated=placed.deduplicated
    )
    return StorePlaced(reply, placed.restored, position is not None, position)
