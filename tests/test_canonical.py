"""Canonical sessions over the bus (contract section 14): memory::canonical::append stores each
message as a memory of the session `canonical:<userId>` and counts it; from section 7's
threshold on the session is compacted (the LLM, or the fallback) and the summary becomes the
canonical one; memory::canonical::get reads it. Refusals, the memory switch and ingestion."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from schema.canonical import CanonicalAppendRequest, CanonicalGetRequest
from tests.support import Client, wait_until
from tests.test_client import CONFIG
from tests.test_life import sql
from tests.test_sessions import StubLlm, bus, llm, session_worker  # noqa: F401 (fixtures)
from worker.app import App
from worker.client import MemoryClient

USER = {"agentId": "a", "userId": "u1"}


async def append(client: Client, content: str, channel: str = "slack", **more: Any) -> Any:
    body = {**USER, "channel": channel, "role": "user", "content": content, **more}
    return await client.call("memory::canonical::append", body)


async def converse(client: Client, count: int) -> list[Any]:
    """`count` messages, user and assistant in turn, from slack then web in turn."""
    replies = []
    for index in range(count):
        role = "user" if index % 2 == 0 else "assistant"
        channel = ("slack", "web")[index % 2]
        reply = await append(client, f"message {index} about the trip", channel, role=role)
        assert reply.ok, reply
        replies.append(reply.body)
    return replies


async def test_thirty_one_messages_over_two_channels_are_compacted_by_the_llm_and_counted(
    bus: Client,  # noqa: F811
    llm: StubLlm,  # noqa: F811
    session_worker: App,  # noqa: F811
) -> None:
    replies = await converse(bus, 31)
    assert [reply["messageCount"] for reply in replies] == list(range(1, 32))
    assert len({reply["id"] for reply in replies}) == 31
    [request] = llm.requests  # compacted once: when the 30th message reached the threshold
    text = request["messages"][0]["content"]
    assert text.startswith("user: message 0 about the trip") and "message 19 " in text
    assert "message 20 " not in text  # the 10 most recent were kept
    got = await bus.ok("memory::canonical::get", USER)
    assert got["summary"] == "LLM summary 1"
    assert got["messageCount"] == 31 and got["lastChannel"] == "slack"
    assert isinstance(got["updatedAt"], int)
    listed = await bus.ok("memory::session::get", {"agentId": "a", "sessionId": "canonical:u1"})
    messages = listed["messages"]
    assert len(messages) == 12 and messages[0]["content"] == "LLM summary 1"
    assert [m["id"] for m in messages[2:]] == [reply["id"] for reply in replies[21:]]
    # The messages are memories: recall finds them, with their channel.
    [found] = await bus.recall("a", "message 30 about the trip", limit=1)
    assert found["id"] == replies[30]["id"] and found["metadata"] == {"channel": "slack"}
    events = (await bus.ok("memory::audit", {"agentId": "a"}))["events"]
    assert {e["trigger"] for e in events} == {"memory::canonical::append"}
    assert len(events) == 32
    [compaction] = [e for e in events if "compacted" in e.get("detail", {})]
    assert compaction["detail"] == {"compacted": 20} and compaction["ids"] == [messages[0]["id"]]


async def test_without_an_llm_the_fallback_summary_becomes_the_canonical_summary(
    bus: Client,  # noqa: F811
) -> None:
    await converse(bus, 30)
    got = await bus.ok("memory::canonical::get", USER)
    assert str(got["summary"]).startswith("Summary of 20 earlier messages")
    assert got["messageCount"] == 30 and got["lastChannel"] == "web"


async def test_below_the_threshold_nothing_is_compacted_and_the_summary_is_null(
    bus: Client,  # noqa: F811
    llm: StubLlm,  # noqa: F811
) -> None:
    await converse(bus, 29)
    got = await bus.ok("memory::canonical::get", USER)
    assert got["summary"] is None and got["messageCount"] == 29 and llm.requests == []


async def test_an_unknown_user_or_another_agents_user_is_not_found(
    bus: Client,  # noqa: F811
) -> None:
    assert (await append(bus, "hello")).ok
    for asked in ({**USER, "userId": "u2"}, {**USER, "agentId": "b"}):
        reply = await bus.call("memory::canonical::get", asked)
        assert reply.code == "404" and "`$.userId`" in reply.body["error"]["message"], reply


async def test_bad_input_is_refused_naming_the_field_and_writes_nothing(
    bus: Client,  # noqa: F811
    session_worker: App,  # noqa: F811
) -> None:
    base = {**USER, "channel": "slack", "role": "user", "content": "hi"}
    for payload, field in (
        ({k: v for k, v in base.items() if k != "userId"}, "`userId`"),
        ({**base, "userId": ""}, "$.userId"),
        ({**base, "userId": "  "}, "$.userId"),
        ({**base, "userId": "x" * 247}, "$.userId"),
        ({k: v for k, v in base.items() if k != "channel"}, "`channel`"),
        ({**base, "channel": " "}, "$.channel"),
        ({k: v for k, v in base.items() if k != "content"}, "`content`"),
        ({**base, "content": " \n "}, "$.content"),
        ({**base, "role": "bot"}, "$.role"),
        ({k: v for k, v in base.items() if k != "role"}, "`role`"),
    ):
        reply = await bus.call("memory::canonical::append", payload)
        assert reply.code == "400", (payload, reply)
        assert field in reply.body["error"]["message"], (payload, reply.body)
    bad_get = await bus.call("memory::canonical::get", {"agentId": "a", "userId": ""})
    assert bad_get.code == "400" and "$.userId" in bad_get.body["error"]["message"]
    for table in ("memories", "sessions", "canonical_sessions", "audit"):
        assert sql(session_worker, f"SELECT count(*) FROM {table}") == [(0,)], table


async def test_a_switched_off_agent_stores_and_counts_nothing(
    bus: Client,  # noqa: F811
    session_worker: App,  # noqa: F811
) -> None:
    assert (await append(bus, "before")).body["messageCount"] == 1
    await bus.ok("memory::toggle", {"agentId": "a", "enabled": False})
    reply = await append(bus, "said in private", "web")
    assert reply.body == {"id": None, "messageCount": 1, "disabled": True}
    got = await bus.ok("memory::canonical::get", USER)
    assert got["messageCount"] == 1 and got["lastChannel"] == "slack"
    assert sql(session_worker, "SELECT count(*) FROM memories") == [(1,)]
    stranger = await bus.call(
        "memory::canonical::append",
        {"agentId": "a", "userId": "u9", "channel": "web", "role": "user", "content": "x"},
    )
    assert stranger.body == {"id": None, "messageCount": 0, "disabled": True}
    assert (await bus.call("memory::canonical::get", {"agentId": "a", "userId": "u9"})).code == (
        "404"
    )
    await bus.ok("memory::toggle", {"agentId": "a", "enabled": True})
    assert (await append(bus, "after")).body["messageCount"] == 2


async def test_an_append_through_durable_ingestion_is_stored_counted_and_audited(
    bus: Client,  # noqa: F811
    session_worker: App,  # noqa: F811
) -> None:
    assert (await append(bus, "over the bus")).ok
    body = {**USER, "channel": "email", "role": "user", "content": "through the stream"}
    await bus.nc.jetstream().publish("memory.ingest.canonical.append", msgspec.json.encode(body))
    await wait_until(
        lambda: sql(session_worker, "SELECT message_count FROM canonical_sessions") == [(2,)],
        "both ingested messages appended",
    )
    got = await bus.ok("memory::canonical::get", USER)
    assert got["lastChannel"] == "email"
    events = (await bus.ok("memory::audit", {"agentId": "a"}))["events"]
    assert [(e["trigger"], e["source"]) for e in events] == [
        ("memory::canonical::append", "bus"),
        ("memory::canonical::append", "ingest"),
    ]


async def test_the_python_client_appends_and_gets(nats_url: str, session_worker: App) -> None:  # noqa: F811
    async with await MemoryClient.connect(nats_url, config=CONFIG) as memory:
        appended = await memory.canonical_append(
            CanonicalAppendRequest(
                agent_id="a", user_id="u1", channel="voice", role="user", content="hi there"
            )
        )
        assert appended.message_count == 1 and appended.id is not None
        got = await memory.canonical_get(CanonicalGetRequest(agent_id="a", user_id="u1"))
        assert (got.last_channel, got.message_count, got.summary) == ("voice", 1, None)


async def test_two_appends_reaching_the_threshold_together_compact_once(
    bus: Client,  # noqa: F811
    llm: StubLlm,  # noqa: F811
    captured_logs: list[Any],
) -> None:
    """Both plan a compaction while the LLM is slow (it times out: the fallback); the first
    writes it, the second finds the list changed, leaves it, and its append still succeeds."""
    await converse(bus, 29)
    llm.mode = "slow"
    both = await asyncio.gather(append(bus, "thirty"), append(bus, "thirty-one", "web"))
    assert sorted(reply.body["messageCount"] for reply in both) == [30, 31]
    events = (await bus.ok("memory::audit", {"agentId": "a"}))["events"]
    assert len([e for e in events if e.get("detail", {}).get("compacted")]) == 1
    listed = await bus.ok("memory::session::get", {"agentId": "a", "sessionId": "canonical:u1"})
    roles = [m["role"] for m in listed["messages"]]
    assert roles[0] == "system" and roles.count("system") == 1
    got = await bus.ok("memory::canonical::get", USER)
    assert got["messageCount"] == 31 and str(got["summary"]).startswith("Summary of 2")
    assert "canonical.compaction_raced" in {event["event"] for event in captured_logs}
