"""memory::session::list, compact and repair over the bus: contract section 7. What only the
worker shows: the LLM call (its request, chunks, failures and timeout), error codes, the wire
shape. Listing, compaction and repair logic are tested on the handlers in
tests/handlers/test_sessions.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest

from tests.conftest import worker_config
from tests.support import Client
from worker.app import App


class StubLlm:
    """A stand-in for the llm.complete service on the real bus."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests: list[dict[str, Any]] = []
        self.nc: Any = None  # Msg.respond takes no headers: an error reply is published

    async def handle(self, msg: Any) -> None:
        request = msgspec.json.decode(msg.data)
        self.requests.append(request)
        if self.mode == "ok":
            answer = f"LLM summary {len(self.requests)}"
            await msg.respond(msgspec.json.encode({"content": answer}))
        elif self.mode == "empty":
            await msg.respond(msgspec.json.encode({"content": "  "}))
        elif self.mode == "fail":
            await self.nc.publish(
                msg.reply,
                b'{"error": "boom"}',
                headers={"Nats-Service-Error-Code": "500", "Nats-Service-Error": "boom"},
            )
        # "silent": takes the request and never answers, so the worker's llm_timeout runs out.


@pytest.fixture
async def session_worker(nats_url: str, tmp_path: Path) -> AsyncIterator[App]:
    # Only compaction asks the LLM here: the tests count its requests (topics' titles, which
    # ask it too, are tested in tests/test_topics_llm.py).
    config = worker_config(
        nats_url, tmp_path / "memory.db", llm_timeout=1.0, topic_titles="builtin"
    )
    app = App(config)
    await app.start()
    yield app
    await app.stop()


@pytest.fixture
async def llm(nats_url: str) -> AsyncIterator[StubLlm]:
    stub = StubLlm()
    nc = stub.nc = await nats.connect(nats_url)
    await nc.subscribe("llm.complete", cb=stub.handle)
    await nc.flush()
    yield stub
    await nc.close()


@pytest.fixture
async def bus(nats_url: str, session_worker: App) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_url)
    yield Client(nc)
    await nc.close()


async def fill(client: Client, count: int, agent: str = "a", session: str = "s") -> list[str]:
    ids = []
    for index in range(count):
        role = "user" if index % 2 == 0 else "assistant"
        reply = await client.store(
            agent, f"message {index}", sessionId=session, role=role, timestamp=1_000 + index
        )
        ids.append(reply["id"])
    return ids


async def compact(client: Client, **fields: Any) -> Any:
    return await client.call(
        "memory::session::compact", {"agentId": "a", "sessionId": "s", **fields}
    )


@pytest.mark.parametrize(("count", "compacted"), [(29, False), (30, True)])
async def test_compaction_threshold_defaults_to_thirty_and_below_it_no_llm_is_asked(
    bus: Client, llm: StubLlm, count: int, compacted: bool
) -> None:
    await fill(bus, count)
    reply = (await compact(bus)).body
    if not compacted:
        assert reply == {"compacted": False, "reason": "below_threshold"}
        assert llm.requests == []
        return
    assert reply["compacted"] is True and reply["summarizer"] == "llm"
    assert reply["summarized"] == count - 10 and reply["kept"] == 10


async def test_compaction_sends_the_older_messages_to_the_llm_and_stores_its_answer(
    bus: Client, llm: StubLlm
) -> None:
    ids = await fill(bus, 12)
    reply = (await compact(bus, threshold=5, keepRecent=4)).body
    [request] = llm.requests
    assert request["model"] == {
        "provider": "anthropic",
        "model": "claude-haiku-4-5",
        "maxTokens": 1024,
    }
    assert request["systemPrompt"] and request["messages"][0]["role"] == "user"
    text = request["messages"][0]["content"]
    assert text.startswith("user: message 0\n\nassistant: message 1\n\n")
    assert text.endswith("assistant: message 7")
    assert reply["summarized"] == 8 and reply["kept"] == 4 and reply["summaryId"] not in ids
    [session] = (await bus.ok("memory::session::list", {"agentId": "a"}))["sessions"]
    assert session["compactedAt"] is not None and session["messageCount"] == 5


@pytest.mark.parametrize("mode", ["fail", "silent"])
async def test_compaction_falls_back_when_the_llm_fails_or_times_out(
    bus: Client, llm: StubLlm, mode: str
) -> None:
    llm.mode = mode
    await fill(bus, 30)
    reply = (await compact(bus)).body
    assert reply["compacted"] is True and reply["summarizer"] == "fallback"
    [summary] = await bus.recall("a", roles=["system"])
    assert summary["id"] == reply["summaryId"]
    content = summary["content"]
    assert str(content).startswith("Summary of 20 earlier messages") and len(str(content)) <= 8000


async def test_compaction_without_any_llm_service_uses_the_fallback_at_once(bus: Client) -> None:
    await fill(bus, 30)
    reply = await compact(bus)
    assert reply.body["summarizer"] == "fallback"


async def test_a_long_session_is_sent_in_chunks_of_at_most_80000_characters(
    bus: Client, llm: StubLlm
) -> None:
    for index in range(40):
        await bus.store("a", f"{index} " + "é" * 9_000, sessionId="s", timestamp=index)
    reply = (await compact(bus)).body
    assert reply["summarizer"] == "llm"
    chunks = [r["messages"][0]["content"] for r in llm.requests]
    assert len(chunks) >= 3 and all(len(chunk) <= 80_000 for chunk in chunks)
    joined = "".join(chunks)
    assert joined.startswith("user: 0 ") and joined.count("user: ") == 30


async def test_compacting_an_unknown_or_another_agents_session_is_not_found(bus: Client) -> None:
    await fill(bus, 30)
    reply = await bus.call("memory::session::compact", {"agentId": "b", "sessionId": "s"})
    assert reply.code == "404" and reply.body["error"]["code"] == "not_found"
    assert "$.sessionId" in reply.body["error"]["message"]
    reply = await bus.call("memory::session::repair", {"agentId": "a", "sessionId": "nope"})
    assert reply.code == "404"


async def repair(bus: Client) -> Any:
    return await bus.ok("memory::session::repair", {"agentId": "a", "sessionId": "s"})


async def test_repair_replies_its_stats_on_the_wire_and_the_list_shows_repaired_at(
    bus: Client,
) -> None:
    await bus.store("a", "part one", sessionId="s", timestamp=10)
    await bus.store("a", "part two", sessionId="s", timestamp=20)
    reply = await repair(bus)
    assert reply == {
        "repaired": True, "totalFixes": 1,
        "stats": {"emptyRemoved": 0, "duplicatesRemoved": 0, "consecutiveMerged": 1,
                  "orphanedRefs": 0, "reordered": 0, "oversizedDetected": 0},
    }  # fmt: skip
    [session] = (await bus.ok("memory::session::list", {"agentId": "a"}))["sessions"]
    assert session["repairedAt"] is not None and session["messageCount"] == 1
    assert session["createdAt"] <= session["updatedAt"]
