"""The knowledge graph's tables: kg_entities and kg_relations (handlers/kg.py).

A second import of the same file: entities are upserted (the file's type and properties win);
relations are added if missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apsw

from handlers.kg import INVERSE
from handlers.tables.records import Record, insert_once, json_object, json_text, staged
from handlers.tables.table import Stat, Table, Transfer, counted, delete_rows
from schema.base import DEFAULT_TENANT, Agent, StoredId, Tenant


class EntityRecord(Record, frozen=True, tag="entity"):
    agent_id: StoredId
    id: StoredId
    type: str | None
    properties: dict[str, Any]
    tenant: Tenant = DEFAULT_TENANT


class RelationRecord(Record, frozen=True, tag="relation"):
    agent_id: StoredId
    source: StoredId
    type: StoredId
    target: StoredId
    tenant: Tenant = DEFAULT_TENANT


def export_entities(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[EntityRecord]:
    entities = conn.execute(
        "SELECT id, type, properties FROM kg_entities WHERE tenant = ? AND agent_id = ? "
        "ORDER BY id",
        (tenant, agent_id),
    )
    for entity_id, entity_type, properties in entities:
        yield EntityRecord(
            tenant=tenant,
            agent_id=agent_id,
            id=entity_id,
            type=entity_type,
            properties=json_object(properties, f"properties of entity {entity_id}") or {},
        )


def stage_entity(conn: apsw.Connection, r: EntityRecord, tenant: str, line: int) -> None:
    agent = (tenant, r.agent_id)
    properties = json_text(r.properties)
    insert_once(conn, "transfer_entities", "entity", line, agent, r.id, r.type, properties)


ENTITY_UPSERT_SQL = """
INSERT INTO main.kg_entities (tenant, agent_id, id, type, properties)
SELECT tenant, agent_id, id, type, properties FROM temp.transfer_entities WHERE true ORDER BY seq
ON CONFLICT (tenant, agent_id, id) DO UPDATE SET type = excluded.type,
    properties = excluded.properties
WHERE type IS NOT excluded.type OR properties IS NOT excluded.properties
"""


def apply_entities(conn: apsw.Connection, now: int) -> dict[str, int]:
    count = staged(conn, "transfer_entities")
    conn.execute(ENTITY_UPSERT_SQL)
    written = int(conn.changes())
    return {"entities_written": written, "entities_unchanged": count - written}


KG_ENTITIES = Table(
    name="kg_entities",
    owner="agent",
    erase=delete_rows,
    erased_as="entities",
    transfer=Transfer(
        record=EntityRecord,
        export=export_entities,
        staging="CREATE TEMP TABLE transfer_entities (seq INTEGER PRIMARY KEY, tenant, agent_id, "
        "id, type, properties, UNIQUE (tenant, agent_id, id));",
        stage=stage_entity,
        apply=apply_entities,
        summary="entities {entities_written} written, {entities_unchanged} unchanged",
    ),
    stats=(
        Stat(
            key="entities",
            count=counted("SELECT count(*) FROM kg_entities WHERE {where}"),
            label="entities",
            metric="Knowledge-graph entities.",
        ),
    ),
)


def erase_relations(conn: apsw.Connection, table: str, agent: Agent) -> int:
    """Every relation of the agent; how many it had added (an inverse is the same relation)."""
    kinds = conn.execute(
        "DELETE FROM kg_relations WHERE tenant = ? AND agent_id = ? RETURNING type", agent
    ).fetchall()
    return sum(1 for (kind,) in kinds if not str(kind).startswith(INVERSE))


def export_relations(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[RelationRecord]:
    relations = conn.execute(
        "SELECT source, type, target FROM kg_relations WHERE tenant = ? AND agent_id = ? "
        "ORDER BY seq",
        (tenant, agent_id),
    )
    for source, relation_type, target in relations:
        yield RelationRecord(
            tenant=tenant, agent_id=agent_id, source=source, type=relation_type, target=target
        )


def stage_relation(conn: apsw.Connection, r: RelationRecord, tenant: str, line: int) -> None:
    conn.execute(
        "INSERT INTO temp.transfer_relations VALUES (?, ?, ?, ?, ?, ?)",
        (line, tenant, r.agent_id, r.source, r.type, r.target),
    )


def apply_relations(conn: apsw.Connection, now: int) -> dict[str, int]:
    count = staged(conn, "transfer_relations")
    conn.execute(
        "INSERT OR IGNORE INTO main.kg_relations (tenant, agent_id, source, type, target) "
        "SELECT tenant, agent_id, source, type, target FROM temp.transfer_relations ORDER BY seq"
    )
    added = int(conn.changes())
    return {"relations_added": added, "relations_present": count - added}


KG_RELATIONS = Table(
    name="kg_relations",
    owner="agent",
    erase=erase_relations,
    erased_as="relations",
    transfer=Transfer(
        record=RelationRecord,
        export=export_relations,
        staging="CREATE TEMP TABLE transfer_relations (seq INTEGER PRIMARY KEY, tenant, "
        "agent_id, source, type, target);",
        stage=stage_relation,
        apply=apply_relations,
        summary="relations {relations_added} added, {relations_present} present",
    ),
    stats=(
        Stat(
            key="relations",
            count=counted("SELECT count(*) FROM kg_relations WHERE {where}"),
            label="relations",
            metric=None,
        ),
    ),
)
