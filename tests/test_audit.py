"""The audit log over the bus: every change leaves a row in its own transaction, with what and
through what, never content; memory::audit pages through it oldest first."""

from __future__ import annotations

import json
from typing import Any

import apsw

from tests.support import Client
from worker.app import App

DAY = 86_400_000


async def events(client: Client, **fields: Any) -> list[dict[str, Any]]:
    body = await client.ok("memory::audit", fields)
    found: list[dict[str, Any]] = body["events"]
    return found


async def test_a_store_that_writes_is_audited_and_a_deduplicated_one_is_not(
    client: Client,
) -> None:
    stored = await client.store("a", "the deploy key rotates monthly")
    await client.store("a", "the deploy key rotates monthly")
    [event] = await events(client, agentId="a")
    assert event["trigger"] == "memory::store" and event["ids"] == [stored["id"]]
    assert event["source"] == "bus" and event["requester"] is None and event["agentId"] == "a"
    assert "count" not in event and "content" not in json.dumps(event)


async def test_kg_writes_and_maintenance_are_audited_per_agent(client: Client) -> None:
    await client.ok("memory::kg::add", {"agentId": "a", "entity": {"id": "alice"}})
    await client.ok("memory::kg::delete", {"agentId": "a", "entityId": "alice"})
    await client.ok("memory::kg::delete", {"agentId": "a", "entityId": "nobody"})  # no change
    for agent in ("a", "b"):
        await client.store(agent, "old note", timestamp=0, importance=0.1)
    await client.ok("memory::evict", {"maxAge": DAY})
    triggers = [(e["trigger"], e["agentId"], e.get("ids")) for e in await events(client)]
    assert triggers[:2] == [
        ("memory::kg::add", "a", ["alice"]),
        ("memory::kg::delete", "a", ["alice"]),
    ]
    evicted = [
        (agent, len(ids or [])) for trigger, agent, ids in triggers if trigger == "memory::evict"
    ]
    assert sorted(evicted) == [("a", 1), ("b", 1)]


async def test_audit_pages_oldest_first_without_repeats_and_refuses_a_foreign_cursor(
    client: Client,
) -> None:
    for n in range(7):
        await client.store("a", f"note {n}")
    await client.store("b", "other agent")
    seen, cursor = [], None
    while True:
        body = await client.ok(
            "memory::audit", {"agentId": "a", "limit": 3, **({"cursor": cursor} if cursor else {})}
        )
        seen += [e["seq"] for e in body["events"]]
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert len(seen) == 7 and seen == sorted(seen)
    foreign = await client.call("memory::audit", {"agentId": "b", "cursor": cursor or "x"})
    assert foreign.code == "400" and "cursor" in (foreign.description or "")
    page = await client.ok("memory::audit", {"agentId": "a", "limit": 3})
    other = await client.call("memory::audit", {"agentId": "b", "cursor": page["nextCursor"]})
    assert other.code == "400" and "cursor" in (other.description or "")


async def test_a_refused_request_leaves_no_audit_row(client: Client) -> None:
    refused = await client.call("memory::kg::delete", {"agentId": "a"})
    assert refused.code == "400"
    assert await events(client) == []


async def test_a_large_change_keeps_a_count_instead_of_ids(client: Client, worker: App) -> None:
    for n in range(101):
        await client.store("a", f"note {n}", timestamp=0, importance=0.1)
    await client.ok("memory::evict", {"maxAge": DAY})
    [evicted] = [e for e in await events(client, limit=1000) if e["trigger"] == "memory::evict"]
    assert evicted["count"] == 101 and "ids" not in evicted


async def test_eviction_removes_audit_rows_past_the_retention(client: Client, worker: App) -> None:
    await client.store("a", "old enough to leave the audit")
    conn = apsw.Connection(worker.config.db_path)
    with conn:
        conn.execute("UPDATE audit SET at = 0")
    conn.close()
    recent = await client.store("a", "recent")
    await client.ok("memory::evict", {"dryRun": True})
    assert len(await events(client)) == 2  # a dry run removes nothing
    await client.ok("memory::evict", {})
    assert [(e["trigger"], e["ids"]) for e in await events(client)] == [
        ("memory::store", [recent["id"]])
    ]
