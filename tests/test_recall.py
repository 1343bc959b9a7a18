"""memory::recall over the bus: contract section 3 (embedder `none`, so cosine is 0). The tests of
exact scores run the contract's formula (the `formula` mark); the rest run the defaults."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import Client

WEEK = 604_800_000
DAY = 86_400_000


def expected_score(memory: dict[str, Any], keyword: float, cosine: float = 0.0) -> float:
    """The contract's formula, evaluated at the recall's own `now` (its lastAccessed)."""
    age = max(0, int(memory["lastAccessed"]) - int(memory["timestamp"]))
    recency: float = 0.5 ** (age / WEEK)
    importance, confidence = float(memory["importance"]), float(memory["confidence"])
    return 0.50 * cosine + 0.25 * keyword + 0.10 * recency + 0.10 * importance + 0.05 * confidence


@pytest.mark.formula
async def test_score_follows_the_formula_with_keyword_share(client: Client) -> None:
    await client.store("a", "The cat sat on the mat", importance=0.4, timestamp=1_000)
    [memory] = await client.recall("a", "cat dog")
    assert memory["score"] == pytest.approx(expected_score(memory, keyword=0.5), abs=1e-12)


@pytest.mark.formula
async def test_keywords_match_whole_casefolded_tokens_only(client: Client) -> None:
    await client.store("a", "a category of things", importance=0.5)
    [memory] = await client.recall("a", "CAT")
    assert memory["score"] == pytest.approx(expected_score(memory, keyword=0.0), abs=1e-12)
    await client.store("b", "Straße und STRASSE", importance=0.5)
    [memory] = await client.recall("b", "strasse")
    assert memory["score"] == pytest.approx(expected_score(memory, keyword=1.0), abs=1e-12)


@pytest.mark.formula
async def test_stopwords_are_dropped_unless_every_token_is_one(client: Client) -> None:
    await client.store("a", "the weather", importance=0.5)
    [memory] = await client.recall("a", "the weather in the city")
    assert memory["score"] == pytest.approx(expected_score(memory, keyword=0.5), abs=1e-12)
    [memory] = await client.recall("a", "the")
    assert memory["score"] == pytest.approx(expected_score(memory, keyword=1.0), abs=1e-12)


@pytest.mark.formula
async def test_repeated_query_words_count_once(client: Client) -> None:
    await client.store("a", "apple pie", importance=0.5)
    [memory] = await client.recall("a", "apple apple apple banana")
    assert memory["score"] == pytest.approx(expected_score(memory, keyword=0.5), abs=1e-12)


@pytest.mark.formula
async def test_empty_query_scores_recency_importance_and_confidence(client: Client) -> None:
    await client.store("a", "anything", importance=0.7)
    [memory] = await client.recall("a", "")
    assert memory["score"] == pytest.approx(expected_score(memory, keyword=0.0), abs=1e-12)


@pytest.mark.formula
async def test_recency_halves_each_week_and_future_counts_as_now(client: Client) -> None:
    first = await client.store("a", "now-ish")
    [probe] = await client.recall("a")
    now = probe["lastAccessed"]
    await client.store("b", "one week old", importance=0.5, timestamp=now - WEEK)
    await client.store("b", "from the future", importance=0.5, timestamp=now + 10 * DAY)
    memories = {m["content"]: m for m in await client.recall("b")}
    old, future = memories["one week old"], memories["from the future"]
    assert old["score"] == pytest.approx(expected_score(old, keyword=0.0), abs=1e-12)
    assert future["score"] == pytest.approx(0.1 + 0.05 + 0.05, abs=1e-12)
    assert first["stored"]


async def test_results_are_ordered_by_score_then_newer_then_id(client: Client) -> None:
    for index in range(6):
        await client.store("a", f"tie {index}", importance=0.5, timestamp=5_000 + index % 2)
    memories = await client.recall("a", "", limit=6)
    keys = [(-m["score"], -m["timestamp"], m["id"]) for m in memories]
    assert keys == sorted(keys)
    assert [m["timestamp"] for m in memories][:3] == [5_001] * 3


async def test_limit_defaults_to_ten_and_returns_the_best(client: Client) -> None:
    for index in range(15):
        await client.store("a", f"memory {index}", importance=index / 20)
    memories = await client.recall("a")
    assert len(memories) == 10
    assert {m["content"] for m in memories} == {f"memory {i}" for i in range(5, 15)}


async def test_recall_counts_an_access_only_for_returned_memories(client: Client) -> None:
    for index in range(3):
        await client.store("a", f"item {index}", importance=0.1 * (index + 1))
    [top] = await client.recall("a", limit=1)
    assert top["content"] == "item 2" and top["accessCount"] == 1
    again = await client.recall("a", limit=3)
    counts = {m["content"]: m["accessCount"] for m in again}
    assert counts == {"item 2": 2, "item 1": 1, "item 0": 1}
    assert all(m["lastAccessed"] >= top["lastAccessed"] for m in again)


async def test_session_and_role_filters(client: Client) -> None:
    await client.store("a", "in s1", sessionId="s1")
    await client.store("a", "in s2", sessionId="s2", role="assistant")
    await client.store("a", "no session", role="system")
    assert [m["content"] for m in await client.recall("a", sessionId="s1")] == ["in s1"]
    assert await client.recall("a", sessionId="nope") == []
    roles = await client.recall("a", roles=["assistant", "system"])
    assert {m["content"] for m in roles} == {"in s2", "no session"}
    assert {m["role"] for m in roles} == {"assistant", "system"}


async def test_reply_has_every_contract_field(client: Client) -> None:
    stored = await client.store("a", "fields", sessionId="s", metadata={"k": 1})
    [memory] = await client.recall("a")
    assert set(memory) == {
        "id", "role", "content", "score", "timestamp", "sessionId", "importance",
        "confidence", "accessCount", "lastAccessed", "metadata", "summary", "category",
        "sensitivity", "recallPolicy", "tags", "flags",
    }  # fmt: skip
    assert memory["id"] == stored["id"] and memory["sessionId"] == "s"
    assert (memory["summary"], memory["tags"], memory["flags"]) == (None, [], [])
    assert (memory["category"], memory["sensitivity"], memory["recallPolicy"]) == (
        "note", "internal", "auto",
    )  # fmt: skip


async def test_other_agents_are_never_scored_returned_or_touched(client: Client) -> None:
    await client.store("a", "secret of a")
    await client.store("b", "secret of b")
    assert [m["content"] for m in await client.recall("a", "secret")] == ["secret of a"]
    [memory_b] = await client.recall("b", "secret")
    assert memory_b["accessCount"] == 1
    assert await client.recall("nobody", "secret") == []


async def test_recall_sees_a_store_acknowledged_just_before(client: Client) -> None:
    for index in range(50):
        await client.store("a", f"fresh {index}")
        memories = await client.recall("a", f"fresh {index}", limit=1)
        assert memories[0]["content"] == f"fresh {index}"


async def test_a_query_over_16_kib_is_payload_too_large_and_touches_nothing(
    client: Client,
) -> None:
    """MEMORY_WORKER_MAX_QUERY_BYTES (default 16384, counted in UTF-8 bytes): a query one byte
    over is refused with 413 naming `$.query`, and no memory's access count moves; one at the
    limit is served."""
    await client.store("a", "cat notes")
    over = "é" * 8192 + "x"  # 16385 bytes in 8193 characters
    reply = await client.call("memory::recall", {"agentId": "a", "query": over})
    assert reply.code == "413" and reply.body["error"]["code"] == "payload_too_large", reply
    assert "$.query" in reply.body["error"]["message"]
    [memory] = await client.recall("a", "cat " * 4096)  # exactly 16384 bytes
    assert memory["accessCount"] == 1
