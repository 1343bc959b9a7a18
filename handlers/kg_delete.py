"""memory::kg::delete: an entity with every relation from or to it, or single relations with
their inverse twins (handlers/kg.py stores each relation twice, A -r-> B and B -inverse:r-> A).

Counts are of relations as added, not of stored rows: a removed pair counts once, as
`relationsAdded` counts it. Deleting what does not exist is not an error.
"""

from __future__ import annotations

import apsw
from msgspec import UNSET

from handlers.audit import Change
from handlers.kg import INVERSE, inverse_of
from schema.base import Agent, agent_of
from schema.errors import InvalidRequest
from schema.life import KgDeleteReply, KgDeleteRequest


def kg_delete(conn: apsw.Connection, req: KgDeleteRequest, *, now: int) -> KgDeleteReply:
    """A write without a clock: `now` is the registry's calling convention, unused."""
    if (req.entity_id is UNSET) == (req.relations is UNSET):
        raise InvalidRequest(
            "kg::delete takes either `entityId` or `relations`, not both and not neither "
            "- at `$.entityId`"
        )
    agent = agent_of(req)
    if req.entity_id is not UNSET:
        return _delete_entity(conn, agent, req.entity_id)
    assert req.relations is not UNSET
    removed = 0
    for relation in req.relations:
        rows = _delete_relations(
            conn,
            agent,
            "(source = ? AND type = ? AND target = ?) OR (source = ? AND type = ? AND target = ?)",
            (relation.source, relation.type, relation.target,
             relation.target, inverse_of(relation.type), relation.source),
        )  # fmt: skip
        removed += 1 if rows else 0
    return KgDeleteReply(entities=0, relations=removed)


def _delete_entity(conn: apsw.Connection, agent: Agent, entity_id: str) -> KgDeleteReply:
    types = _delete_relations(conn, agent, "source = ? OR target = ?", (entity_id, entity_id))
    conn.execute(
        "DELETE FROM kg_entities WHERE tenant = ? AND agent_id = ? AND id = ?", (*agent, entity_id)
    )
    return KgDeleteReply(entities=conn.changes(), relations=count_as_added(types))


def _delete_relations(
    conn: apsw.Connection, agent: Agent, where: str, params: tuple[str, ...]
) -> list[str]:
    """Delete the agent's relation rows matching `where`; the types of those deleted."""
    return [
        str(row[0])
        for row in conn.execute(
            f"DELETE FROM kg_relations WHERE tenant = ? AND agent_id = ? AND ({where}) "
            "RETURNING type",
            (*agent, *params),
        )
    ]


def count_as_added(types: list[str]) -> int:
    """Relations as added, from stored rows: each pair has one row whose type is not an
    `inverse:` one (a relation added as `inverse:x` is stored beside its plain twin `x`)."""
    return sum(1 for kind in types if not kind.startswith(INVERSE))


def kg_delete_changes(req: KgDeleteRequest, reply: KgDeleteReply) -> list[Change]:
    """The audit's record of a delete that removed something: the entities named."""
    if not (reply.entities or reply.relations):
        return []
    if req.entity_id is not UNSET:
        return [Change(agent_of(req), [req.entity_id])]
    assert req.relations is not UNSET
    named = dict.fromkeys(r.source for r in req.relations)
    return [Change(agent_of(req), list(named), count=reply.relations)]
