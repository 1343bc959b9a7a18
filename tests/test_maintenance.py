"""memory::evict and memory::consolidate: contract sections 4 and 5."""

from __future__ import annotations

from typing import Any

import apsw

from tests.support import Client
from worker.app import App

DAY = 86_400_000


def execute(app: App, sql: str, *params: object) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(app.config.db_path)
    conn.set_busy_timeout(5000)
    try:
        return [tuple(row) for row in conn.execute(sql, params)]
    finally:
        conn.close()


async def now_ms(client: Client) -> int:
    await client.store("clock", "tick")
    [memory] = await client.recall("clock")
    return int(memory["lastAccessed"])


async def test_evict_counts_stale_low_confidence_and_both_once(client: Client, worker: App) -> None:
    now = await now_ms(client)
    old = now - 31 * DAY
    stale = await client.store("a", "stale", importance=0.1, timestamp=old)
    both = await client.store("a", "both", importance=0.1, timestamp=old)
    low = await client.store("a", "low", importance=0.9)
    keep_old_important = await client.store("a", "old but important", importance=0.5, timestamp=old)
    execute(
        worker, "UPDATE memories SET confidence = 0.05 WHERE id IN (?, ?)", both["id"], low["id"]
    )
    reply = await client.ok("memory::evict", {"agentId": "a"})
    assert {k: reply[k] for k in ("evicted", "stale", "lowConfidence", "overCap", "dryRun")} == {
        "evicted": 3, "stale": 2, "lowConfidence": 1, "overCap": 0, "dryRun": False,
    }  # fmt: skip
    assert isinstance(reply["durationMs"], float | int)
    left = {row[0] for row in execute(worker, "SELECT id FROM memories WHERE agent_id = 'a'")}
    assert left == {keep_old_important["id"]}
    assert stale["id"] not in left


async def test_dry_run_counts_and_deletes_nothing(client: Client, worker: App) -> None:
    now = await now_ms(client)
    await client.store("a", "stale", importance=0.1, timestamp=now - 40 * DAY)
    reply = await client.ok("memory::evict", {"dryRun": True})
    assert reply["evicted"] == 1 and reply["dryRun"] is True
    assert execute(worker, "SELECT count(*) FROM memories WHERE agent_id = 'a'") == [(1,)]


async def test_default_min_confidence_never_evicts_the_consolidation_floor(
    client: Client, worker: App
) -> None:
    await client.store("a", "floored")
    execute(worker, "UPDATE memories SET confidence = 0.1")
    assert (await client.ok("memory::evict"))["evicted"] == 0
    assert (await client.ok("memory::evict", {"minConfidence": 0.2}))["lowConfidence"] == 1


async def test_cap_evicts_lowest_importance_then_confidence_then_older_then_id(
    client: Client, worker: App
) -> None:
    made = {}
    for name, importance, timestamp in [
        ("i1-old", 0.1, 1_000), ("i1-new", 0.1, 2_000), ("i3", 0.3, 1_000),
        ("i5", 0.5, 1_000), ("i9", 0.9, 1_000),
    ]:  # fmt: skip
        made[name] = (await client.store("a", name, importance=importance, timestamp=timestamp))[
            "id"
        ]
    reply = await client.ok("memory::evict", {"agentId": "a", "cap": 2, "maxAge": 10**14})
    assert reply["overCap"] == 3 and reply["evicted"] == 3
    left = {row[0] for row in execute(worker, "SELECT content FROM memories WHERE agent_id='a'")}
    assert left == {"i5", "i9"}


async def test_cap_applies_per_agent_and_zero_empties(client: Client, worker: App) -> None:
    for agent in ("a", "b"):
        for index in range(3):
            await client.store(agent, f"{agent}{index}")
    reply = await client.ok("memory::evict", {"cap": 1})
    assert reply["overCap"] == 2 * 2 + 0  # the clock agent holds one memory: not over
    assert (await client.ok("memory::evict", {"cap": 0, "agentId": "a"}))["overCap"] == 1
    assert execute(worker, "SELECT count(*) FROM memories WHERE agent_id = 'b'") == [(1,)]


async def test_evicted_memories_leave_sessions_recall_and_dedup(
    client: Client, worker: App
) -> None:
    first = await client.store("a", "gone soon", sessionId="s", importance=0.0, timestamp=1)
    await client.store("a", "stays", sessionId="s")
    await client.ok("memory::evict", {"agentId": "a"})
    refs = execute(worker, "SELECT memory_id FROM session_messages")
    assert (first["id"],) not in refs and len(refs) == 1
    assert "gone soon" not in {m["content"] for m in await client.recall("a", "gone soon")}
    again = await client.store("a", "gone soon")
    assert again["stored"] is True and again["id"] != first["id"]


async def test_consolidate_decays_only_unaccessed_for_a_week_and_floors(
    client: Client, worker: App
) -> None:
    now = await now_ms(client)
    await client.store("a", "idle", timestamp=now - 8 * DAY)
    await client.store("a", "recent", timestamp=now - 6 * DAY)
    await client.store("a", "floored", timestamp=now - 8 * DAY)
    await client.store("b", "other agent idle", timestamp=now - 8 * DAY)
    execute(worker, "UPDATE memories SET confidence = 0.1 WHERE content = 'floored'")
    reply = await client.ok("memory::consolidate", {"decayRate": 0.5, "agentId": "a"})
    assert reply["memoriesDecayed"] == 1 and reply["memoriesMerged"] == 0
    confidence = dict(execute(worker, "SELECT content, confidence FROM memories"))
    assert confidence["idle"] == 0.5 and confidence["recent"] == 1.0
    assert confidence["floored"] == 0.1 and confidence["other agent idle"] == 1.0
    await client.ok("memory::consolidate", {"decayRate": 0.95})
    confidence = dict(execute(worker, "SELECT content, confidence FROM memories"))
    assert confidence["idle"] == 0.1
    assert abs(float(confidence["other agent idle"]) - 0.05 * 1.0) > 0  # floored at 0.1
    assert confidence["other agent idle"] == 0.1


async def test_consolidate_default_rate_is_five_percent(client: Client, worker: App) -> None:
    now = await now_ms(client)
    await client.store("a", "idle", timestamp=now - 30 * DAY)
    await client.ok("memory::consolidate")
    [(confidence,)] = execute(worker, "SELECT confidence FROM memories WHERE agent_id = 'a'")
    assert confidence == 0.95


async def test_recall_reflects_decayed_confidence(client: Client) -> None:
    now = await now_ms(client)
    await client.store("a", "idle", timestamp=now - 30 * DAY, importance=0.1)
    await client.store("a", "busy", importance=0.9)
    [busy] = await client.recall("a", limit=1)  # loads the agent into the in-memory index
    assert busy["content"] == "busy"
    await client.ok("memory::consolidate", {"decayRate": 0.5})
    memories = {m["content"]: m for m in await client.recall("a")}
    assert memories["idle"]["confidence"] == 0.5
    expected = 0.1 * 0.5 ** (30 / 7) + 0.1 * 0.1 + 0.05 * 0.5
    assert abs(memories["idle"]["score"] - expected) < 1e-6
