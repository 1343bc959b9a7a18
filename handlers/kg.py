"""memory::kg::add and memory::kg::query: a per-agent knowledge graph.

Every relation is stored with its `inverse:` twin, so a traversal over outgoing relations
reaches both directions. The traversal is breadth-first with one query per level, so a node is
reported at the depth it is first reached, whatever order the edges were added in.
"""

from __future__ import annotations

import json
from typing import Any

import apsw
import msgspec
from msgspec import UNSET

from schema.base import Agent, agent_of
from schema.errors import InvalidRequest, PayloadTooLarge
from schema.kg import EntityOut, KgAddReply, KgAddRequest, KgQueryReply, KgQueryRequest, RelationOut
from schema.limits import check_nesting

MAX_RELATIONS = 1000
MAX_PROPERTIES_BYTES = 64 * 1024
INVERSE = "inverse:"


def kg_add(conn: apsw.Connection, req: KgAddRequest, *, now: int) -> KgAddReply:
    """Create or replace the entity; add each new relation and its inverse.

    A relation whose type already starts with `inverse:` is stored as given, and its twin is
    the plain type (so re-adding either direction records nothing new).
    """
    entity = req.entity
    agent = agent_of(req)
    relations = [] if entity.relations is UNSET else entity.relations
    if len(relations) > MAX_RELATIONS:
        raise InvalidRequest(
            f"{len(relations)} relations; at most {MAX_RELATIONS} per call "
            "(at `$.entity.relations`)"
        )
    properties: dict[str, Any] = {} if entity.properties is UNSET else entity.properties
    check_nesting(properties, "$.entity.properties")
    encoded = msgspec.json.encode(properties)
    if len(encoded) > MAX_PROPERTIES_BYTES:
        raise PayloadTooLarge(
            f"properties are {len(encoded)} bytes as compact JSON, more than the limit of "
            f"{MAX_PROPERTIES_BYTES} (at `$.entity.properties`)"
        )
    conn.execute(
        "INSERT INTO kg_entities (tenant, agent_id, id, type, properties) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (tenant, agent_id, id) DO UPDATE SET type = excluded.type, "
        "properties = excluded.properties",
        (*agent, entity.id, None if entity.type is UNSET else entity.type, encoded.decode()),
    )
    added = 0
    for relation in relations:
        conn.execute(
            "INSERT OR IGNORE INTO kg_entities (tenant, agent_id, id, type, properties) "
            "VALUES (?, ?, ?, NULL, '{}')",
            (*agent, relation.target),
        )
        conn.execute(
            "INSERT OR IGNORE INTO kg_relations (tenant, agent_id, source, type, target) "
            "VALUES (?, ?, ?, ?, ?)",
            (*agent, entity.id, relation.type, relation.target),
        )
        added += conn.changes()
        conn.execute(
            "INSERT OR IGNORE INTO kg_relations (tenant, agent_id, source, type, target) "
            "VALUES (?, ?, ?, ?, ?)",
            (*agent, relation.target, inverse_of(relation.type), entity.id),
        )
    return KgAddReply(stored=True, id=entity.id, relations_added=added)


def inverse_of(relation_type: str) -> str:
    if relation_type.startswith(INVERSE) and len(relation_type) > len(INVERSE):
        return relation_type[len(INVERSE) :]
    return INVERSE + relation_type


def _outgoing(
    conn: apsw.Connection, agent: Agent, sources: list[str]
) -> dict[str, list[tuple[str, str]]]:
    """Each source's (target, type) relations in the order they were added: one query."""
    found: dict[str, list[tuple[str, str]]] = {source: [] for source in sources}
    for source, target, kind in conn.execute(
        "SELECT source, target, type FROM kg_relations WHERE tenant = ? AND agent_id = ? "
        "AND source IN (SELECT value FROM json_each(?)) ORDER BY seq",
        (*agent, json.dumps(sources)),
    ):
        found[source].append((target, kind))
    return found


def kg_query(conn: apsw.Connection, req: KgQueryRequest, *, now: int) -> KgQueryReply:
    """A read: `now` is the registry's calling convention, unused (a query does not age)."""
    agent = agent_of(req)
    start = conn.execute(
        "SELECT 1 FROM kg_entities WHERE tenant = ? AND agent_id = ? AND id = ?",
        (*agent, req.entity_id),
    ).fetchone()
    if start is None:
        return KgQueryReply(entities=[], truncated=False)
    discovered: list[tuple[str, int]] = [(req.entity_id, 0)]
    seen = {req.entity_id}
    frontier = [req.entity_id]
    truncated = False
    relations: dict[str, list[tuple[str, str]]] = {}
    for depth in range(1, req.depth + 1):
        if not frontier or truncated:
            break
        outgoing = _outgoing(conn, agent, frontier)
        relations.update(outgoing)
        next_frontier = []
        for parent in frontier:
            for target, _ in outgoing[parent]:
                if target in seen:
                    continue
                if len(discovered) == req.limit:
                    truncated = True
                    break
                seen.add(target)
                discovered.append((target, depth))
                next_frontier.append(target)
            if truncated:
                break
        frontier = next_frontier
    missing = [entity_id for entity_id, _ in discovered if entity_id not in relations]
    for chunk_start in range(0, len(missing), 5000):
        relations.update(_outgoing(conn, agent, missing[chunk_start : chunk_start + 5000]))
    details = {
        row[0]: (row[1], row[2])
        for row in conn.execute(
            "SELECT id, type, properties FROM kg_entities WHERE tenant = ? AND agent_id = ? "
            "AND id IN (SELECT value FROM json_each(?))",
            (*agent, json.dumps([entity_id for entity_id, _ in discovered])),
        )
    }
    entities = []
    for entity_id, depth in discovered:
        kind, properties = details.get(entity_id, (None, "{}"))
        entities.append(
            EntityOut(
                id=entity_id,
                type=kind,
                properties=msgspec.json.decode(properties),
                relations=[RelationOut(target=t, type=k) for t, k in relations[entity_id]],
                depth=depth,
            )
        )
    return KgQueryReply(entities=entities, truncated=truncated)
