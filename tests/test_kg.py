"""memory::kg::add and memory::kg::query over the bus: contract section 6. The graph logic
(replacing, placeholders, breadth-first depths, cycles, limits, agents apart) is tested on the
handlers in tests/handlers/test_kg.py."""

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
