"""memory::kg::add and memory::kg::query's handlers (contract section 6) on a plain connection."""

from __future__ import annotations

from typing import Any

import apsw

from handlers.kg import kg_add, kg_query
from schema.kg import Entity, KgAddReply, KgAddRequest, KgQueryReply, KgQueryRequest, Relation
from tests.handlers.support import NOW


def rel(target: str, kind: str = "knows") -> Relation:
    return Relation(target=target, type=kind)


def add(conn: apsw.Connection, agent: str, entity_id: str, **fields: Any) -> KgAddReply:
    with conn:
        reply = kg_add(
            conn, KgAddRequest(agent_id=agent, entity=Entity(id=entity_id, **fields)), now=NOW
        )
    return reply


def query(conn: apsw.Connection, agent: str, entity_id: str, **fields: Any) -> KgQueryReply:
    return kg_query(conn, KgQueryRequest(agent_id=agent, entity_id=entity_id, **fields), now=0)


def ids(reply: KgQueryReply) -> list[str]:
    return [entity.id for entity in reply.entities]


def test_add_records_each_relation_with_its_inverse_once(conn: apsw.Connection) -> None:
    reply = add(conn, "a", "alice", type="person", relations=[rel("bob")])
    assert reply == KgAddReply(stored=True, id="alice", relations_added=1)
    assert add(conn, "a", "alice", relations=[rel("bob"), rel("bob")]).relations_added == 0
    bob, alice = query(conn, "a", "bob", depth=1).entities
    assert (bob.type, bob.properties, bob.depth) == (None, {}, 0)
    assert [(r.target, r.type) for r in bob.relations] == [("alice", "inverse:knows")]
    assert [(r.target, r.type) for r in alice.relations] == [("bob", "knows")]
    assert alice.depth == 1


def test_an_inverse_typed_relation_is_the_twin_of_the_plain_one(conn: apsw.Connection) -> None:
    """Adding `inverse:knows` from bob to alice after `knows` from alice to bob adds nothing."""
    add(conn, "a", "alice", relations=[rel("bob")])
    assert add(conn, "a", "bob", relations=[rel("alice", "inverse:knows")]).relations_added == 0
    [alice] = query(conn, "a", "alice", depth=0).entities
    assert [(r.target, r.type) for r in alice.relations] == [("bob", "knows")]


def test_add_replaces_type_and_properties_and_omitted_ones_reset(conn: apsw.Connection) -> None:
    add(conn, "a", "e", type="t1", properties={"x": 1})
    [entity] = query(conn, "a", "e", depth=0).entities
    assert entity.type == "t1" and entity.properties == {"x": 1}
    add(conn, "a", "e")
    [entity] = query(conn, "a", "e", depth=0).entities
    assert entity.type is None and entity.properties == {}


def test_a_placeholder_target_becomes_real_when_added(conn: apsw.Connection) -> None:
    add(conn, "a", "a1", relations=[rel("ghost", "likes")])
    [ghost] = query(conn, "a", "ghost", depth=0).entities
    assert ghost.type is None and ghost.properties == {}
    add(conn, "a", "ghost", type="spirit", properties={"boo": True})
    [ghost] = query(conn, "a", "ghost", depth=0).entities
    assert ghost.type == "spirit" and ghost.properties == {"boo": True}
    assert [(r.target, r.type) for r in ghost.relations] == [("a1", "inverse:likes")]


def test_query_is_breadth_first_on_a_diamond_whatever_the_edge_order(
    conn: apsw.Connection,
) -> None:
    """root->a->b->d and root->d: a depth-first walk reaches d at depth 3, BFS at depth 1."""
    add(conn, "a", "b", relations=[rel("d", "next")])
    add(conn, "a", "a", relations=[rel("b", "next")])
    add(conn, "a", "root", relations=[rel("a", "next"), rel("d", "next")])
    result = query(conn, "a", "root", depth=3)
    assert {e.id: e.depth for e in result.entities} == {"root": 0, "a": 1, "d": 1, "b": 2}
    assert ids(result) == ["root", "a", "d", "b"]


def test_cycles_are_safe_and_each_entity_appears_once(conn: apsw.Connection) -> None:
    add(conn, "a", "x", relations=[rel("y")])
    add(conn, "a", "y", relations=[rel("z")])
    add(conn, "a", "z", relations=[rel("x")])
    assert sorted(ids(query(conn, "a", "x", depth=10))) == ["x", "y", "z"]


def test_depth_zero_unknown_entity_and_default_depth_of_two(conn: apsw.Connection) -> None:
    add(conn, "a", "n0", relations=[rel("n1")])
    add(conn, "a", "n1", relations=[rel("n2")])
    add(conn, "a", "n2", relations=[rel("n3")])
    assert ids(query(conn, "a", "n0", depth=0)) == ["n0"]
    assert ids(query(conn, "a", "n0")) == ["n0", "n1", "n2"]
    assert query(conn, "a", "nobody") == KgQueryReply(entities=[], truncated=False)


def test_limit_truncates_and_says_so(conn: apsw.Connection) -> None:
    add(conn, "a", "hub", relations=[rel(f"leaf{i}") for i in range(20)])
    result = query(conn, "a", "hub", depth=1, limit=5)
    assert len(result.entities) == 5 and result.truncated is True
    full = query(conn, "a", "hub", depth=1, limit=21)
    assert len(full.entities) == 21 and full.truncated is False


def test_graphs_of_two_agents_never_mix(conn: apsw.Connection) -> None:
    add(conn, "a", "shared", relations=[rel("only-a")])
    add(conn, "b", "shared", type="b-type", relations=[rel("only-b")])
    assert ids(query(conn, "a", "shared")) == ["shared", "only-a"]
    assert ids(query(conn, "b", "shared")) == ["shared", "only-b"]
    assert query(conn, "a", "shared").entities[0].type is None
    assert query(conn, "a", "only-b") == KgQueryReply(entities=[], truncated=False)


def test_a_wide_deep_graph_is_traversed_level_by_level(conn: apsw.Connection) -> None:
    """3 levels of fan-out 12: 1 + 12 + 144 + 1728 entities, each at the depth of its level."""
    level = ["r"]
    for _ in range(3):
        nxt = []
        for node in level:
            children = [f"{node}.{i}" for i in range(12)]
            add(conn, "a", node, relations=[rel(c, "child") for c in children])
            nxt.extend(children)
        level = nxt
    result = query(conn, "a", "r", depth=3, limit=10_000)
    assert len(result.entities) == 1 + 12 + 144 + 1728 and not result.truncated
    assert [e.depth for e in result.entities] == sorted(e.depth for e in result.entities)
    assert result.entities[-1].depth == 3
