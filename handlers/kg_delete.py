"""memory::kg::delete: an entity with every relation from or to it, or single relations with
their inverse twins (handlers/kg.py stores each relation twice, A -r-> B and B -inverse:r-> A).

Counts are of relations as added, not of stored rows: a removed pair counts once, as
`relationsAdded` counts it. Deleting what does not exist is not an error.
"""

from __future__ import annotations

import apsw
import msgspec
from msgspec import UNSET

from handlers.audit import Change
from handlers.kg import INVERSE, inverse_of
from schema.base import Agent, agent_of
from schema.errors import InvalidRequest
from schema.life import KgDeleteReply, KgDeleteRequest

Edge = tuple[str, str, str]  # (source, type, target), one stored row


class KgDeletion(msgspec.Struct, frozen=True):
    """A delete decided: the stored relation rows to remove, the entity (if one is named and
    exists) and the reply's counts."""

    agent: Agent
    edges: list[Edge]
    entity: str | None
    relations: int


def plan_kg_delete(conn: apsw.Connection, req: KgDeleteRequest) -> KgDeletion:
    if (req.entity_id is UNSET) == (req.relations is UNSET):
        raise InvalidRequest(
            "kg::delete takes either `entityId` or `relations`, not both and not neither "
            "- at `$.entityId`"
        )
    agent = agent_of(req)
    if req.entity_id is not UNSET:
        edges = _edges(conn, agent, "source = ? OR target = ?", (req.entity_id, req.entity_id))
        found = conn.execute(
            "SELECT 1 FROM kg_entities WHERE tenant = ? AND agent_id = ? AND id = ?",
            (*agent, req.entity_id),
        ).fetchone()
        entity = req.entity_id if found is not None else None
        return KgDeletion(agent, edges, entity, count_as_added([t for _, t, _ in edges]))
    assert req.relations is not UNSET
    edges, removed = [], 0
    for relation in req.relations:
        pair = _edges(
            conn,
            agent,
            "(source = ? AND type = ? AND target = ?) OR (source = ? AND type = ? AND target = ?)",
            (relation.source, relation.type, relation.target,
             relation.target, inverse_of(relation.type), relation.source),
        )  # fmt: skip
        fresh = [edge for edge in pair if edge not in edges]
        edges += fresh
        removed += 1 if fresh else 0
    return KgDeletion(agent, edges, None, removed)


def apply_kg_delete(conn: apsw.Connection, plan: KgDeletion) -> KgDeleteReply:
    conn.executemany(
        "DELETE FROM kg_relations WHERE tenant = ? AND agent_id = ? AND source = ? AND type = ? "
        "AND target = ?",
        [(*plan.agent, *edge) for edge in plan.edges],
    )
    if plan.entity is not None:
        conn.execute(
            "DELETE FROM kg_entities WHERE tenant = ? AND agent_id = ? AND id = ?",
            (*plan.agent, plan.entity),
        )
    return KgDeleteReply(entities=int(plan.entity is not None), relations=plan.relations)


def kg_delete(conn: apsw.Connection, req: KgDeleteRequest, *, now: int) -> KgDeleteReply:
    """Decide and apply in one transaction. `now`: the registry's convention, unused."""
    return apply_kg_delete(conn, plan_kg_delete(conn, req))


def _edges(conn: apsw.Connection, agent: Agent, where: str, params: tuple[str, ...]) -> list[Edge]:
    """The agent's relation rows matching `where`."""
    return [
        (str(row[0]), str(row[1]), str(row[2]))
        for row in conn.execute(
            "SELECT source, type, target FROM kg_relations WHERE tenant = ? AND agent_id = ? "
            f"AND ({where}) ORDER BY seq",
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
