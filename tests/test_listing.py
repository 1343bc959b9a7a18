"""memory::list and memory::session::get over the bus: keyset pages that neither repeat nor skip
under concurrent writes, filters, forgotten memories, cursors that belong to their listing."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support import Client, wait_until
from tests.test_life import sql
from worker.app import App


async def pages(client: Client, body: dict[str, Any]) -> list[list[Any]]:
    found, cursor = [], None
    while True:
        reply = await client.ok("memory::list", body | ({"cursor": cursor} if cursor else {}))
        found.append(reply["memories"])
        cursor = reply["nextCursor"]
        if cursor is None:
            return found


async def test_pages_in_either_order_with_ties_by_id(client: Client) -> None:
    ids = [(await client.store("a", f"note {n}", timestamp=1000 + n // 2))["id"] for n in range(7)]
    newest = [m for page in await pages(client, {"agentId": "a", "limit": 3}) for m in page]
    expected = sorted(ids, key=lambda i: (-(1000 + ids.index(i) // 2), i))
    assert [m["id"] for m in newest] == expected
    oldest = await pages(client, {"agentId": "a", "limit": 3, "order": "oldest"})
    assert [len(page) for page in oldest] == [3, 3, 1]
    flat = [m["id"] for page in oldest for m in page]
    assert flat == sorted(ids, key=lambda i: (1000 + ids.index(i) // 2, i))


async def test_a_listing_under_concurrent_stores_and_deletes_neither_repeats_nor_skips(
    client: Client, worker: App
) -> None:
    steady = {
        (await client.store("a", f"steady {n}", timestamp=10_000 + n))["id"] for n in range(60)
    }
    doomed = [
        (await client.store("a", f"doomed {n}", timestamp=20_000 + n))["id"] for n in range(30)
    ]

    churned = [0]  # steps of the churn done

    async def churn() -> None:
        for n in range(30):
            await client.store("a", f"new {n}", timestamp=5_000 + 1_000 * n)
            await client.ok("memory::delete", {"agentId": "a", "ids": [doomed[n]]})
            churned[0] += 1

    churning = asyncio.create_task(churn())
    seen: list[str] = []
    cursor = None
    while True:
        body = {"agentId": "a", "limit": 7, **({"cursor": cursor} if cursor else {})}
        reply = await client.ok("memory::list", body)
        seen += [m["id"] for m in reply["memories"]]
        cursor = reply["nextCursor"]
        if cursor is None:
            break
        step = churned[0]  # the next page after the list changed again (or the churn ended)

        def moved_on(step: int = step) -> bool:
            return churned[0] > step or churning.done()

        await wait_until(moved_on, "a step of the churn")
    await churning
    assert len(seen) == len(set(seen)), "a memory was listed twice"
    assert steady <= set(seen), "a memory that existed throughout was skipped"


async def test_filters_and_forgotten_memories(client: Client, worker: App) -> None:
    tagged = (await client.store("a", "tagged", metadata={"project": {"x": 1, "y": [True]}}))["id"]
    await client.store("a", "flag one", metadata={"project": 1}, role="assistant")
    await client.store("a", "flag true", metadata={"project": True}, sessionId="s")
    old = (await client.store("a", "old", timestamp=5))["id"]

    async def listed(**filters: Any) -> list[str]:
        body = await client.ok("memory::list", {"agentId": "a", **filters})
        return [m["content"] for m in body["memories"]]

    assert await listed(metadata={"project": {"y": [True], "x": 1.0}}) == ["tagged"]
    assert await listed(metadata={"project": True}) == ["flag true"]
    assert await listed(roles=["assistant"]) == ["flag one"]
    assert await listed(sessionId="s") == ["flag true"]
    assert await listed(until=6) == ["old"] and "old" not in await listed(since=6)
    sql(worker, "UPDATE memories SET pinned = 1 WHERE id = ?", tagged)
    assert await listed(pinned=True) == ["tagged"]
    await client.ok("memory::forget", {"agentId": "a", "ids": [old]})
    assert "old" not in await listed()
    assert "old" in await listed(includeForgotten=True)


async def test_a_cursor_of_another_listing_or_a_forged_one_is_refused(client: Client) -> None:
    for n in range(3):
        await client.store("a", f"note {n}")
        await client.store("b", f"note {n}")
    cursor = (await client.ok("memory::list", {"agentId": "a", "limit": 1}))["nextCursor"]
    for body in (
        {"agentId": "b", "limit": 1, "cursor": cursor},
        {"agentId": "a", "limit": 1, "cursor": cursor, "order": "oldest"},
        {"agentId": "a", "limit": 1, "cursor": cursor, "roles": ["user"]},
        {"agentId": "a", "cursor": "not-a-cursor"},
    ):
        refused = await client.call("memory::list", body)
        assert refused.code == "400" and "cursor" in (refused.description or ""), body


async def test_another_tenants_agent_of_the_same_name_is_never_listed(
    client: Client, worker: App
) -> None:
    mine = (await client.store("a", "mine"))["id"]
    sql(worker, "UPDATE memories SET tenant = 'T2' WHERE id = ?", mine)
    await client.store("a", "default tenant")
    assert [m["content"] for m in (await pages(client, {"agentId": "a"}))[0]] == ["default tenant"]


async def test_a_session_transcript_pages_in_order_with_gone_and_forgotten_content_null(
    client: Client, worker: App
) -> None:
    ids = [(await client.store("a", f"turn {n}", sessionId="s"))["id"] for n in range(5)]
    await client.ok("memory::delete", {"agentId": "a", "ids": [ids[1]]})
    await client.ok("memory::forget", {"agentId": "a", "ids": [ids[2]]})
    first = await client.ok("memory::session::get", {"agentId": "a", "sessionId": "s", "limit": 2})
    rest = await client.ok(
        "memory::session::get", {"agentId": "a", "sessionId": "s", "cursor": first["nextCursor"]}
    )
    assert rest["nextCursor"] is None
    messages = first["messages"] + rest["messages"]
    assert [m["position"] for m in messages] == [1, 2, 3, 4]  # the deleted one left the list
    assert [m["content"] for m in messages] == ["turn 0", None, "turn 3", "turn 4"]
    assert messages[1]["id"] == ids[2]
    unknown = await client.call("memory::session::get", {"agentId": "a", "sessionId": "nope"})
    assert unknown.code == "404"
