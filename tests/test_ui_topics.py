"""The memory browser's topic pages over HTTP (contract sections 20 and 21) against a live worker:
a session's topics most recently active first with their text and open loops, a topic's
messages in session order in pages beneath its resume text, another token's agent, a second
tenant, and topic text that is markup shown as text."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from schema.memory import StoreRequest
from tests.conftest import worker_config
from tests.shipped_nats import connect_as, tenant_bus
from tests.ui_support import TOKENS, browser_over, sign_in, token_file
from worker.app import App
from worker.client import MemoryClient
from worker.ui.topic_pages import MESSAGES_SHOWN

CLIENT = worker_config("", Path("unused.db"))
HOSTILE = '<script>alert("x")</script><img src=x onerror="alert(1)"> & "quotes"'
TRIP = [
    ("user", "I'm planning a trip to Lisbon in May with my partner, flights and a hotel."),
    ("assistant", "Lisbon in May is lovely. Alfama hotels are central; flights from London."),
    ("user", "Which hotel in Alfama would you pick for a quiet trip?"),
]
BUG = [
    ("user", "Our Python service crashes with a KeyError when the config file lacks a port."),
    ("assistant", "The crash comes from reading config['port'] directly. I'll check the loader."),
]


@pytest.fixture
async def memory(nats_url: str, worker: App) -> AsyncIterator[MemoryClient]:
    async with await MemoryClient.connect(nats_url, config=CLIENT) as client:
        yield client


async def say(memory: MemoryClient, agent: str, session: str, turns: Any, **more: Any) -> list[Any]:
    replies = []
    for role, text in turns:
        request = StoreRequest(agent_id=agent, content=text, role=role, session_id=session, **more)
        replies.append(await memory.store(request))
    return replies


def topic_sections(page: str) -> list[str]:
    """The topics page's sections, one per topic, in page order."""
    return re.findall(r"<section class=\"memory[^\"]*\">(.*?)</section>", page, re.S)


def resume_text(page: str) -> str:
    found = re.search(r'<pre class="content resume">(.*?)</pre>', page, re.S)
    return "" if found is None else html.unescape(found.group(1))


async def test_a_sessions_topics_are_listed_most_recently_active_first_with_their_text(
    memory: MemoryClient, tmp_path: Path
) -> None:
    """The sessions page links to the session's topics; the bug (latest) comes first, marked
    active; the trip shows its title, labels, summary, message count, first and last active,
    and its open question linking to the message that asked it; each links to its page."""
    trip = await say(memory, "alice-1", "s1", TRIP, timestamp=1_000_000)
    bug = await say(memory, "alice-1", "s1", BUG, timestamp=120_000_000)
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        sessions = await http.get("/sessions", params={"agent": "alice-1"})
        assert 'href="/topics?agent=alice-1&amp;session=s1"' in sessions.text
        transcript = await http.get("/session", params={"agent": "alice-1", "session": "s1"})
        assert 'href="/topics?agent=alice-1&amp;session=s1"' in transcript.text
        page = await http.get("/topics", params={"agent": "alice-1", "session": "s1"})
        assert page.status_code == 200
        first, second = topic_sections(page.text)
        assert f'href="/topic?agent=alice-1&amp;id={bug[0].topic_id}"' in first
        assert '<span class="tag">active</span>' in first and "KeyError" in first
        assert f'href="/topic?agent=alice-1&amp;id={trip[0].topic_id}"' in second
        assert "active</span>" not in second
        assert re.search(r"<h2><a [^>]*>[^<]*Lisbon", second)
        assert '<span class="tag">lisbon</span>' in second.lower()
        assert "3 messages (1 assistant, 2 user)." in second
        assert "<dt>Messages</dt><dd>3</dd>" in second
        assert "1970-01-01 00:16 UTC" in second  # first and last active, the trip's timestamp
        assert "1970-01-02 09:20 UTC" in first
        loop = second.split('<ul class="loops">')[1]
        assert "question</span> (user)" in loop and "Which hotel in Alfama" in loop
        assert f'href="/memory?agent=alice-1&amp;id={trip[2].id}"' in loop
        assert "promise</span> (assistant)" in first.split('<ul class="loops">')[1]
        opened = await http.get("/memory", params={"agent": "alice-1", "id": trip[2].id})
        assert opened.status_code == 200 and "Which hotel in Alfama" in opened.text


async def test_a_topic_shows_its_messages_in_session_order_in_pages_and_its_resume_text(
    memory: MemoryClient, tmp_path: Path
) -> None:
    """A topic of 55 messages interleaved with another: the first page shows 50 in session
    order (positions the session's) with a next link, and what memory::session::resume gives
    for it (its latest messages, none of the other topic's); the next page shows the last 5,
    no next link and no resume text."""
    for n in range(55):
        await memory.store(
            StoreRequest(
                agent_id="alice-1", session_id="s1", topic_id="trip",
                content=f"Trip step {n}: booked item number {n} for the Lisbon journey.",
            )
        )  # fmt: skip
        if n % 10 == 0:
            await memory.store(
                StoreRequest(
                    agent_id="alice-1", session_id="s1", topic_id="bug",
                    content=f"Bug note {n}: the config loader raises KeyError on port.",
                )
            )  # fmt: skip
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        first = await http.get("/topic", params={"agent": "alice-1", "id": "trip"})
        assert first.status_code == 200
        steps = [int(n) for n in re.findall(r"Trip step (\d+):", first.text.split("<ol")[1])]
        assert steps == list(range(MESSAGES_SHOWN))
        positions = [int(p) for p in re.findall(r'<li value="(\d+)">', first.text)]
        assert positions[:3] == [1, 3, 4] and positions == sorted(positions)  # bug note at 2
        assert "Bug note" not in first.text
        assert "<dt>Messages</dt><dd>55</dd>" in first.text
        resumed = resume_text(first.text)
        assert "Trip step 54:" in resumed and "Bug note" not in resumed
        following = re.search(r'<a rel="next" href="([^"]+)">', first.text)
        assert following is not None
        rest = await http.get(html.unescape(following.group(1)))
        assert rest.status_code == 200
        steps = [int(n) for n in re.findall(r"Trip step (\d+):", rest.text.split("<ol")[1])]
        assert steps == list(range(MESSAGES_SHOWN, 55))
        assert 'rel="next"' not in rest.text and resume_text(rest.text) == ""
        missing = await http.get("/topic", params={"agent": "alice-1", "id": "no-such"})
        assert missing.status_code == 404


async def test_another_tokens_agents_topics_are_refused_and_nothing_of_them_shows(
    memory: MemoryClient, tmp_path: Path
) -> None:
    """bob's topics with alice's session: naming bob is 403; naming alice with bob's topic id
    or session finds nothing (404); no page shows his text."""
    bobs = await say(memory, "bob-1", "s1", TRIP)
    await say(memory, "alice-1", "s2", BUG)
    tokens = token_file(tmp_path, {"alice": ["alice-*"], "bob": ["bob-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        for path, params, status in (
            ("/topics", {"agent": "bob-1", "session": "s1"}, 403),
            ("/topic", {"agent": "bob-1", "id": bobs[0].topic_id}, 403),
            ("/topics", {"agent": "alice-1", "session": "s1"}, 404),
            ("/topic", {"agent": "alice-1", "id": bobs[0].topic_id}, 404),
        ):
            refused = await http.get(path, params=params)
            assert refused.status_code == status, (path, params)
            assert "Lisbon" not in refused.text and "Alfama" not in refused.text


async def test_topic_text_that_is_markup_is_shown_as_text(
    memory: MemoryClient, tmp_path: Path
) -> None:
    """A topic whose id, title, summary, open loop and messages hold <script> and <img onerror>
    (agent and session ids too) is escaped on every page that shows it, under the CSP."""
    agent, session, topic = "alice-<b>bold</b>", "s<i>", "<script>t</script>"
    await say(
        memory, agent, session, [("user", f"{HOSTILE} which hotel in Lisbon would you pick?")],
        topic_id=topic,
    )  # fmt: skip
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        pages = [
            await http.get("/sessions", params={"agent": agent}),
            await http.get("/session", params={"agent": agent, "session": session}),
            await http.get("/topics", params={"agent": agent, "session": session}),
            await http.get("/topic", params={"agent": agent, "id": topic}),
        ]
        for answer in pages:
            assert answer.status_code == 200, answer.url
            assert "<script" not in answer.text.lower() and "<img" not in answer.text.lower()
            assert "<b>bold" not in answer.text and "<i>" not in answer.text
            assert "unsafe-inline" not in answer.headers["content-security-policy"]
        escaped = "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror="
        for shown in (pages[2].text, pages[3].text):
            assert escaped in shown  # the title, the open loop, the message
            assert "question</span> (user)" in shown
        assert 'href="/topic?agent=alice-%3Cb%3Ebold%3C%2Fb%3E&amp;id=%3Cscript%3Et' in (
            pages[2].text
        )
        assert escaped in pages[3].text.split('<pre class="content resume">')[1]


async def test_a_second_tenants_browser_sees_none_of_the_first_tenants_sessions_or_topics(
    tmp_path: Path,
) -> None:
    """TEAM_A's agent's session and topic, from a browser with TEAM_B's credentials and a token
    matching every agent: no session listed, the topics and the topic not found (404); with
    TEAM_B's own session of the same agent and id, only TEAM_B's topic is shown."""
    async with tenant_bus(tmp_path) as bus:
        alice = MemoryClient(await connect_as(bus.url, "alice"), url=bus.url)
        carol = MemoryClient(await connect_as(bus.url, "carol"), url=bus.url)
        try:
            theirs = await say(alice, "team-a-planner", "trip-session", TRIP)
            tokens = token_file(tmp_path, {"all": ["*"]})
            async with browser_over(carol, tokens) as http:
                await sign_in(http, TOKENS["all"])
                agent = {"agent": "team-a-planner"}
                sessions = await http.get("/sessions", params=agent)
                assert sessions.status_code == 200 and "trip-session" not in sessions.text
                for path, params in (
                    ("/session", {**agent, "session": "trip-session"}),
                    ("/topics", {**agent, "session": "trip-session"}),
                    ("/topic", {**agent, "id": theirs[0].topic_id}),
                ):
                    answer = await http.get(path, params=params)
                    assert answer.status_code == 404, path
                    assert "Lisbon" not in answer.text and "Alfama" not in answer.text
                ours = await say(carol, "team-a-planner", "trip-session", BUG)
                page = await http.get("/topics", params={**agent, "session": "trip-session"})
                assert page.status_code == 200 and "Lisbon" not in page.text
                [only] = topic_sections(page.text)
                assert f"id={ours[0].topic_id}" in only and "KeyError" in only
        finally:
            await alice.close()
            await carol.close()
