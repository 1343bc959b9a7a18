"""memory::kg::add and memory::kg::query over the bus: contract section 6."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import Client


async def add(client: Client, agent: str, entity: dict[str, Any]) -> Any:
    return await client.ok("memory::kg::add", {"agentId": agent, "entity": entity})


async def query(client: Client, agent: str, entity_id: str, **fields: Any) -> Any:
    return await client.ok("memory::kg::query", {"agentId": agent, "entityId": entity_id, **fields})


TOO_MANY = range(1001)


def rel(target: str, kind: str = "knows") -> dict[str, str]:
    return {"target": target, "type": kind}


async def test_add_records_each_relation_with_its_inverse_once(client: Client) -> None:
    reply = await add(client, "a", {"id": "alice", "type": "person", "relations": [rel("bob")]})
    assert reply == {"stored": True, "id": "alice", "relationsAdded": 1}
    again = await add(client, "a", {"id": "alice", "relations": [rel("bob"), rel("bob")]})
    assert again["relationsAdded"] == 0
    result = await query(client, "a", "bob", depth=1)
    bob, alice = result["entities"]
    assert bob == {
        "id": "bob", "type": None, "properties": {},
        "relations": [{"target": "alice", "type": "inverse:knows"}], "depth": 0,
    }  # fmt: skip
    assert alice["relations"] == [{"target": "bob", "type": "knows"}] and alice["depth"] == 1


async def test_add_replaces_type_and_properties_and_omitted_ones_reset(client: Client) -> None:
    await add(client, "a", {"id": "e", "type": "t1", "properties": {"x": 1}})
    await add(client, "a", {"id": "e"})
    [entity] = (await query(client, "a", "e", depth=0))["entities"]
    assert entity["type"] is None and entity["properties"] == {}


async def test_a_placeholder_target_becomes_real_when_added(client: Client) -> None:
    await add(client, "a", {"id": "a1", "relations": [rel("ghost", "likes")]})
    [ghost] = (await query(client, "a", "ghost", depth=0))["entities"]
    assert ghost["type"] is None and ghost["properties"] == {}
    await add(client, "a", {"id": "ghost", "type": "spirit", "properties": {"boo": True}})
    [ghost] = (await query(client, "a", "ghost", depth=0))["entities"]
    assert ghost["type"] == "spirit" and ghost["relations"] == [
        {"target": "a1", "type": "inverse:likes"}
    ]


async def test_query_is_breadth_first_on_a_diamond_whatever_the_edge_order(
    client: Client,
) -> None:
    """root->a->b->d and root->d: a depth-first walk reaches d at depth 3, BFS at depth 1."""
    await add(client, "a", {"id": "b", "relations": [rel("d", "next")]})
    await add(client, "a", {"id": "a", "relations": [rel("b", "next")]})
    await add(client, "a", {"id": "root", "relations": [rel("a", "next"), rel("d", "next")]})
    result = await query(client, "a", "root", depth=3)
    depths = {e["id"]: e["depth"] for e in result["entities"]}
    assert depths == {"root": 0, "a": 1, "d": 1, "b": 2}
    assert [e["id"] for e in result["entities"]] == ["root", "a", "d", "b"]


async def test_cycles_are_safe_and_each_entity_appears_once(client: Client) -> None:
    await add(client, "a", {"id": "x", "relations": [rel("y")]})
    await add(client, "a", {"id": "y", "relations": [rel("z")]})
    await add(client, "a", {"id": "z", "relations": [rel("x")]})
    result = await query(client, "a", "x", depth=10)
    assert sorted(e["id"] for e in result["entities"]) == ["x", "y", "z"]


async def test_depth_zero_unknown_entity_and_default_depth(client: Client) -> None:
    await add(client, "a", {"id": "n0", "relations": [rel("n1")]})
    await add(client, "a", {"id": "n1", "relations": [rel("n2")]})
    await add(client, "a", {"id": "n2", "relations": [rel("n3")]})
    assert [e["id"] for e in (await query(client, "a", "n0", depth=0))["entities"]] == ["n0"]
    assert [e["id"] for e in (await query(client, "a", "n0"))["entities"]] == ["n0", "n1", "n2"]
    assert await query(client, "a", "nobody") == {"entities": [], "truncated": False}


async def test_limit_truncates_and_says_so(client: Client) -> None:
    await add(client, "a", {"id": "hub", "relations": [rel(f"leaf{i}") for i in range(20)]})
    result = await query(client, "a", "hub", depth=1, limit=5)
    assert len(result["entities"]) == 5 and result["truncated"] is True
    full = await query(client, "a", "hub", depth=1, limit=21)
    assert len(full["entities"]) == 21 and full["truncated"] is False


async def test_graphs_of_two_agents_never_mix(client: Client) -> None:
    await add(client, "a", {"id": "shared", "relations": [rel("only-a")]})
    await add(client, "b", {"id": "shared", "type": "b-type", "relations": [rel("only-b")]})
    ids_a = [e["id"] for e in (await query(client, "a", "shared"))["entities"]]
    ids_b = [e["id"] for e in (await query(client, "b", "shared"))["entities"]]
    assert ids_a == ["shared", "only-a"] and ids_b == ["shared", "only-b"]
    assert (await query(client, "a", "only-b")) == {"entities": [], "truncated": False}


@pytest.mark.parametrize(
    ("payload", "code", "field"),
    [
        ({"entity": {"id": "e"}}, "400", "agentId"),
        ({"agentId": "a", "entity": {"id": ""}}, "400", "$.entity.id"),
        ({"agentId": "a", "entity": {"id": "x" * 257}}, "400", "$.entity.id"),
        ({"agentId": "a", "entity": {"id": "e", "relations": [{"target": "t"}]}}, "400", "type"),
        ({"agentId": "a", "entity": {"id": "e", "properties": []}}, "400", "$.entity.properties"),
        (
            {"agentId": "a", "entity": {"id": "e", "relations": [rel(str(n)) for n in TOO_MANY]}},
            "400", "$.entity.relations",
        ),
        (
            {"agentId": "a", "entity": {"id": "e", "properties": {"x": "y" * 65_536}}},
            "413", "$.entity.properties",
        ),
    ],
)  # fmt: skip
async def test_bad_adds_are_refused_and_write_nothing(
    client: Client, payload: dict[str, Any], code: str, field: str
) -> None:
    reply = await client.call("memory::kg::add", payload)
    assert reply.code == code and field in reply.body["error"]["message"]
    assert (await query(client, "a", "e")) == {"entities": [], "truncated": False}


@pytest.mark.parametrize(
    ("fields", "field"), [({"depth": 11}, "$.depth"), ({"depth": -1}, "$.depth"),
                          ({"limit": 0}, "$.limit"), ({"limit": 10_001}, "$.limit")]
)  # fmt: skip
async def test_query_bounds_are_enforced(
    client: Client, fields: dict[str, int], field: str
) -> None:
    reply = await client.call("memory::kg::query", {"agentId": "a", "entityId": "e", **fields})
    assert reply.code == "400" and field in reply.body["error"]["message"]


async def test_a_wide_deep_graph_is_traversed_level_by_level(client: Client) -> None:
    """3 levels of fan-out 12: 1 + 12 + 144 + 1728 entities, found in one query per level."""
    level = ["r"]
    for _ in range(3):
        nxt = []
        for node in level:
            children = [f"{node}.{i}" for i in range(12)]
            await add(client, "a", {"id": node, "relations": [rel(c, "child") for c in children]})
            nxt.extend(children)
        level = nxt
    result = await query(client, "a", "r", depth=3, limit=10_000)
    assert len(result["entities"]) == 1 + 12 + 144 + 1728 and not result["truncated"]
    assert result["entities"][-1]["depth"] == 3
