"""memory::session::list, compact and repair over the bus: contract section 7."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import apsw
import msgspec
import nats
import pytest

from handlers.session import chunk_text, fallback_summary
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
        elif self.mode == "slow":
            await asyncio.sleep(3)


@pytest.fixture
async def session_worker(nats_url: str, tmp_path: Path) -> AsyncIterator[App]:
    app = App(worker_config(nats_url, tmp_path / "memory.db", llm_timeout=1.0))
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


def db(app: App) -> apsw.Connection:
    conn = apsw.Connection(app.config.db_path)
    conn.set_busy_timeout(5000)
    return conn


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


async def test_list_is_newest_first_with_counts(bus: Client) -> None:
    await fill(bus, 3, session="old")
    await fill(bus, 2, session="new")
    await bus.store("b", "other agent", sessionId="theirs")
    sessions = (await bus.ok("memory::session::list", {"agentId": "a"}))["sessions"]
    assert [(s["id"], s["messageCount"]) for s in sessions] == [("new", 2), ("old", 3)]
    assert sessions[0]["compactedAt"] is None and sessions[0]["repairedAt"] is None
    assert sessions[0]["createdAt"] <= sessions[0]["updatedAt"]
    assert (await bus.ok("memory::session::list", {"agentId": "nobody"})) == {"sessions": []}


@pytest.mark.parametrize(("count", "compacted"), [(29, False), (30, True), (31, True)])
async def test_compaction_threshold_defaults_to_thirty(
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


async def test_compaction_stores_the_summary_and_rewrites_the_list(
    bus: Client, llm: StubLlm, session_worker: App
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
    conn = db(session_worker)
    [(content, role, importance, session_id, timestamp)] = conn.execute(
        "SELECT content, role, importance, session_id, timestamp FROM memories WHERE id = ?",
        (reply["summaryId"],),
    ).fetchall()
    assert (content, role, importance, session_id) == ("LLM summary 1", "system", 0.9, "s")
    assert timestamp == 1_007
    order = "SELECT memory_id FROM session_messages WHERE session_id = 's' ORDER BY position"
    refs = [row[0] for row in conn.execute(order)]
    assert refs == [reply["summaryId"], *ids[8:]]
    [(count,)] = conn.execute("SELECT count(*) FROM memories WHERE agent_id = 'a'").fetchall()
    assert count == 13  # the summarised memories stay in the store
    [session] = (await bus.ok("memory::session::list", {"agentId": "a"}))["sessions"]
    assert session["compactedAt"] is not None and session["messageCount"] == 5


@pytest.mark.parametrize("mode", ["fail", "slow", "empty"])
async def test_compaction_falls_back_when_the_llm_fails(
    bus: Client, llm: StubLlm, session_worker: App, mode: str
) -> None:
    llm.mode = mode
    await fill(bus, 30)
    reply = (await compact(bus)).body
    assert reply["compacted"] is True and reply["summarizer"] == "fallback"
    [(content,)] = (
        db(session_worker)
        .execute("SELECT content FROM memories WHERE id = ?", (reply["summaryId"],))
        .fetchall()
    )
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


def test_chunking_cuts_after_the_last_newline_and_loses_nothing() -> None:
    text = ("line of text ü\n" * 20_000) + "x" * 100_000
    chunks = chunk_text(text)
    assert "".join(chunks) == text
    assert all(len(chunk) <= 80_000 for chunk in chunks)
    assert chunks[0].endswith("\n") and len(chunks[0]) == 80_000 - 80_000 % 15
    assert chunk_text("y" * 160_001) == ["y" * 80_000, "y" * 80_000, "y"]
    assert chunk_text("") == []


def test_fallback_summary_is_deterministic_bounded_and_non_empty() -> None:
    lines = [("user" if i % 2 else "assistant", f"point {i}. " + "z" * 500) for i in range(2000)]
    summary = fallback_summary(lines)
    assert summary == fallback_summary(lines) and 0 < len(summary) <= 8000
    assert summary.startswith("Summary of 2000 earlier messages (1000 assistant, 1000 user).")
    assert fallback_summary([]) != ""


async def test_compacting_an_unknown_or_another_agents_session_is_not_found(bus: Client) -> None:
    await fill(bus, 30)
    reply = await bus.call("memory::session::compact", {"agentId": "b", "sessionId": "s"})
    assert reply.code == "404" and reply.body["error"]["code"] == "not_found"
    assert "$.sessionId" in reply.body["error"]["message"]
    reply = await bus.call("memory::session::repair", {"agentId": "a", "sessionId": "nope"})
    assert reply.code == "404"


def write_refs(app: App, refs: list[tuple[str | None, str, int]]) -> None:
    conn = db(app)
    with conn:
        conn.execute("DELETE FROM session_messages WHERE agent_id = 'a' AND session_id = 's'")
        conn.executemany(
            "INSERT INTO session_messages VALUES ('a', 's', ?, ?, ?, ?)",
            [(n, memory_id, role, ts) for n, (memory_id, role, ts) in enumerate(refs, 1)],
        )


def read_refs(app: App) -> list[tuple[str | None, str, int]]:
    return [
        (row[0], row[1], row[2])
        for row in db(app).execute(
            "SELECT memory_id, role, timestamp FROM session_messages "
            "WHERE agent_id = 'a' AND session_id = 's' ORDER BY position"
        )
    ]


async def repair(bus: Client) -> Any:
    return await bus.ok("memory::session::repair", {"agentId": "a", "sessionId": "s"})


def fixes(reply: Any) -> dict[str, int]:
    return {key: value for key, value in reply["stats"].items() if value}


@pytest.mark.parametrize(
    ("broken", "expected_stats"),
    [
        ("empty", {"emptyRemoved": 2}),
        ("duplicate", {"duplicatesRemoved": 1}),
        ("orphan", {"orphanedRefs": 1}),
        ("reorder", {"reordered": 1}),
    ],
)
async def test_each_repair_phase_on_its_own(
    bus: Client, session_worker: App, broken: str, expected_stats: dict[str, int]
) -> None:
    ids = await fill(bus, 3)
    good = [(ids[0], "user", 1000), (ids[1], "assistant", 1001), (ids[2], "user", 1002)]
    refs: list[tuple[str | None, str, int]] = list(good)
    if broken == "empty":
        refs = [refs[0], (None, "user", 1000), refs[1], ("", "assistant", 1001), refs[2]]
    elif broken == "duplicate":
        refs = [*refs, refs[1]]
    elif broken == "orphan":
        refs = [refs[0], ("no-such-memory", "assistant", 1001), refs[1], refs[2]]
    elif broken == "reorder":
        refs = [refs[0], (ids[1], "assistant", 999), refs[2]]
    write_refs(session_worker, refs)
    reply = await repair(bus)
    assert reply["repaired"] is True and fixes(reply) == expected_stats
    assert reply["totalFixes"] == sum(expected_stats.values())
    after = read_refs(session_worker)
    if broken == "reorder":
        assert after == [good[0], (ids[1], "assistant", 1001), good[2]]
    else:
        assert after == good
    assert (await repair(bus))["totalFixes"] == 0


async def test_repair_merges_consecutive_same_role_messages_into_a_new_memory(
    bus: Client, session_worker: App
) -> None:
    first = (await bus.store("a", "part one", sessionId="s", timestamp=10, importance=0.3))["id"]
    second = (await bus.store("a", "part two", sessionId="s", timestamp=20, importance=0.8))["id"]
    third = (await bus.store("a", "answer", sessionId="s", role="assistant", timestamp=30))["id"]
    reply = await repair(bus)
    assert fixes(reply) == {"consecutiveMerged": 1} and reply["repaired"] is True
    [merged, answer] = read_refs(session_worker)
    assert answer == (third, "assistant", 30) and merged[1:] == ("user", 10)
    conn = db(session_worker)
    [(content, importance, timestamp, session_id)] = conn.execute(
        "SELECT content, importance, timestamp, session_id FROM memories WHERE id = ?",
        (merged[0],),
    ).fetchall()
    assert (content, importance, timestamp, session_id) == ("part one\n\npart two", 0.8, 10, "s")
    originals = conn.execute(
        "SELECT count(*) FROM memories WHERE id IN (?, ?)", (first, second)
    ).fetchall()
    assert originals == [(2,)]
    second_repair = await repair(bus)
    assert second_repair["repaired"] is False and second_repair["totalFixes"] == 0
    [session] = (await bus.ok("memory::session::list", {"agentId": "a"}))["sessions"]
    assert session["repairedAt"] is not None


async def test_system_messages_are_never_merged_and_oversize_is_only_counted(
    bus: Client, session_worker: App
) -> None:
    await bus.store("a", "rule one", sessionId="s", role="system", timestamp=1)
    await bus.store("a", "rule two", sessionId="s", role="system", timestamp=2)
    await bus.store("a", "y" * 500_001, sessionId="s", timestamp=3)
    before = read_refs(session_worker)
    reply = await repair(bus)
    assert reply == {
        "repaired": False, "totalFixes": 0,
        "stats": {"emptyRemoved": 0, "duplicatesRemoved": 0, "consecutiveMerged": 0,
                  "orphanedRefs": 0, "reordered": 0, "oversizedDetected": 1},
    }  # fmt: skip
    assert read_refs(session_worker) == before
    [session] = (await bus.ok("memory::session::list", {"agentId": "a"}))["sessions"]
    assert session["repairedAt"] is None


async def test_an_orphan_between_two_same_role_messages_is_dropped_then_they_merge(
    bus: Client, session_worker: App
) -> None:
    one = (await bus.store("a", "first", sessionId="s", timestamp=1))["id"]
    two = (await bus.store("a", "second", sessionId="s", timestamp=3))["id"]
    write_refs(session_worker, [(one, "user", 1), ("gone", "assistant", 2), (two, "user", 3)])
    reply = await repair(bus)
    assert fixes(reply) == {"orphanedRefs": 1, "consecutiveMerged": 1}
    assert len(read_refs(session_worker)) == 1
