"""memory::context over the bus (contract section 13): the agent's pinned memories first, then
recall's ranking, as one block of dated lines an agent puts in its prompt."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handlers.context import FOOTER, HEADER
from tests.handlers.test_context import HOSTILE, assert_sealed
from tests.support import Client, wait_until

DAY = 86_400_000
# 2026-11-30 12:00 UTC
NOON = 1_796_040_000_000


async def context(client: Client, agent: str = "a", **fields: Any) -> Any:
    return await client.ok("memory::context", {"agentId": agent, **fields})


def lines(body: Any) -> list[str]:
    text: str = body["text"]
    assert text.startswith(HEADER + "\n") and text.endswith("\n" + FOOTER)
    return text.split("\n")[1:-1]


async def test_the_reply_is_text_ids_and_truncated_with_the_pinned_memories_first(
    client: Client,
) -> None:
    """Pinned and `always` memories come first (not repeated among the ranked), then the
    ranked ones by recall's order, each `YYYY-MM-DD role: content`; `limit` counts the ranked."""
    pinned = (await client.store("a", "pinned deploy fact", timestamp=NOON))["id"]
    await client.ok("memory::update", {"agentId": "a", "id": pinned, "pinned": True})
    always = (await client.store("a", "always core", recallPolicy="always", timestamp=NOON))["id"]
    best = (await client.store("a", "deploy deploy", role="assistant", timestamp=NOON))["id"]
    await client.store("a", "unrelated", timestamp=NOON - DAY)
    body = await context(client, query="deploy", limit=1)
    assert set(body) == {"text", "memories", "truncated"} and body["truncated"] is False
    assert body["memories"][:2] in ([pinned, always], [always, pinned])
    assert body["memories"][2:] == [best]
    assert sorted(lines(body)[:2]) == ["2026-11-30 user: always core",
                                       "2026-11-30 user: pinned deploy fact"]  # fmt: skip
    assert lines(body)[2] == "2026-11-30 assistant: deploy deploy"


async def test_restricted_memories_are_left_out_unless_max_sensitivity_is_restricted(
    client: Client,
) -> None:
    """Context's one default filter; a restricted pinned memory is left out too."""
    secret = (await client.store("a", "restricted note", sensitivity="restricted"))["id"]
    core = (await client.store("a", "restricted core", sensitivity="restricted"))["id"]
    await client.ok("memory::update", {"agentId": "a", "id": core, "pinned": True})
    shown = (await client.store("a", "public note", sensitivity="public"))["id"]
    assert (await context(client, query="note"))["memories"] == [shown]
    everything = await context(client, query="note", maxSensitivity="restricted")
    assert everything["memories"][0] == core
    assert set(everything["memories"]) == {secret, core, shown}
    public = await context(client, query="note", maxSensitivity="public")
    assert public["memories"] == [shown]


async def test_never_forgotten_and_filtered_out_memories_are_absent(client: Client) -> None:
    """recallPolicy `never` and forgotten memories never appear; recall's filters apply."""
    await client.store("a", "never shown", recallPolicy="never")
    gone = (await client.store("a", "forgotten one"))["id"]
    await client.ok("memory::forget", {"agentId": "a", "ids": [gone]})
    fact = (await client.store("a", "a fact", category="fact"))["id"]
    note = (await client.store("a", "a note"))["id"]
    assert set((await context(client))["memories"]) == {fact, note}
    assert (await context(client, category=["fact"]))["memories"] == [fact]
    assert (await context(client, roles=["system"]))["memories"] == []


async def test_an_unknown_agent_gets_just_the_header_and_footer(client: Client) -> None:
    await client.store("someone-else", "not yours")
    body = await context(client, "nobody", query="yours")
    assert body == {"text": f"{HEADER}\n{FOOTER}", "memories": [], "truncated": False}


async def test_a_long_context_is_cut_to_max_chars_and_says_so(client: Client) -> None:
    for n in range(30):
        await client.store("a", f"memory number {n} " + "x" * 80)
    body = await context(client, maxChars=500, limit=30)
    assert len(body["text"]) <= 500 and body["truncated"] is True
    assert 1 <= len(body["memories"]) < 30
    assert (await context(client, maxChars=100_000, limit=30))["truncated"] is False


async def test_the_ranked_memories_in_a_context_count_an_access_as_recall_does(
    client: Client,
) -> None:
    """The count reaches the database by the write that follows the reply (as a recall's does,
    docs/triggers.md), so memory::get shows it once that is in."""
    memory_id = (await client.store("a", "counted"))["id"]
    await context(client, query="counted")

    async def count() -> int:
        body = await client.ok("memory::get", {"agentId": "a", "ids": [memory_id]})
        return int(body["memories"][0]["accessCount"])

    await wait_until(count, "the context's access counted in the database")
    assert await count() == 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"maxChars": 199}, "$.maxChars"),
        ({"maxChars": 100_001}, "$.maxChars"),
        ({"maxChars": "4000"}, "$.maxChars"),
        ({"limit": 0}, "$.limit"),
        ({"limit": 101}, "$.limit"),
        ({"maxSensitivity": "secret"}, "$.maxSensitivity"),
        ({"category": "gossip"}, "$.category"),
        ({"withPinned": True}, "withPinned"),
        ({"query": "q" * 20_000}, "$.query"),
    ],
)
async def test_bad_context_requests_are_refused_naming_the_field(
    client: Client, fields: dict[str, Any], field: str
) -> None:
    reply = await client.call("memory::context", {"agentId": "a", **fields})
    assert reply.code in ("400", "413") and field in (reply.description or ""), reply


AGENTS = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    contents=st.lists(HOSTILE.filter(lambda text: bool(text.strip())), min_size=1, max_size=5),
    always=st.lists(st.booleans(), min_size=5, max_size=5),
    summary=st.none() | HOSTILE.map(lambda text: text[:200]).filter(lambda t: bool(t.strip())),
    max_chars=st.integers(200, 1200),
)
async def test_no_stored_memory_can_close_the_block_and_context_never_exceeds_max_chars(
    client: Client, contents: list[str], always: list[bool], summary: str | None, max_chars: int
) -> None:
    """Whatever is stored (marker text, look-alike and invisible-split brackets, line breaks,
    long content with a summary), the reply is one sealed block within maxChars."""
    agent = f"p{next(AGENTS)}"
    for n, content in enumerate(contents):
        policy = "always" if always[n] else "auto"
        extra = {} if summary is None else {"summary": summary}
        await client.store(agent, content * (1 + 600 // len(content) * (n % 2)),
                           recallPolicy=policy, **extra)  # fmt: skip
    body = await context(client, agent, query=contents[0][:50], maxChars=max_chars)
    assert_sealed(body["text"], max_chars)
    assert len(body["memories"]) == len(set(body["memories"]))


async def test_an_agent_whose_memory_is_switched_off_gets_just_the_header_and_footer(
    client: Client,
) -> None:
    """Section 17: while disabled, context returns nothing; enabled again, everything is back."""
    memory_id = (await client.store("a", "kept while off"))["id"]
    await client.ok("memory::toggle", {"agentId": "a", "enabled": False})
    assert (await context(client))["text"] == f"{HEADER}\n{FOOTER}"
    await client.ok("memory::toggle", {"agentId": "a", "enabled": True})
    assert (await context(client))["memories"] == [memory_id]
