"""memory::agents (contract section 20): a tenant's agents by id with their memory counts,
paged and by prefix, over the bus; a second tenant sees nothing of the first; a shard's
partitions merge into the same pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest
from msgspec import UNSET

from handlers.agents import after_prefix, list_agents
from schema.agents import AgentsReply, AgentsRequest
from tests.shipped_nats import tenant_bus
from tests.support import Client
from tests.test_grants_bus import granted_bus
from worker.db import migrate, open_db
from worker.shards.fanout import agents_merged

BUDGET = 1_000_000


async def pages(client: Client, **request: Any) -> list[list[str]]:
    """Every page's agent ids, following nextCursor to the end."""
    found: list[list[str]] = []
    cursor = None
    while True:
        body = dict(request, **({} if cursor is None else {"cursor": cursor}))
        reply = await client.ok("memory::agents", body)
        found.append([agent["agentId"] for agent in reply["agents"]])
        cursor = reply["nextCursor"]
        if cursor is None:
            return found


async def test_agents_lists_agents_by_id_with_counts_of_memories_not_forgotten(
    client: Client,
) -> None:
    """Each agent with a memory once, in id order, with how many memories it has that are not
    forgotten and the newest one's timestamp."""
    await client.store("b", "bravo one", timestamp=1_000)
    await client.store("b", "bravo two", timestamp=3_000)
    gone = await client.store("a", "alpha one", timestamp=2_000)
    await client.ok("memory::forget", {"agentId": "a", "ids": [gone["id"]]})
    reply = await client.ok("memory::agents", {})
    assert reply == {
        "agents": [
            {"agentId": "a", "memories": 0, "lastStored": 2_000},
            {"agentId": "b", "memories": 2, "lastStored": 3_000},
        ],
        "nextCursor": None,
    }


async def test_agents_pages_never_repeat_or_skip_and_a_prefix_keeps_to_its_range(
    client: Client,
) -> None:
    """Pages of `limit` follow each other without repeats or gaps, even when an agent is
    erased and another stored between pages; `prefix` lists the ids that start with it."""
    for name in ("ops-1", "ops-2", "ops-3", "opt", "plan-1", "plan-2", "zed"):
        await client.store(name, f"memory of {name}")
    assert await pages(client, limit=3) == [
        ["ops-1", "ops-2", "ops-3"],
        ["opt", "plan-1", "plan-2"],
        ["zed"],
    ]
    assert await pages(client, prefix="ops-", limit=2) == [["ops-1", "ops-2"], ["ops-3"]]
    assert await pages(client, prefix="plan") == [["plan-1", "plan-2"]]
    first = await client.ok("memory::agents", {"limit": 2})
    await client.ok("memory::erase", {"agentId": "ops-1", "confirm": "ops-1"})
    await client.store("ops-0", "stored between two pages")
    second = await client.ok("memory::agents", {"limit": 2, "cursor": first["nextCursor"]})
    assert [agent["agentId"] for agent in second["agents"]] == ["ops-3", "opt"]


async def test_agents_refuses_a_cursor_of_another_prefix_and_a_limit_out_of_range(
    client: Client,
) -> None:
    for name in ("a1", "a2"):
        await client.store(name, f"memory of {name}")
    first = await client.ok("memory::agents", {"limit": 1})
    refused = await client.call("memory::agents", {"prefix": "a", "cursor": first["nextCursor"]})
    assert refused.code == "400" and "$.cursor" in (refused.description or "")
    for limit in (0, 1001):
        refused = await client.call("memory::agents", {"limit": limit})
        assert refused.code == "400" and "$.limit" in (refused.description or "")


async def test_a_second_tenant_lists_none_of_the_first_tenants_agents(tmp_path: Path) -> None:
    """On the shipped NATS config with tenancy on: carol (TEAM_B) lists only her own agents,
    never TEAM_A's, even by their prefix; naming a tenant is refused to a tenant."""
    async with tenant_bus(tmp_path) as bus:
        alice, carol = await bus.user("alice"), await bus.user("carol")
        await alice.store("team-a-planner", "alpha plans the launch")
        await alice.store("shared-name", "alpha keeps the budget")
        await carol.store("shared-name", "beta plans the audit")
        assert await pages(alice) == [["shared-name", "team-a-planner"]]
        carols = await carol.ok("memory::agents", {})
        assert carols["agents"] == [
            {
                "agentId": "shared-name",
                "memories": 1,
                "lastStored": carols["agents"][0]["lastStored"],
            }
        ]
        assert (await carol.ok("memory::agents", {"prefix": "team-a"}))["agents"] == []
        refused = await carol.call("memory::agents", {"tenant": "TEAM_A"})
        assert refused.code == "403"


def partition_files(tmp_path: Path, parts: int) -> list[apsw.Connection]:
    files = []
    for k in range(parts):
        conn = open_db(tmp_path / f"p{k}.db", synchronous="normal")
        migrate(conn)
        files.append(conn)
    return files


def put(conn: apsw.Connection, agent_id: str, n: int) -> None:
    for i in range(n):
        conn.execute(
            "INSERT INTO memories (id, agent_id, role, content, hash, importance, confidence, "
            "last_accessed, timestamp, created_at) VALUES (?, ?, 'user', 'x', ?, 0.5, 1, 1, ?, 1)",
            (f"{agent_id}/{i}", agent_id, f"h{i}", 10 + i),
        )


@pytest.mark.parametrize("limit", [1, 2, 3, 7])
async def test_a_shards_partitions_merge_into_one_listing_in_id_order(
    tmp_path: Path, limit: int
) -> None:
    """In sharded mode each partition lists its own agents from the same cursor; the merged
    pages are those of one file holding them all, every agent once, in id order."""
    files = partition_files(tmp_path, 3)
    names = ["a", "b", "c", "d", "e", "f", "g", "h"]
    for i, name in enumerate(names):
        put(files[(i * 7) % 3], name, 1 + i % 3)

    async def ask(requests: dict[int, Any]) -> dict[int, Any]:
        return {k: list_agents(files[k], r, now=0, budget=BUDGET) for k, r in requests.items()}

    seen: list[str] = []
    cursor = None
    while True:
        request = AgentsRequest(limit=limit, cursor=UNSET if cursor is None else cursor)
        reply: AgentsReply = await agents_merged(request, 3, ask, BUDGET)
        assert 1 <= len(reply.agents) <= limit
        seen += [agent.agent_id for agent in reply.agents]
        counts = {agent.agent_id: agent.memories for agent in reply.agents}
        assert all(counts[name] == 1 + names.index(name) % 3 for name in counts)
        if reply.next_cursor is None:
            break
        cursor = reply.next_cursor
    assert seen == names
    for conn in files:
        conn.close()


def test_after_prefix_is_the_least_string_past_every_string_with_the_prefix() -> None:
    assert after_prefix("ab") == "ac"
    assert after_prefix("a\U0010ffff") == "b"
    assert after_prefix("\U0010ffff") is None
    assert after_prefix("a\ud7ff") == "a\ue000"


async def test_a_user_with_grants_lists_only_the_agents_they_match(tmp_path: Path) -> None:
    """alice (grants `alice-*`) lists her agents only, bob his; carol, granted none, is 403."""
    async with granted_bus(tmp_path) as bus:
        alice, bob = await bus.user("alice"), await bus.user("bob")
        await alice.store("alice-1", "alpha one")
        await alice.store("alice-2", "alpha two")
        await bob.store("bob-1", "bravo one")
        assert await pages(alice) == [["alice-1", "alice-2"]]
        assert await pages(bob) == [["bob-1"]]
        refused = await (await bus.user("carol")).call("memory::agents", {})
        assert refused.code == "403"
