"""A memory's life by id (contract section 12): get, forget, unforget, delete and erase.

Every trigger here is per agent: an id of another agent (or another tenant's agent of the same
name) is reported `missing`, exactly like an id that never existed, so a caller learns nothing
about memories that are not its agent's. The writes are idempotent, so that a redelivered
ingest message does no harm: forgetting what is forgotten, or restoring what is not, counts it
and changes nothing, and the audit records only what changed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import apsw
import msgspec

from handlers.audit import Change
from handlers.facts.beliefs import memories_gone
from handlers.session_refs import remove_memories
from handlers.tables.registered import TABLES
from handlers.tables.table import Skip, Table
from handlers.taxonomy import string_list
from handlers.topics.upkeep import refresh_topics, topics_of_memories
from schema.base import Agent, agent_of
from schema.errors import InvalidRequest
from schema.life import (
    DeleteRequest,
    EraseReply,
    EraseRequest,
    GetReply,
    GetRequest,
    IdsRequest,
    MemoryOut,
)

MEMORY_COLUMNS = (
    "id, role, content, timestamp, session_id, importance, confidence, access_count, "
    "last_accessed, metadata, pinned, forgotten_at, summary, category, sensitivity, "
    "recall_policy, tags, flags"
)


def memory_out(row: Any) -> MemoryOut:
    (memory_id, role, content, timestamp, session_id, importance, confidence, access_count,
     last_accessed, metadata, pinned, forgotten_at, summary, category, sensitivity,
     recall_policy, tags, flags) = row  # fmt: skip
    return MemoryOut(
        id=str(memory_id),
        role=str(role),
        content=str(content),
        timestamp=int(timestamp),
        session_id=None if session_id is None else str(session_id),
        importance=float(importance),
        confidence=float(confidence),
        access_count=int(access_count),
        last_accessed=int(last_accessed),
        metadata=None if metadata is None else msgspec.json.decode(str(metadata)),
        pinned=bool(pinned),
        forgotten_at=None if forgotten_at is None else int(forgotten_at),
        summary=None if summary is None else str(summary),
        category=str(category),
        sensitivity=str(sensitivity),
        recall_policy=str(recall_policy),
        tags=string_list(tags),
        flags=string_list(flags),
    )


def _rows(conn: apsw.Connection, agent: Agent, ids: list[str]) -> dict[str, Any]:
    """The agent's memories among ids, by id."""
    return {
        str(row[0]): row
        for row in conn.execute(
            # `+tenant`, `+agent_id`: look the ids up in their index, not by walking the agent.
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE +tenant = ? AND +agent_id = ? "
            "AND id IN (SELECT value FROM json_each(?))",
            (*agent, json.dumps(ids)),
        )
    }


def _asked(req: IdsRequest | GetRequest) -> list[str]:
    return list(dict.fromkeys(req.ids))


def get_memories(conn: apsw.Connection, req: GetRequest, *, now: int) -> GetReply:
    """A read with no access update: `now` is the registry's calling convention, unused."""
    asked = _asked(req)
    found = _rows(conn, agent_of(req), asked)
    return GetReply(
        memories=[memory_out(found[i]) for i in asked if i in found],
        missing=[i for i in asked if i not in found],
    )


class Marked(msgspec.Struct, frozen=True):
    """A forget or unforget decided: the agent's ids asked for, those it changes, the rest."""

    agent: Agent
    present: list[str]
    changed: list[str]
    missing: list[str]
    at: int


def plan_forget(conn: apsw.Connection, req: IdsRequest, *, now: int, forget: bool) -> Marked:
    asked = _asked(req)
    agent = agent_of(req)
    found = _rows(conn, agent, asked)
    changed = [i for i in asked if i in found and (found[i][11] is None) == forget]
    present = [i for i in asked if i in found]
    return Marked(agent, present, changed, [i for i in asked if i not in found], now)


def apply_marks(conn: apsw.Connection, plan: Marked, *, forget: bool) -> None:
    conn.executemany(
        "UPDATE memories SET forgotten_at = ? WHERE tenant = ? AND agent_id = ? AND id = ?",
        [(plan.at if forget else None, *plan.agent, i) for i in plan.changed],
    )
    # A forgotten message's text leaves its topics' title, summary and open loops (section 21).
    refresh_topics(conn, plan.agent, topics_of_memories(conn, plan.agent, plan.changed))


class Deletion(msgspec.Struct, frozen=True):
    """A delete decided: the agent's memories to remove, and the ids asked that are not its."""

    agent: Agent
    ids: list[str]
    missing: list[str]


def plan_delete(conn: apsw.Connection, req: DeleteRequest) -> Deletion:
    asked = _asked(req)
    agent = agent_of(req)
    found = _rows(conn, agent, asked)
    return Deletion(agent, [i for i in asked if i in found], [i for i in asked if i not in found])


def apply_delete(conn: apsw.Connection, plan: Deletion) -> list[str]:
    """Remove the decided memories with their session references, as eviction removes them;
    those removed (a replay after they went removes none)."""
    gone = [
        str(row[0])
        for row in conn.executemany(
            "DELETE FROM memories WHERE tenant = ? AND agent_id = ? AND id = ? RETURNING id",
            [(*plan.agent, i) for i in plan.ids],
        )
    ]
    remove_memories(conn, plan.agent, gone)
    memories_gone(conn, plan.agent, gone)
    return gone


class Erasure(msgspec.Struct, frozen=True):
    """An erasure decided: whose."""

    agent: Agent


def plan_erase(req: EraseRequest) -> Erasure:
    if req.confirm != req.agent_id:
        raise InvalidRequest("confirm: must repeat agentId to erase it - at `$.confirm`")
    return Erasure(agent_of(req))


def apply_erase(
    conn: apsw.Connection, plan: Erasure, tables: Sequence[Table] = TABLES
) -> EraseReply:
    """Everything of the agent, table by table as each is registered (handlers/tables/): its
    audit rows, its memory switch and its state beside memories included (an erased agent is one
    that never was; the erasure's own row is recorded after it, in the same transaction). The
    reply counts what each table's registration counts it in."""
    counts = dict.fromkeys(EraseReply.__struct_fields__, 0)
    for table in tables:
        if not isinstance(table.erase, Skip):
            gone = table.erase(conn, table.name, plan.agent)
            if table.erased_as is not None:
                counts[table.erased_as] += gone
    return EraseReply(**counts)


def erase_agent(conn: apsw.Connection, req: EraseRequest, *, now: int) -> EraseReply:
    """Decide and apply in one transaction. `now`: the registry's convention, unused."""
    return apply_erase(conn, plan_erase(req))


def erase_changes(req: EraseRequest, reply: EraseReply) -> list[Change]:
    """The one audit row an erasure leaves: how much went."""
    total = reply.memories + reply.sessions + reply.entities + reply.relations + reply.kv_keys
    # Its count is the memories erased, or when there were none, everything else that went;
    # `detail` says how many keys went with them.
    detail = {"kvKeys": reply.kv_keys} if reply.kv_keys else None
    count = reply.memories or total
    return [Change(agent_of(req), count=count, detail=detail)] if total else []
