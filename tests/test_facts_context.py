"""Facts in memory::context (contract section 19): after the pinned memories and before the
ranked ones, the agent's current facts sharing a keyword with the query, at most 20, one
`fact: <statement> (since YYYY-MM-DD)` line each; never a past or retracted one; `maxChars`
counts them."""

from __future__ import annotations

from typing import Any

from tests.support import Client

DAY = 86_400_000


async def assert_fact(client: Client, predicate: str, obj: str, **more: Any) -> Any:
    body = {"agentId": "a", "subject": "Maria", "predicate": predicate, "object": obj, **more}
    return (await client.ok("memory::fact::assert", body))["fact"]


async def context(client: Client, query: str, **more: Any) -> Any:
    return await client.ok("memory::context", {"agentId": "a", "query": query, **more})


async def test_current_facts_sharing_a_keyword_come_between_pinned_and_ranked(
    client: Client,
) -> None:
    pinned = await client.store("a", "Maria prefers short answers")
    await client.ok("memory::update", {"agentId": "a", "id": pinned["id"], "pinned": True})
    ranked = await client.store("a", "Maria's cat is called Tofu")
    await assert_fact(client, "lives_in", "Paris", validFrom=0)
    await assert_fact(client, "lives_in", "Berlin", validFrom=40 * DAY)
    tea = await assert_fact(client, "likes", "tea", validFrom=DAY)
    await client.ok("memory::fact::retract", {"agentId": "a", "ids": [tea["id"]]})
    await assert_fact(client, "speaks", "Basque", validFrom=DAY)
    shown = await context(client, "where does the cat live")
    lines = shown["text"].splitlines()
    assert "prefers short answers" in lines[1]
    assert lines[2] == "fact: Maria lives in Berlin (since 1970-02-10)"
    assert "Tofu" in lines[3] and len(lines) == 5
    assert shown["memories"] == [pinned["id"], ranked["id"]]
    assert "Paris" not in shown["text"] and "tea" not in shown["text"]
    assert "Basque" not in shown["text"]  # shares no keyword with the query
    assert "fact:" not in (await context(client, "the of and"))["text"]


async def test_at_most_twenty_fact_lines_and_max_chars_counts_them(client: Client) -> None:
    for n in range(25):
        await assert_fact(client, "likes", f"thing {n:02d}", validFrom=DAY)
    lines = (await context(client, "what does Maria like"))["text"].splitlines()
    facts = [line for line in lines if line.startswith("fact: ")]
    assert len(facts) == 20 and facts[0] == "fact: Maria likes thing 00 (since 1970-01-02)"
    small = await context(client, "what does Maria like", maxChars=200)
    assert small["truncated"] and len(small["text"]) <= 200
    assert small["text"].count("fact: ") < 20
