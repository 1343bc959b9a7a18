"""memory::kg::delete: an entity goes with every relation from or to it; a relation goes with
its inverse twin; counts are of relations as added; deleting nothing is not an error."""

from __future__ import annotations

import apsw
import pytest

from handlers.kg import kg_add
from handlers.kg_delete import kg_delete
from schema.errors import InvalidRequest
from schema.kg import Entity, KgAddRequest, Relation
from schema.life import KgDeleteRequest, RelationRef
from tests.handlers.support import NOW, rows


def add(conn: apsw.Connection, entity: str, *relations: tuple[str, str], tenant: str = "") -> None:
    req = KgAddRequest(
        agent_id="a",
        entity=Entity(id=entity, relations=[Relation(target=t, type=k) for k, t in relations]),
        tenant=tenant,
    )
    with conn:
        kg_add(conn, req, now=NOW)


def delete(conn: apsw.Connection, **fields: object) -> tuple[int, int]:
    with conn:
        reply = kg_delete(conn, KgDeleteRequest(agent_id="a", **fields), now=NOW)  # type: ignore[arg-type]
    return reply.entities, reply.relations


def test_an_entity_goes_with_every_relation_from_or_to_it(conn: apsw.Connection) -> None:
    add(conn, "alice", ("knows", "bob"), ("works_at", "acme"))
    add(conn, "carol", ("knows", "alice"), ("knows", "bob"))
    assert delete(conn, entity_id="alice") == (1, 3)
    assert rows(conn, "SELECT source, type, target FROM kg_relations ORDER BY seq") == [
        ("carol", "knows", "bob"),
        ("bob", "inverse:knows", "carol"),
    ]
    assert ("alice",) not in rows(conn, "SELECT id FROM kg_entities")


def test_a_relation_goes_with_its_inverse_twin_and_counts_once(conn: apsw.Connection) -> None:
    add(conn, "alice", ("knows", "bob"), ("works_at", "acme"))
    relation = RelationRef(source="bob", type="inverse:knows", target="alice")
    assert delete(conn, relations=[relation]) == (0, 1)
    assert rows(conn, "SELECT source, type, target FROM kg_relations ORDER BY seq") == [
        ("alice", "works_at", "acme"),
        ("acme", "inverse:works_at", "alice"),
    ]
    assert len(rows(conn, "SELECT id FROM kg_entities")) == 3  # entities stay


def test_deleting_what_does_not_exist_counts_zero(conn: apsw.Connection) -> None:
    assert delete(conn, entity_id="nobody") == (0, 0)
    missing = RelationRef(source="a", type="b", target="c")
    assert delete(conn, relations=[missing]) == (0, 0)


def test_another_tenants_graph_is_untouched(conn: apsw.Connection) -> None:
    add(conn, "alice", ("knows", "bob"), tenant="T2")
    assert delete(conn, entity_id="alice") == (0, 0)
    assert len(rows(conn, "SELECT 1 FROM kg_relations WHERE tenant = 'T2'")) == 2


def test_entity_and_relations_together_or_neither_are_refused(conn: apsw.Connection) -> None:
    relation = RelationRef(source="a", type="b", target="c")
    for fields in ({}, {"entity_id": "x", "relations": [relation]}):
        with pytest.raises(InvalidRequest, match="entityId"):
            delete(conn, **fields)
