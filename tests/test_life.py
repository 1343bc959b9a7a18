"""A memory's life over the bus (contract section 12): get, forget, unforget, delete, erase,
pins in maintenance, and the audit each write leaves."""

from __future__ import annotations

import asyncio
from typing import Any

import apsw

from tests.support import Client, wait_until
from worker.app import App

DAY = 86_400_000


def sql(app: App, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(app.config.db_path)
    try:
        with conn:
            found = [tuple(row) for row in conn.execute(statement, params)]
        return found
    finally:
        conn.close()


async def audit(client: Client) -> list[tuple[str, Any]]:
    body = await client.ok("memory::audit", {"limit": 1000})
    return [(e["trigger"], e.get("ids", e.get("count"))) for e in body["events"]]


async def test_get_returns_the_agents_memories_in_the_order_asked_and_the_rest_missing(
    client: Client,
) -> None:
    first = (await client.store("a", "first"))["id"]
    second = (await client.store("a", "second", metadata={"k": 1}))["id"]
    theirs = (await client.store("b", "first"))["id"]
    body = await client.ok("memory::get", {"agentId": "a", "ids": [second, "nope", theirs, first]})
    assert [m["id"] for m in body["memories"]] == [second, first]
    assert body["missing"] == ["nope", theirs]
    memory = body["memories"][0]
    assert memory["content"] == "second" and memory["metadata"] == {"k": 1}
    assert memory["pinned"] is False and memory["forgottenAt"] is None and "score" not in memory


async def test_a_forgotten_memory_is_invisible_to_recall_restorable_and_restored_by_storing_it(
    client: Client,
) -> None:
    kept = (await client.store("a", "kept note"))["id"]
    gone = (await client.store("a", "forget this note"))["id"]
    assert len(await client.recall("a", "note")) == 2  # the index is loaded
    reply = await client.ok("memory::forget", {"agentId": "a", "ids": [gone, "nope"]})
    assert reply == {"forgotten": 1, "missing": ["nope"]}
    assert [m["id"] for m in await client.recall("a", "note")] == [kept]
    [memory] = (await client.ok("memory::get", {"agentId": "a", "ids": [gone]}))["memories"]
    assert memory["forgottenAt"] is not None
    again = await client.store("a", "forget this note")
    assert again == {
        "id": gone,
        "stored": False,
        "deduplicated": True,
        "redactions": {},
        "flags": [],
        "facts": [],
    }
    assert {m["id"] for m in await client.recall("a", "note")} == {kept, gone}
    await client.ok("memory::forget", {"agentId": "a", "ids": [gone]})
    restored = await client.ok("memory::unforget", {"agentId": "a", "ids": [gone, kept]})
    assert restored == {"restored": 2, "missing": []}
    assert len(await client.recall("a", "note")) == 2
    assert [t for t, _ in await audit(client)] == [
        "memory::store", "memory::store", "memory::forget", "memory::unforget",
        "memory::forget", "memory::unforget",
    ]  # fmt: skip


async def test_forget_and_delete_of_another_agents_ids_report_them_missing_and_change_nothing(
    client: Client,
) -> None:
    theirs = (await client.store("b", "not yours"))["id"]
    for trigger, key in (("memory::forget", "forgotten"), ("memory::delete", "deleted")):
        reply = await client.ok(trigger, {"agentId": "a", "ids": [theirs]})
        assert reply == {key: 0, "missing": [theirs]}
    assert [m["id"] for m in await client.recall("b")] == [theirs]
    assert await audit(client) == [("memory::store", [theirs])]


async def test_delete_removes_the_memory_and_its_session_references(
    client: Client, worker: App
) -> None:
    doomed = (await client.store("a", "one", sessionId="s"))["id"]
    await client.store("a", "two", sessionId="s")
    reply = await client.ok("memory::delete", {"agentId": "a", "ids": [doomed]})
    assert reply == {"deleted": 1, "missing": []}
    assert sql(worker, "SELECT count(*) FROM session_messages WHERE memory_id = ?", doomed) == [
        (0,)
    ]
    assert [m["content"] for m in await client.recall("a")] == ["two"]
    assert (await audit(client))[-1] == ("memory::delete", [doomed])


async def test_erase_needs_its_confirmation_and_leaves_only_its_own_audit_row(
    client: Client, worker: App
) -> None:
    await client.store("a", "one", sessionId="s")
    await client.ok("memory::kg::add", {"agentId": "a", "entity": {
        "id": "x", "relations": [{"target": "y", "type": "knows"}]}})  # fmt: skip
    await client.store("b", "other agent")
    refused = await client.call("memory::erase", {"agentId": "a", "confirm": "A"})
    assert refused.code == "400" and "confirm" in (refused.description or "")
    assert len(await client.recall("a")) == 1
    reply = await client.ok("memory::erase", {"agentId": "a", "confirm": "a"})
    assert reply == {"memories": 1, "sessions": 1, "entities": 2, "relations": 1, "kvKeys": 0}
    for table in ("memories", "sessions", "session_messages", "kg_entities", "kg_relations"):
        assert sql(worker, f"SELECT count(*) FROM {table} WHERE agent_id = 'a'") == [(0,)]
    events = (await client.ok("memory::audit", {"agentId": "a"}))["events"]
    assert [(e["trigger"], e["count"]) for e in events] == [("memory::erase", 1)]
    assert len(await client.recall("b")) == 1


async def test_erase_under_concurrent_stores_leaves_nothing_acknowledged_before_it(
    client: Client, worker: App
) -> None:
    acknowledged: list[str] = []

    async def keep_storing() -> None:
        for n in range(200):
            acknowledged.append((await client.store("a", f"note {n}"))["id"])

    storing = asyncio.create_task(keep_storing())
    await wait_until(lambda: len(acknowledged) >= 5, "the first stores acknowledged")
    before = list(acknowledged)
    await client.ok("memory::erase", {"agentId": "a", "confirm": "a"})
    await storing
    left = {row[0] for row in sql(worker, "SELECT id FROM memories WHERE agent_id = 'a'")}
    assert before and not left & set(before)


async def test_a_pinned_memory_survives_evict_cap_0_and_consolidation(
    client: Client, worker: App
) -> None:
    pinned = (await client.store("a", "core fact", timestamp=0, importance=0.1))["id"]
    await client.store("a", "ordinary")
    sql(worker, "UPDATE memories SET pinned = 1, last_accessed = 0 WHERE id = ?", pinned)
    reply = await client.ok("memory::evict", {"cap": 0})
    assert reply["overCap"] == 1 and reply["stale"] == 0
    await client.ok("memory::consolidate", {"decayRate": 1.0})
    assert sql(worker, "SELECT id, confidence FROM memories") == [(pinned, 1.0)]


async def test_eviction_purges_memories_forgotten_longer_than_the_retention(
    client: Client, worker: App
) -> None:
    old = (await client.store("a", "forgotten long ago"))["id"]
    recent = (await client.store("a", "forgotten just now"))["id"]
    await client.ok("memory::forget", {"agentId": "a", "ids": [old, recent]})
    sql(worker, "UPDATE memories SET forgotten_at = 1 WHERE id = ?", old)
    dry = await client.ok("memory::evict", {"dryRun": True})
    assert dry["purged"] == 1 and dry["evicted"] == 1
    reply = await client.ok("memory::evict", {"forgottenRetention": DAY})
    assert reply["purged"] == 1
    assert sql(worker, "SELECT id FROM memories") == [(recent,)]


async def test_update_corrects_content_keywords_and_scores_and_is_audited(
    client: Client, worker: App
) -> None:
    wrong = (await client.store("a", "the office is in Berlin"))["id"]
    other = (await client.store("a", "lunch is at noon"))["id"]
    assert len(await client.recall("a", "Berlin")) >= 1  # the index is loaded
    reply = await client.ok(
        "memory::update",
        {"agentId": "a", "id": wrong, "content": "the office is in Lisbon", "importance": 0.9,
         "metadata": {"source": "correction"}, "pinned": True},
    )  # fmt: skip
    memory = reply["memory"]
    assert (memory["id"], memory["content"], memory["importance"]) == (
        wrong, "the office is in Lisbon", 0.9,
    )  # fmt: skip
    assert memory["metadata"] == {"source": "correction"} and memory["pinned"] is True
    top = await client.recall("a", "Lisbon", limit=1)
    assert [m["id"] for m in top] == [wrong]
    assert all("Berlin" not in m["content"] for m in await client.recall("a", "Berlin"))
    assert (await audit(client))[-1] == ("memory::update", [wrong])
    clash = await client.call(
        "memory::update", {"agentId": "a", "id": other, "content": "the office is in Lisbon"}
    )
    assert clash.code == "409" and wrong in (clash.description or "")


async def test_update_refuses_no_field_a_forgotten_memory_and_another_agents_id(
    client: Client,
) -> None:
    mine = (await client.store("a", "mine"))["id"]
    theirs = (await client.store("b", "theirs"))["id"]
    empty = await client.call("memory::update", {"agentId": "a", "id": mine})
    assert empty.code == "400"
    foreign = await client.call("memory::update", {"agentId": "a", "id": theirs, "pinned": True})
    assert foreign.code == "404"
    await client.ok("memory::forget", {"agentId": "a", "ids": [mine]})
    forgotten = await client.call("memory::update", {"agentId": "a", "id": mine, "pinned": True})
    assert forgotten.code == "404" and "forgotten" in (forgotten.description or "")
    assert [t for t, _ in await audit(client)] == [
        "memory::store",
        "memory::store",
        "memory::forget",
    ]


async def test_recall_filters_keep_the_exact_top_k_of_what_passes(client: Client) -> None:
    for n in range(12):
        await client.store("a", f"deploy note {n}", timestamp=1_000 * n, importance=0.05 * n,
                           metadata={"team": "infra" if n % 3 == 0 else "web", "n": n})  # fmt: skip
    everything = await client.recall("a", "deploy note", limit=100)
    scores = {m["id"]: m["score"] for m in everything}
    contents = {m["id"]: m["content"] for m in everything}

    async def ranked(**filters: Any) -> list[str]:
        return [m["id"] for m in await client.recall("a", "deploy note", limit=3, **filters)]

    infra = [i for i in scores if contents[i].split()[-1] in {"0", "3", "6", "9"}]
    expected = sorted(infra, key=lambda i: -scores[i])[:3]
    assert await ranked(metadata={"team": "infra"}) == expected
    window = [i for i, m in zip(scores, everything, strict=True) if 3_000 <= m["timestamp"] < 6_000]
    assert set(await ranked(since=3_000, until=6_000)) == set(window)
    floor = sorted(scores.values())[-2]
    assert len(await client.recall("a", "deploy note", limit=10, minScore=floor)) == 2


async def test_recall_with_pinned_returns_the_core_memory_apart(client: Client) -> None:
    core = (await client.store("a", "the user is called Ada", importance=0.3))["id"]
    await client.store("a", "the user likes tea")
    theirs = (await client.store("b", "pinned elsewhere"))["id"]
    for agent, memory in (("a", core), ("b", theirs)):
        await client.ok("memory::update", {"agentId": agent, "id": memory, "pinned": True})
    body = await client.ok("memory::recall", {"agentId": "a", "query": "user", "withPinned": True})
    assert [m["id"] for m in body["pinned"]] == [core]
    assert core not in [m["id"] for m in body["memories"]] and len(body["memories"]) == 1
    plain = await client.ok("memory::recall", {"agentId": "a", "query": "user"})
    assert "pinned" not in plain and len(plain["memories"]) == 2
    only = await client.ok("memory::recall", {"agentId": "a", "pinned": True})
    assert [m["id"] for m in only["memories"]] == [core]


async def test_recalls_metadata_filter_compares_as_json_and_follows_updates(
    client: Client,
) -> None:
    one = (await client.store("a", "count one", metadata={"n": 1, "o": {"b": 2, "a": [1]}}))["id"]
    flag = (await client.store("a", "flag true", metadata={"n": True}))["id"]
    assert len(await client.recall("a", "")) == 2  # the index is loaded

    async def ids(metadata: dict[str, Any]) -> list[str]:
        return [m["id"] for m in await client.recall("a", "", metadata=metadata)]

    assert await ids({"n": 1.0}) == [one]
    assert await ids({"n": True}) == [flag]
    assert await ids({"o": {"a": [1.0], "b": 2}}) == [one]
    assert await ids({"n": 2}) == []
    await client.ok("memory::update", {"agentId": "a", "id": flag, "metadata": {"n": 1}})
    assert sorted(await ids({"n": 1})) == sorted([one, flag])
    assert await ids({"n": True}) == []
