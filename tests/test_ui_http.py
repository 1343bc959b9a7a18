"""The memory browser over HTTP (contract section 20) against a live worker: sign-in with tokens
of section 18's form, the session cookie, CSRF refusals, agents a token may not see, a second
tenant's view, and memory text that is markup shown as text."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from schema.life import AuditRequest, GetRequest, ListRequest
from schema.memory import StoreRequest
from tests.conftest import worker_config
from tests.shipped_nats import connect_as, tenant_bus
from tests.test_mcp_http import clean_env
from tests.ui_support import TOKENS, browser_over, post, sign_in, token_file
from worker.app import App
from worker.client import MemoryClient
from worker.ui.pages import narrowed

CLIENT = worker_config("", Path("unused.db"))
HOSTILE = '<script>alert("x")</script><img src=x onerror="alert(1)"> & "quotes"'


@pytest.fixture
async def memory(nats_url: str, worker: App) -> AsyncIterator[MemoryClient]:
    async with await MemoryClient.connect(nats_url, config=CLIENT) as client:
        yield client


async def store(memory: MemoryClient, agent: str, content: str, **fields: object) -> str:
    reply = await memory.store(StoreRequest(agent_id=agent, content=content, **fields))  # type: ignore[arg-type]
    assert reply.id is not None
    return reply.id


async def test_without_a_session_pages_redirect_to_login_and_a_good_token_signs_in(
    memory: MemoryClient, tmp_path: Path
) -> None:
    """Every page but /login redirects there; a wrong token is 401 and sets nothing; a good one
    sets an HttpOnly, SameSite=Strict cookie (not Secure on plain HTTP) and redirects to the
    page asked for; / then lists only the agents the token matches, each linking to its page."""
    await store(memory, "alice-1", "alice likes tea")
    await store(memory, "bob-1", "bob likes coffee")
    tokens = token_file(tmp_path, {"alice": ["alice-*"], "bob": ["bob-*"]})
    async with browser_over(memory, tokens) as http:
        for path in ("/", "/agent?agent=alice-1", "/stats?agent=alice-1"):
            answer = await http.get(path)
            assert answer.status_code == 303
            assert answer.headers["location"].startswith("/login?next=")
        wrong = await sign_in(http, "not-a-token")
        assert wrong.status_code == 401
        assert not [v for k, v in wrong.headers.multi_items() if "memory_ui_session=" in v]
        signed = await sign_in(http, TOKENS["alice"], "/agent?agent=alice-1")
        assert signed.status_code == 303 and signed.headers["location"] == "/agent?agent=alice-1"
        cookie = [v for k, v in signed.headers.multi_items() if k == "set-cookie"]
        session = next(c for c in cookie if c.startswith("memory_ui_session="))
        assert "HttpOnly" in session and "SameSite=strict" in session
        assert "Secure" not in session
        home = await http.get("/")
        assert home.status_code == 200
        assert 'href="/agent?agent=alice-1"' in home.text and "bob-1" not in home.text
        agent = await http.get("/agent", params={"agent": "alice-1"})
        assert "alice likes tea" in agent.text


async def test_signing_out_ends_the_session_at_once(memory: MemoryClient, tmp_path: Path) -> None:
    await store(memory, "alice-1", "alice likes tea")
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        home = await http.get("/")
        old = http.cookies["memory_ui_session"]
        out = await post(http, "/logout", home.text)
        assert out.status_code == 303 and out.headers["location"] == "/login"
        http.cookies.set("memory_ui_session", old)  # the old cookie, kept by someone
        assert (await http.get("/")).status_code == 303


async def test_cookies_are_secure_over_https_and_behind_a_proxy_that_says_https(
    memory: MemoryClient, tmp_path: Path
) -> None:
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens, base="https://127.0.0.1") as http:
        signed = await sign_in(http, TOKENS["alice"])
        session = signed.headers["set-cookie"]
        assert "memory_ui_session=" in session and "Secure" in session
    async with browser_over(memory, tokens) as http:
        form = await http.get("/login", headers={"X-Forwarded-Proto": "https"})
        assert "Secure" in form.headers["set-cookie"]
        plain = await http.get("/login")
        assert "Secure" not in plain.headers["set-cookie"]


async def test_a_post_without_the_sessions_csrf_token_is_403_and_changes_nothing(
    memory: MemoryClient, tmp_path: Path
) -> None:
    kept = await store(memory, "alice-1", "alice keeps this")
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        page = (await http.get("/memory", params={"agent": "alice-1", "id": kept})).text
        fields = {"agent": "alice-1", "id": kept}
        for form in ({}, {"csrf": "forged"}, {"csrf": ""}):
            refused = await http.post("/memory/forget", data={**fields, **form})
            assert refused.status_code == 403
        got = await memory.get(GetRequest(agent_id="alice-1", ids=[kept]))
        assert got.memories[0].forgotten_at is None
        # The login form's token is not the session's either.
        other = await http.post("/memory/delete", data={**fields, "csrf": "x" * 43})
        assert other.status_code == 403
        done = await post(http, "/memory/forget", page, **fields)
        assert done.status_code == 303
        got = await memory.get(GetRequest(agent_id="alice-1", ids=[kept]))
        assert got.memories[0].forgotten_at is not None


async def test_a_url_for_an_agent_the_token_does_not_match_is_refused(
    memory: MemoryClient, tmp_path: Path
) -> None:
    """Reading and changing bob's memories with alice's session is 403 and changes nothing,
    whatever page or form names him."""
    bobs = await store(memory, "bob-1", "bob's secret plan")
    await store(memory, "alice-1", "alice's note")
    tokens = token_file(tmp_path, {"alice": ["alice-*"], "bob": ["bob-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        for path in ("/agent", "/memory", "/sessions", "/graph", "/audit", "/stats", "/settings"):
            refused = await http.get(path, params={"agent": "bob-1", "id": bobs})
            assert refused.status_code == 403, path
            assert "secret plan" not in refused.text
        page = (await http.get("/settings", params={"agent": "alice-1"})).text
        erase = await post(http, "/settings/erase", page, agent="bob-1", confirm="bob-1")
        assert erase.status_code == 403
        delete = await post(http, "/memory/delete", page, agent="bob-1", id=bobs)
        assert delete.status_code == 403
    listed = await memory.list_memories(ListRequest(agent_id="bob-1"))
    assert [m.id for m in listed.memories] == [bobs]


async def test_memory_text_that_is_markup_is_shown_as_text_under_a_strict_csp(
    memory: MemoryClient, tmp_path: Path
) -> None:
    """A memory (content, summary, tags, agent id) holding <script> and <img onerror> is
    escaped on every page that shows it; no page has an inline script, and every response
    sends a Content-Security-Policy without 'unsafe-inline'."""
    agent = "alice-<b>bold</b>"
    hostile = await store(memory, agent, HOSTILE, summary=HOSTILE, session_id="s<i>")
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        pages = [
            await http.get("/"),
            await http.get("/agent", params={"agent": agent}),
            await http.get("/agent", params={"agent": agent, "q": "alert"}),
            await http.get("/memory", params={"agent": agent, "id": hostile}),
            await http.get("/memory/delete", params={"agent": agent, "id": hostile}),
            await http.get("/session", params={"agent": agent, "session": "s<i>"}),
            await http.get("/sessions", params={"agent": agent}),
            await http.get("/audit", params={"agent": agent}),
        ]
        for answer in pages:
            assert answer.status_code == 200, answer.url
            assert "<script" not in answer.text.lower()
            assert "<img" not in answer.text.lower() and "<b>bold" not in answer.text
            policy = answer.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "unsafe-inline" not in policy
            assert answer.headers["x-content-type-options"] == "nosniff"
        shown = pages[3].text
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=" in shown
        assert re.search(r"<script[^>]*>", pages[1].text) is None


async def test_without_tokens_loopback_visitors_get_a_session_and_changes_still_need_csrf(
    memory: MemoryClient,
) -> None:
    kept = await store(memory, "a1", "kept without tokens")
    async with browser_over(memory, None) as http:
        home = await http.get("/")
        assert home.status_code == 200 and 'href="/agent?agent=a1"' in home.text
        assert (await http.get("/login")).status_code == 303
        refused = await http.post("/memory/pin", data={"agent": "a1", "id": kept, "pinned": "1"})
        assert refused.status_code == 403
        page = (await http.get("/memory", params={"agent": "a1", "id": kept})).text
        pinned = await post(http, "/memory/pin", page, agent="a1", id=kept, pinned="1")
        assert pinned.status_code == 303
    got = await memory.get(GetRequest(agent_id="a1", ids=[kept]))
    assert got.memories[0].pinned


async def test_a_second_tenants_browser_reaches_nothing_of_the_first(tmp_path: Path) -> None:
    """A browser connected with TEAM_B's credentials, its token matching every agent, lists
    none of TEAM_A's agents, finds none of their memories by id, and erasing TEAM_A's agent id
    from it leaves TEAM_A's memories as they were."""
    async with tenant_bus(tmp_path) as bus:
        alice = await bus.user("alice")
        stored = await alice.store("team-a-planner", "alpha plans the launch")
        carol_nc = await connect_as(bus.url, "carol")
        carol = MemoryClient(carol_nc, url=bus.url)
        tokens = token_file(tmp_path, {"all": ["*"]})
        try:
            async with browser_over(carol, tokens) as http:
                await sign_in(http, TOKENS["all"])
                home = await http.get("/")
                assert home.status_code == 200 and "team-a-planner" not in home.text
                agent = await http.get("/agent", params={"agent": "team-a-planner"})
                assert "alpha plans" not in agent.text and "No memories" in agent.text
                found = await http.get(
                    "/memory", params={"agent": "team-a-planner", "id": stored["id"]}
                )
                assert found.status_code == 404 and "alpha plans" not in found.text
                page = (await http.get("/settings", params={"agent": "team-a-planner"})).text
                erased = await post(
                    http, "/settings/erase", page, agent="team-a-planner", confirm="team-a-planner"
                )
                assert erased.status_code == 200 and "Removed 0 memories" in erased.text
        finally:
            await carol.close()
        assert [m["content"] for m in await alice.recall("team-a-planner", "plans")] == [
            "alpha plans the launch"
        ]
        # An operator's browser shows the tenant it names (`ui --tenant`), and only that one.
        operator = MemoryClient(await connect_as(bus.url, "operator"), url=bus.url)
        await carol.close()
        carol = MemoryClient(await connect_as(bus.url, "carol"), url=bus.url)
        await carol.store(StoreRequest(agent_id="team-b-agent", content="beta keeps notes"))
        await carol.close()
        try:
            for tenant, shown, hidden in (
                ("TEAM_A", "team-a-planner", "team-b-agent"),
                ("TEAM_B", "team-b-agent", "team-a-planner"),
            ):
                async with browser_over(operator, tokens, tenant=tenant) as http:
                    await sign_in(http, TOKENS["all"])
                    listing = (await http.get("/")).text
                    assert shown in listing and hidden not in listing
        finally:
            await operator.close()


async def test_an_edit_sends_only_what_changed_and_a_content_another_memory_has_is_409(
    memory: MemoryClient, tmp_path: Path
) -> None:
    """Saving the form as shown changes nothing (no update in the audit); a new summary and tag
    are saved; content another memory of the agent already has is refused, naming it."""
    first = await store(memory, "alice-1", "alice likes tea")
    await store(memory, "alice-1", "alice likes coffee")
    tokens = token_file(tmp_path, {"alice": ["alice-*"]})
    async with browser_over(memory, tokens) as http:
        await sign_in(http, TOKENS["alice"])
        page = (await http.get("/memory", params={"agent": "alice-1", "id": first})).text
        form = {
            "agent": "alice-1", "id": first, "content": "alice likes tea", "summary": "",
            "category": "note", "sensitivity": "internal", "recall_policy": "auto", "tags": "",
        }  # fmt: skip
        same = await post(http, "/memory/edit", page, **form)
        assert same.headers["location"].endswith("done=unchanged")
        saved = await post(http, "/memory/edit", page, **(form | {"summary": "tea", "tags": "d"}))
        assert saved.headers["location"].endswith("done=edited")
        clash = await post(http, "/memory/edit", page, **(form | {"content": "alice likes coffee"}))
        assert clash.status_code == 409 and "(conflict)" in clash.text
    got = (await memory.get(GetRequest(agent_id="alice-1", ids=[first]))).memories[0]
    assert (got.content, got.summary, got.tags) == ("alice likes tea", "tea", ["d"])
    events = await memory.audit(AuditRequest(agent_id="alice-1"))
    assert [e.trigger for e in events.events].count("memory::update") == 1


def test_the_agents_page_asks_for_the_prefix_every_pattern_of_the_token_starts_with() -> None:
    assert narrowed("", ("alice-*",)) == "alice-"
    assert narrowed("alice-1", ("alice-*",)) == "alice-1"
    assert narrowed("bob", ("alice-*",)) is None
    assert narrowed("", ("team-a?", "team-b*")) == "team-"
    assert narrowed("x", ("*",)) == "x"


@pytest.mark.parametrize(
    ("host", "tokens", "words"),
    [
        ("0.0.0.0", None, "MEMORY_WORKER_UI_TOKENS"),
        ("127.0.0.1", "missing.json", "MEMORY_WORKER_UI_TOKENS: cannot read"),
    ],
)
def test_ui_refuses_to_start_off_loopback_without_tokens_or_with_a_bad_token_file(
    tmp_path: Path, host: str, tokens: str | None, words: str
) -> None:
    extra = {} if tokens is None else {"MEMORY_WORKER_UI_TOKENS": str(tmp_path / tokens)}
    done = subprocess.run(
        [sys.executable, "-m", "worker", "ui", "--host", host, "--port", "0"],
        env=clean_env(**extra),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 78 and words in done.stderr, done.stderr
