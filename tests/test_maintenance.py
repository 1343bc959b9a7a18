"""memory::evict and memory::consolidate over the bus: contract sections 4 and 5. Which memories
are evicted or decayed, and by how much, is tested on the handlers with a fixed now in
tests/handlers/test_maintenance.py; here, what the worker adds: the reply on the wire, the
chunked apply, and recall staying in step."""

from __future__ import annotations

import pytest

from tests.support import Client

WEEK = 604_800_000


async def test_evict_replies_counts_and_duration_and_the_memories_leave_recall(
    client: Client,
) -> None:
    await client.store("a", "stale", importance=0.1, timestamp=1_000)
    await client.store("a", "kept", importance=0.9)
    [_, _] = await client.recall("a")  # loads the agent into the in-memory index
    reply = await client.ok("memory::evict", {"agentId": "a"})
    keys = ("evicted", "purged", "stale", "lowConfidence", "overCap", "dryRun")
    assert {k: reply[k] for k in keys} == {
        "evicted": 1, "purged": 0, "stale": 1, "lowConfidence": 0, "overCap": 0, "dryRun": False,
    }  # fmt: skip
    assert isinstance(reply["durationMs"], float | int)
    assert [m["content"] for m in await client.recall("a")] == ["kept"]


async def test_dry_run_counts_and_deletes_nothing(client: Client) -> None:
    await client.store("a", "stale", importance=0.1, timestamp=1_000)
    reply = await client.ok("memory::evict", {"dryRun": True})
    assert reply["evicted"] == 1 and reply["stale"] == 1 and reply["dryRun"] is True
    assert [m["content"] for m in await client.recall("a")] == ["stale"]


async def test_evicted_memories_leave_sessions_recall_and_dedup(client: Client) -> None:
    first = await client.store("a", "gone soon", sessionId="s", importance=0.0, timestamp=1)
    await client.store("a", "stays", sessionId="s")
    await client.ok("memory::evict", {"agentId": "a"})
    [session] = (await client.ok("memory::session::list", {"agentId": "a"}))["sessions"]
    assert session["messageCount"] == 1
    assert "gone soon" not in {m["content"] for m in await client.recall("a", "gone soon")}
    again = await client.store("a", "gone soon")
    assert again["stored"] is True and again["id"] != first["id"]


@pytest.mark.formula  # the decayed confidence in the formula's exact score
async def test_recall_reflects_decayed_confidence(client: Client) -> None:
    await client.store("a", "idle", timestamp=1_000, importance=0.1)
    await client.store("a", "busy", importance=0.9)
    [busy] = await client.recall("a", limit=1)  # loads the agent into the in-memory index
    assert busy["content"] == "busy"
    reply = await client.ok("memory::consolidate", {"decayRate": 0.5})
    assert reply["memoriesDecayed"] == 1 and reply["memoriesMerged"] == 0
    assert isinstance(reply["durationMs"], float | int)
    memories = {m["content"]: m for m in await client.recall("a")}
    idle = memories["idle"]
    assert idle["confidence"] == 0.5
    recency = 0.5 ** ((idle["lastAccessed"] - 1_000) / WEEK)
    expected = 0.1 * recency + 0.1 * 0.1 + 0.05 * 0.5
    assert abs(idle["score"] - expected) < 1e-6
