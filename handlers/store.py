"""memory::store: dedup by content hash per agent, estimate importance, keep the session list."""

from __future__ import annotations

from typing import Any, NamedTuple

import apsw
import msgspec
from msgspec import UNSET

from handlers.placing import (
    Description,
    Embedding,
    NewMemory,
    Placed,
    new_memory_id,
    placed_with_refs,
)
from handlers.session_refs import append_message
from handlers.taxonomy import check_summary, tags_column
from schema.base import Agent, agent_of
from schema.errors import InvalidRequest, PayloadTooLarge
from schema.limits import MAX_METADATA_BYTES, check_nesting
from schema.memory import StoreReply, StoreRequest

ATTENTION_WORDS = ("error", "bug", "fix", "critical")


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
    placed, _ = _place_one(conn, new, now, append=append_to_session)
    return placed


def _place_one(
    conn: apsw.Connection,
    new: NewMemory,
    now: int,
    *,
    append: bool = True,
    topic_id: str | None = None,
) -> tuple[Placed, int | None]:
    """The memory placed, then (with `append`) named in its session's list as the agent holds
    it (its role and time: a duplicate's are the memory's own), in `topic_id` when given; where
    it joined the list (None: no session, or it was there already)."""
    [(placed, held)] = placed_with_refs(conn, [new])
    if new.session_id is None or not append:
        return placed, None
    ref = (placed.id, held.role, held.timestamp)
    return placed, append_message(conn, new.agent, new.session_id, ref, now, topic_id)


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
        flags=msgspec.json.encode(flags).decode() if flags else None,
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


def placed_reply(placed: Placed, facts: list[str] | None = None) -> StoreReply:
    return StoreReply(
        id=placed.id, stored=not placed.deduplicated, deduplicated=placed.deduplicated, facts=facts
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
    placed, position = _place_one(conn, new, now, topic_id=topic_id)
    return StorePlaced(placed_reply(placed), placed.restored, position is not None, position)
