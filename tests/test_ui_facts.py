"""The memory browser's facts page over HTTP (contract sections 19 and 20) against a live
worker: the current facts with their source memories, what held on a day, each subject and
predicate's values in order, retracting after a confirmation, another token's agent, a second
tenant, and fact text that is markup shown as text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from schema.facts import FactAssertRequest, FactQueryRequest
from schema.memory import StoreRequest
from tests.conftest import worker_config
from tests.shipped_nats import connect_as, tenant_bus
from tests.ui_support import TOKENS, browser_over, post, sign_in, token_file
from worker.app import App
from worker.client import MemoryClient

CLIENT = worker_config("", Path("unused.db"))
HOSTILE = '<script>alert("x")</script><img src=x onerror="alert(1)"> & "quotes"'


def day(text: str) -> int:
    return int(datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC).timestamp() * 1000)


@pytest.fixture
async def memory(nats_url: str, worker: App) -> AsyncIterator[MemoryClient]:
    async with await MemoryClient.connect(nats_url, config=CLIENT) as client:
        yield client


async def moves(memory: MemoryClient, agent: str) -> tuple[str, str, str]:
    """Maria lived in Paris from 2025-01-10, in Berlin from 2026-03-01 (said in a memory), and
    likes tea: the Berlin memory's id, Paris's fact id and Berlin's."""
    said = await memory.store(StoreRequest(agent_id=agent, content="Maria moved to Berlin"))
    assert said.id is not None
    facts = []
    for obj, since, sources in (("Paris", "2025-01-10", []), ("Berlin", "2026-03-01", [said.id])):
        asserted = await memory.fact_assert(
            FactAssertRequest(
                agent_id=agent, subject="Maria", predicate="lives_in", object=obj,
                valid_from=day(since), sources=sources,
            )
        )  # fmt: skip
        facts.append(asserted.fact.id)
    await memory.fact_assert(
        FactAssertRequest(agent_id=agent, subject="Maria", predicate="likes", object="tea")
    )
    return said.id, facts[0], facts[1]


def now_and_history(page: str) -> tuple[str, str]:
    """The page's table of facts held, and its history, apart."""
    held, history = page.split("<h2>History</h2>")
    return held.split("<h2>", 1)[1], history


async def test_the_facts_page_lists_current_facts_with_their_memories_and_each_timeline(
    memory: MemoryClient, tmp_path: Path
) -> None:
    """/facts shows what the agent believes now (Berlin, since its day, linking to the memory
    it came from; tea), not Paris; the history lists Paris then Berlin, past then current."""
    said, _, _ = await moves(memory, "alice-1")
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        agent = await http.get("/agent", params={"agent": "alice-1"})
        assert 'href="/facts?agent=alice-1">Facts</a>' in agent.text
        page = await http.get("/facts", params={"agent": "alice-1"})
        assert page.status_code == 200
        held, history = now_and_history(page.text)
        assert "Berlin" in held and "2026-03-01" in held and "tea" in held
        assert "Paris" not in held
        assert f'href="/memory?agent=alice-1&amp;id={said}"' in held
        line = history.split("<h3>Maria lives_in</h3>")[1].split("</table>")[0]
        assert line.index("Paris") < line.index("2026-03-01") < line.index("Berlin")
        assert '<tr class="past"><td class="content">Paris' in line
        assert '<tr class="current"><td class="content">Berlin' in line
        assert "<h3>Maria likes</h3>" in history


async def test_as_of_a_day_shows_what_held_then(memory: MemoryClient, tmp_path: Path) -> None:
    """asof=2025-06-01 shows Paris, held until Berlin began, and not Berlin; a day before any
    fact shows none; anything but YYYY-MM-DD is 400 naming the field."""
    await moves(memory, "alice-1")
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        then = await http.get("/facts", params={"agent": "alice-1", "asof": "2025-06-01"})
        held, _ = now_and_history(then.text)
        assert "What held at the end of 2025-06-01" in held
        assert "Paris" in held and "2026-03-01" in held and "Berlin" not in held
        before = await http.get("/facts", params={"agent": "alice-1", "asof": "2024-01-01"})
        assert "No facts held then." in now_and_history(before.text)[0]
        bad = await http.get("/facts", params={"agent": "alice-1", "asof": "June"})
        assert bad.status_code == 400 and "asof" in bad.text


async def test_retracting_a_fact_asks_first_needs_the_csrf_token_and_brings_back_what_it_ended(
    memory: MemoryClient, tmp_path: Path
) -> None:
    """The retract link leads to a confirmation; its POST without the session's token is 403
    and retracts nothing; with it, Berlin is retracted (shown so in the history) and Paris is
    current again."""
    _, paris, berlin = await moves(memory, "alice-1")
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        page = (await http.get("/facts", params={"agent": "alice-1"})).text
        link = f'href="/facts/retract?agent=alice-1&amp;id={berlin}&amp;subject=Maria'
        assert link in page
        ask = await http.get("/facts/retract", params={"agent": "alice-1", "id": berlin})
        assert ask.status_code == 200 and "Maria lives in Berlin" in ask.text
        refused = await http.post("/facts/retract", data={"agent": "alice-1", "id": berlin})
        assert refused.status_code == 403
        now = await memory.fact_query(FactQueryRequest(agent_id="alice-1", predicate="lives_in"))
        assert [f.id for f in now.facts] == [berlin]
        done = await post(http, "/facts/retract", ask.text, agent="alice-1", id=berlin)
        assert done.status_code == 303
        shown = (await http.get(done.headers["location"])).text
        assert "Retracted" in shown
        held, history = now_and_history(shown)
        assert "Paris" in held and "Berlin" not in held
        assert '<tr class="retracted"><td class="content">Berlin' in history
        gone = await http.get("/facts/retract", params={"agent": "alice-1", "id": "no-such"})
        assert gone.status_code == 404
    now = await memory.fact_query(FactQueryRequest(agent_id="alice-1", predicate="lives_in"))
    assert [f.id for f in now.facts] == [paris]


async def test_another_tokens_agent_facts_are_refused_and_cannot_be_retracted(
    memory: MemoryClient, tmp_path: Path
) -> None:
    _, _, berlin = await moves(memory, "bob-1")
    await moves(memory, "alice-1")
    tokens = token_file(tmp_path, {"alice": ["alice-*"], "bob": ["bob-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        for params in ({"agent": "bob-1"}, {"agent": "bob-1", "asof": "2025-06-01"}):
            refused = await http.get("/facts", params=params)
            assert refused.status_code == 403 and "Berlin" not in refused.text
        ask = await http.get("/facts/retract", params={"agent": "bob-1", "id": berlin})
        assert ask.status_code == 403 and "Berlin" not in ask.text
        page = (await http.get("/facts", params={"agent": "alice-1"})).text
        retract = await post(http, "/facts/retract", page, agent="bob-1", id=berlin)
        assert retract.status_code == 403
    now = await memory.fact_query(FactQueryRequest(agent_id="bob-1", predicate="lives_in"))
    assert [f.id for f in now.facts] == [berlin]


async def test_fact_text_that_is_markup_is_shown_as_text(
    memory: MemoryClient, tmp_path: Path
) -> None:
    agent = "alice-<b>bold</b>"
    asserted = await memory.fact_assert(
        FactAssertRequest(agent_id=agent, subject=HOSTILE, predicate="likes", object=HOSTILE)
    )
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        for answer in (
            await http.get("/facts", params={"agent": agent}),
            await http.get("/facts", params={"agent": agent, "subject": HOSTILE}),
            await http.get("/facts/retract", params={"agent": agent, "id": asserted.fact.id}),
        ):
            assert answer.status_code == 200, answer.url
            assert "<script" not in answer.text.lower() and "<img" not in answer.text.lower()
            assert "<b>bold" not in answer.text
            assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=" in (
                answer.text
            )
            assert "unsafe-inline" not in answer.headers["content-security-policy"]


async def test_a_second_tenants_browser_sees_none_of_the_first_tenants_facts(
    tmp_path: Path,
) -> None:
    """TEAM_A's agent's facts, seen from a browser with TEAM_B's credentials and a token
    matching every agent: none listed, none in the history, none found to retract."""
    async with tenant_bus(tmp_path) as bus:
        alice = MemoryClient(await connect_as(bus.url, "alice"), url=bus.url)
        carol = MemoryClient(await connect_as(bus.url, "carol"), url=bus.url)
        try:
            _, _, berlin = await moves(alice, "team-a-planner")
            tokens = token_file(tmp_path, {"all": ["*"]})
            async with browser_over(carol, tokens) as http:
                await sign_in(http, TOKENS["all"])
                page = await http.get("/facts", params={"agent": "team-a-planner"})
                assert page.status_code == 200
                assert "Berlin" not in page.text and "Paris" not in page.text
                assert "No current facts." in page.text
                ask = await http.get(
                    "/facts/retract", params={"agent": "team-a-planner", "id": berlin}
                )
                assert ask.status_code == 404 and "Berlin" not in ask.text
                retract = await post(
                    http, "/facts/retract", page.text, agent="team-a-planner", id=berlin
                )
                assert retract.status_code == 404
            kept = await alice.fact_query(FactQueryRequest(agent_id="team-a-planner"))
            assert berlin in [f.id for f in kept.facts]
        finally:
            await alice.close()
            await carol.close()
