"""memory::update: correct one memory (contract section 12).

New content is a new memory as far as matching goes: a new hash, keywords and vector (the worker
embeds it before the writer applies the change). Content another memory of the agent already
has is refused with 409 naming that memory, so that dedup keeps holding; a forgotten memory is
not updated (404): restore it first.
"""

from __future__ import annotations

from typing import Any

import apsw
import msgspec
import numpy as np
from msgspec import UNSET

from handlers.life import MEMORY_COLUMNS, memory_out
from handlers.placing import Embedding, content_hash
from handlers.store import check_store
from handlers.taxonomy import check_summary, tags_column
from schema.base import Agent, agent_of
from schema.errors import Conflict, InvalidRequest, NotFound
from schema.life import UpdateReply, UpdateRequest
from schema.memory import StoreRequest

FIELDS = (
    "content", "importance", "metadata", "pinned", "summary", "category", "sensitivity",
    "recall_policy", "tags",
)  # fmt: skip


def check_update(req: UpdateRequest, max_content_bytes: int) -> None:
    """At least one field, and content, metadata and summary within the limits a store has."""
    if all(getattr(req, field) is UNSET for field in FIELDS):
        raise InvalidRequest(
            "an update changes at least one of content, importance, metadata, pinned, summary, "
            "category, sensitivity, recallPolicy, tags - at `$`"
        )
    check_summary(req.summary, clears=True)
    if req.content is not UNSET or req.metadata is not UNSET:
        as_store = StoreRequest(
            agent_id=req.agent_id,
            content="x" if req.content is UNSET else req.content,
            metadata=req.metadata,
        )
        check_store(as_store, max_content_bytes)


class Correction(msgspec.Struct, frozen=True):
    """An update decided: the memory, the columns it gets, and with new content its vector
    (typed apart from the columns, so that it keeps its bytes in any encoding of the decision)."""

    agent: Agent
    id: str
    columns: dict[str, Any]
    vector: bytes | None = None
    model: str | None = None


def plan_update(
    conn: apsw.Connection, req: UpdateRequest, *, embedding: Embedding | None = None
) -> Correction:
    agent = agent_of(req)
    row = conn.execute(
        "SELECT forgotten_at FROM memories WHERE tenant = ? AND agent_id = ? AND id = ?",
        (*agent, req.id),
    ).fetchone()
    if row is None or row[0] is not None:
        state = "not found" if row is None else "forgotten (unforget it first)"
        raise NotFound(f"memory `{req.id}` of agent `{req.agent_id}` {state} - at `$.id`")
    columns: dict[str, Any] = {}
    vector = None
    if req.content is not UNSET:
        digest = content_hash(req.content)
        clash = conn.execute(
            "SELECT id FROM memories WHERE tenant = ? AND agent_id = ? AND hash = ? AND id != ?",
            (*agent, digest, req.id),
        ).fetchone()
        if clash is not None:
            raise Conflict(f"memory `{clash[0]}` of the agent has this content - at `$.content`")
        columns |= {"content": req.content, "hash": digest}
        if embedding is not None:
            vector = embedding[1].astype(np.float32).tobytes()
    if req.importance is not UNSET:
        columns["importance"] = req.importance
    if req.metadata is not UNSET:
        columns["metadata"] = msgspec.json.encode(req.metadata).decode()
    if req.pinned is not UNSET:
        columns["pinned"] = int(req.pinned)
    if req.summary is not UNSET:
        columns["summary"] = req.summary or None
    for field in ("category", "sensitivity", "recall_policy"):
        if getattr(req, field) is not UNSET:
            columns[field] = getattr(req, field)
    if req.tags is not UNSET:
        columns["tags"] = tags_column(req.tags)
    model = None if vector is None or embedding is None else embedding[0]
    return Correction(agent, req.id, columns, vector, model)


def apply_update(conn: apsw.Connection, plan: Correction) -> UpdateReply:
    columns = dict(plan.columns)
    if "content" in columns:  # new content: its vector, or none until the backfill gives one
        columns |= {"embedding": plan.vector, "embedding_model": plan.model}
    sets = ", ".join(f"{column} = ?" for column in columns)
    conn.execute(
        f"UPDATE memories SET {sets} WHERE tenant = ? AND agent_id = ? AND id = ?",
        (*columns.values(), *plan.agent, plan.id),
    )
    [updated] = conn.execute(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ?", (plan.id,)
    ).fetchall()
    return UpdateReply(memory=memory_out(updated))
