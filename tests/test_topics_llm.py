"""A topic's title, labels and summary from the LLM service over the bus (contract section 21:
from the LLM when it answers in time, else the built-in extract): asked in the background when a
topic reaches 3 messages (and every 12 more), never holding a store up; a silent, failing or
unreadable LLM leaves the built-in text; a topic changed meanwhile keeps what it has."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest

from tests.conftest import worker_config
from tests.support import Client, wait_until
from worker.app import App

TRIP = [
    ("user", "I'm planning a trip to Lisbon in May with my partner, flights and a hotel."),
    ("assistant", "Lisbon in May is lovely. Alfama hotels are central; flights from London."),
    ("user", "Which hotel in Alfama would you pick for a quiet trip?"),
]
ANSWER: dict[str, Any] = {
    "title": "Lisbon trip in May",
    "labels": ["Lisbon", "Alfama", "hotel"],
    "summary": "Planning a quiet May trip to Lisbon; an Alfama hotel is still to be picked.",
}
BUILT_IN_TITLE = "I'm planning a trip to Lisbon in May with my partner, flights and a hotel."


class StubLlm:
    """A stand-in for llm.complete on the real bus: answers `answer`, or holds each request
    (`hold`: answered by `release`), or never answers (`silent`)."""

    def __init__(self) -> None:
        self.mode = "answer"
        self.answer = msgspec.json.encode(ANSWER).decode()
        self.requests: list[dict[str, Any]] = []
        self.held: list[Any] = []

    async def handle(self, msg: Any) -> None:
        self.requests.append(msgspec.json.decode(msg.data))
        if self.mode == "answer":
            await msg.respond(msgspec.json.encode({"content": self.answer}))
        elif self.mode == "hold":
            self.held.append(msg)

    async def release(self) -> None:
        for msg in self.held:
            await msg.respond(msgspec.json.encode({"content": self.answer}))
        self.held.clear()


@pytest.fixture
async def app(nats_url: str, tmp_path: Path) -> AsyncIterator[App]:
    app = App(worker_config(nats_url, tmp_path / "memory.db", llm_timeout=3.0))
    await app.start()
    yield app
    await app.stop()


@pytest.fixture
async def llm(nats_url: str) -> AsyncIterator[StubLlm]:
    stub = StubLlm()
    nc = await nats.connect(nats_url)
    await nc.subscribe("llm.complete", cb=stub.handle)
    await nc.flush()
    yield stub
    await nc.close()


@pytest.fixture
async def client(nats_url: str, app: App) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_url)
    yield Client(nc)
    await nc.close()


async def say(client: Client, turns: Any, session: str = "s", agent: str = "a") -> list[Any]:
    return [await client.store(agent, text, role=role, sessionId=session) for role, text in turns]


async def only_topic(client: Client, session: str = "s") -> dict[str, Any]:
    listed = await client.ok("memory::topic::list", {"agentId": "a", "sessionId": session})
    [topic] = listed["topics"]
    return dict(topic)


async def idle(app: App, llm: StubLlm, asked: int) -> None:
    """Once the LLM was asked `asked` times and the worker is done with every answer."""
    await wait_until(lambda: len(llm.requests) >= asked, f"{asked} llm.complete requests")
    services = app.services
    assert services is not None
    await wait_until(lambda: services.titler.asking() == 0, "the titler idle")


async def title_events(client: Client) -> list[Any]:
    events = (await client.ok("memory::audit", {"agentId": "a"}))["events"]
    return [e for e in events if e["trigger"] == "memory::topic::title"]


async def test_a_topic_of_three_messages_gets_its_title_labels_and_summary_from_the_llm(
    client: Client, llm: StubLlm
) -> None:
    """At its 3rd message (not before) the topic's messages go to llm.complete; its answer
    becomes the title, labels and summary (after the count of messages by role), audited with
    the topic's id only; the next store, a built-in refresh, keeps the LLM's text."""
    replies = await say(client, TRIP[:2])
    topic_id = replies[0]["topicId"]
    assert llm.requests == []
    await say(client, TRIP[2:])
    found = await wait_until(
        lambda: _titled(client, ANSWER["title"]), "the LLM's title on the topic"
    )
    assert found["labels"] == ANSWER["labels"]
    assert found["summary"] == f"3 messages (1 assistant, 2 user). {ANSWER['summary']}"
    [request] = llm.requests
    assert "JSON" in request["systemPrompt"]
    [message] = request["messages"]
    assert message["role"] == "user"
    assert message["content"].startswith(f"user: {TRIP[0][1]}\n\nassistant: {TRIP[1][1]}")
    [event] = await title_events(client)
    assert event["ids"] == [topic_id] and "detail" not in event
    assert "Lisbon" not in str(event)
    await client.store("a", "Is the tram from Alfama easy?", sessionId="s")  # the 4th: a refresh
    after = await only_topic(client)
    assert after["title"] == ANSWER["title"] and after["messageCount"] == 4
    assert after["summary"].startswith("4 messages (1 assistant, 3 user). Planning a quiet")


async def _titled(client: Client, title: str) -> dict[str, Any] | None:
    topic = await only_topic(client)
    return topic if topic["title"] == title else None


async def test_a_silent_llm_leaves_the_built_in_text_and_no_store_waits_for_it(
    app: App, client: Client, llm: StubLlm
) -> None:
    """The LLM takes the request and never answers: the store that made the topic due and the
    next one reply at once (well within the 3 s the worker gives the LLM), and once the LLM's
    time is up the topic keeps its built-in text."""
    llm.mode = "silent"
    await say(client, TRIP[:2])
    started = time.monotonic()
    await say(client, TRIP[2:])
    await wait_until(lambda: llm.requests, "the LLM asked")
    await client.store("a", "Is the tram from Alfama easy?", sessionId="s")
    assert time.monotonic() - started < 1.5  # the LLM has 3 s to answer
    await idle(app, llm, 1)
    topic = await only_topic(client)
    assert topic["title"] == BUILT_IN_TITLE and topic["summary"].startswith("4 messages")
    assert await title_events(client) == []


@pytest.mark.parametrize(
    "answer",
    [
        "Lisbon trip",  # prose, not JSON
        '{"title": "Lisbon trip", "labels": ["Lisbon"]}',  # no summary
        '{"title": " ", "labels": ["Lisbon"], "summary": "A trip."}',  # an empty title
        '{"title": "Lisbon trip", "labels": [], "summary": "A trip."}',  # no label
        '["Lisbon trip", ["Lisbon"], "A trip."]',
    ],
)
async def test_an_answer_that_is_not_the_json_asked_for_leaves_the_built_in_text(
    app: App, client: Client, llm: StubLlm, answer: str
) -> None:
    llm.answer = answer
    await say(client, TRIP)
    await idle(app, llm, 1)
    topic = await only_topic(client)
    assert topic["title"] == BUILT_IN_TITLE
    assert await title_events(client) == []


async def test_a_fenced_json_answer_is_read(app: App, client: Client, llm: StubLlm) -> None:
    """Models often wrap JSON in a ```json block: it is read as the object inside."""
    llm.answer = f"```json\n{msgspec.json.encode(ANSWER).decode()}\n```"
    await say(client, TRIP)
    await wait_until(lambda: _titled(client, ANSWER["title"]), "the LLM's title")


@pytest.mark.parametrize("change", ["memory::delete", "memory::forget"])
async def test_a_topic_that_lost_a_message_while_the_llm_thought_keeps_what_it_has(
    app: App, client: Client, llm: StubLlm, change: str
) -> None:
    """Deleted (the topic with it) or forgotten (its text must not come back) while the LLM
    holds the request: its answer writes nothing, no error, and the worker goes on serving."""
    llm.mode = "hold"
    replies = await say(client, TRIP)
    await wait_until(lambda: llm.held, "the LLM asked")
    ids = [reply["id"] for reply in replies]
    await client.ok(change, {"agentId": "a", "ids": ids if change == "memory::delete" else ids[:1]})
    await llm.release()
    await idle(app, llm, 1)
    listed = await client.ok("memory::topic::list", {"agentId": "a", "sessionId": "s"})
    titles = [topic["title"] for topic in listed["topics"]]
    assert titles == ([] if change == "memory::delete" else [titles[0]])
    assert ANSWER["title"] not in titles
    assert await title_events(client) == []
    assert (await client.store("a", "still serving", sessionId="s2"))["stored"]


async def test_one_request_per_topic_at_a_time_and_none_when_switched_off(
    nats_url: str, tmp_path: Path, app: App, client: Client, llm: StubLlm
) -> None:
    """A topic due again (its 15th message) while its first request is held is not asked
    twice; a worker with MEMORY_WORKER_TOPIC_TITLES=builtin never asks."""
    llm.mode = "hold"
    await say(client, TRIP)
    await wait_until(lambda: llm.held, "the LLM asked")
    for n in range(12):
        await client.store("a", f"Lisbon trip detail {n}: Alfama hotels and trams", sessionId="s")
    assert (await only_topic(client))["messageCount"] == 15
    assert len(llm.requests) == 1
    await llm.release()
    await idle(app, llm, 1)
    await app.stop()  # so that the next worker alone serves
    off = App(worker_config(nats_url, tmp_path / "off.db", topic_titles="builtin"))
    await off.start()
    try:
        await say(client, TRIP, session="t")
        # A worker that asks marks the topic before the store replies (worker/topic_titles.py).
        assert off.services is not None and off.services.titler.asking() == 0
        assert (await only_topic(client, "t"))["title"] == BUILT_IN_TITLE
        assert len(llm.requests) == 1
    finally:
        await off.stop()


async def test_a_stop_does_not_wait_for_the_llm(
    nats_url: str, tmp_path: Path, llm: StubLlm
) -> None:
    """A worker stopping while the LLM holds a topic's request (it has 30 s) abandons it: the
    stop takes well under the 8 s it waits for other work in flight."""
    llm.mode = "silent"
    worker = App(worker_config(nats_url, tmp_path / "stop.db", llm_timeout=30.0))
    await worker.start()
    nc = await nats.connect(nats_url)
    try:
        await say(Client(nc), TRIP)
        await wait_until(lambda: llm.requests, "the LLM asked")
        started = time.monotonic()
        await worker.stop()
        assert time.monotonic() - started < 4.0
    finally:
        await worker.stop()
        await nc.close()


async def test_a_bus_without_an_llm_service_is_not_asked_again_for_a_while(
    nats_url: str, app: App, client: Client
) -> None:
    """Once a title request finds no responder on llm.complete, the next topics due are not
    asked (for QUIET_S), even if an LLM service appears meanwhile: a bus without one is not
    sent a request on every new topic's third store."""
    await say(client, TRIP)
    assert app.services is not None
    titler = app.services.titler
    await wait_until(lambda: titler.quiet() and titler.asking() == 0, "the titler went quiet")
    stub = StubLlm()
    nc = await nats.connect(nats_url)
    try:
        await nc.subscribe("llm.complete", cb=stub.handle)
        await nc.flush()
        await say(client, TRIP, session="t")
        assert titler.asking() == 0  # a topic asked for is marked before its store replies
        assert (await only_topic(client, "t"))["title"] == BUILT_IN_TITLE
        assert stub.requests == []
    finally:
        await nc.close()
