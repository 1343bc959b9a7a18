"""`memory-worker mcp --http` behind bearer tokens (docs/tenants.md), over real HTTP to a real
server process and a live worker: who gets in, which agents a token may act for, how many
sessions it may hold, and the starts that are refused."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from tests.test_readme_agents import free_port, wait_for_port
from worker.app import App
from worker.tokens import load_tokens

WORKER = [sys.executable, "-m", "worker"]
TOKENS = {"alice": "alice-secret-token", "bob": "bob-secret-token", "ops": "ops-secret-token"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def token_file(tmp_path: Path, agents: dict[str, list[str]]) -> str:
    """A token file giving each of TOKENS' names the agents listed for it."""
    path = tmp_path / "tokens.json"
    entries = {
        name: {"sha256": hashlib.sha256(TOKENS[name].encode()).hexdigest(), "agents": patterns}
        for name, patterns in agents.items()
    }
    path.write_text(json.dumps(entries), encoding="utf-8")
    return str(path)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    return {**env, **extra}


@asynccontextmanager
async def mcp_http(nats_url: str, tokens: str, *args: str) -> AsyncIterator[str]:
    """The server on a free port with the token file; yields its /mcp URL."""
    port = free_port()
    command = [*WORKER, "mcp", "--http", str(port), "--nats-url", nats_url, *args]
    process = subprocess.Popen(command, env=clean_env(MEMORY_WORKER_MCP_TOKENS=tokens))
    try:
        await wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        assert process.wait(timeout=10) in (0, -15)


async def test_the_server_says_in_one_log_line_the_url_it_listens_on(
    nats_url: str, worker: App
) -> None:
    """Once it listens, `mcp --http` logs `mcp.listening` with the URL to give a client, the
    port `--http 0` picked included; a client connecting to that URL saves a memory."""
    process = await asyncio.create_subprocess_exec(
        *WORKER, "mcp", "--http", "0", "--agent", "a1", "--nats-url", nats_url,
        env=clean_env(MEMORY_WORKER_LOG_FORMAT="json"), stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        lines: list[dict[str, Any]] = []
        while not any(line.get("event") == "mcp.listening" for line in lines):
            raw = await asyncio.wait_for(process.stderr.readline(), timeout=30)
            assert raw, f"it exited before saying where it listens: {lines}"
            lines.append(json.loads(raw))
        [listening] = [line for line in lines if line.get("event") == "mcp.listening"]
        url = listening["url"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        assert not url.endswith(":0/mcp")
        async with Client(url, cache=None) as client:
            saved = await client.call_tool("memory_save", {"content": "Listens where it says"})
            assert not saved.is_error, text(saved)
    finally:
        process.terminate()
        await process.wait()
    assert await stored_agents(worker) == ["a1"]


def bearer(name: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}", **headers}


async def initialize(http: httpx2.AsyncClient, url: str, **headers: str) -> httpx2.Response:
    return await http.post(url, json=INITIALIZE, headers={**ACCEPT, **headers})


async def stored_agents(worker: App) -> list[str]:
    services = worker.services
    assert services is not None
    rows = await services.readers.run(
        lambda conn: conn.execute("SELECT agent_id FROM memories ORDER BY agent_id").fetchall()
    )
    return [str(row[0]) for row in rows]


def text(result: Any) -> str:
    [block] = result.content
    assert isinstance(block, TextContent)
    return block.text


async def test_a_request_without_a_valid_token_is_401_with_bearer_and_opens_no_session(
    nats_url: str, worker: App, tmp_path: Path
) -> None:
    """No Authorization, another scheme, or an unknown token: every request (initialize, a GET,
    a DELETE, a call naming a session) is 401 with `WWW-Authenticate: Bearer` and no
    Mcp-Session-Id, and nothing is written."""
    tokens = token_file(tmp_path, {"alice": ["team-bot"]})
    async with (
        mcp_http(nats_url, tokens, "--agent", "team-bot") as url,
        httpx2.AsyncClient() as http,
    ):
        for headers in (
            {},
            {"Authorization": f"Basic {TOKENS['alice']}"},
            {"Authorization": "Bearer not-a-token"},
            {"Authorization": f"Bearer {TOKENS['bob']}"},  # a token, but not in this file
        ):
            for _ in range(3):
                refused = await initialize(http, url, **headers)
                assert refused.status_code == 401, refused.text
                assert refused.headers["www-authenticate"].startswith("Bearer")
                assert "mcp-session-id" not in refused.headers
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
            call["params"] = {"name": "memory_save", "arguments": {"content": "sneaked in"}}
            named = {**ACCEPT, **headers, "Mcp-Session-Id": "0" * 32}
            assert (await http.post(url, json=call, headers=named)).status_code == 401
            assert (await http.get(url, headers=headers)).status_code == 401
            assert (await http.delete(url, headers=named)).status_code == 401
    assert await stored_agents(worker) == []


async def test_a_good_token_saves_and_searches_for_its_agent(
    nats_url: str, worker: App, tmp_path: Path
) -> None:
    """With alice's token the SDK's own client lists the tools, saves and finds a memory of
    team-bot, and reads its resources."""
    tokens = token_file(tmp_path, {"alice": ["team-*"]})
    async with (
        mcp_http(nats_url, tokens, "--agent", "team-bot") as url,
        httpx2.AsyncClient(headers=bearer("alice")) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        assert "memory_save" in {tool.name for tool in (await client.list_tools()).tools}
        saved = await client.call_tool("memory_save", {"content": "Ships on Thursdays"})
        assert not saved.is_error, text(saved)
        found = await client.call_tool("memory_search", {"query": "ships"})
        assert "Ships on Thursdays" in text(found)
        pinned = await client.read_resource("memory://pinned")
        assert pinned.contents
    assert await stored_agents(worker) == ["team-bot"]


async def test_a_token_whose_agents_do_not_match_is_refused_and_nothing_is_written(
    nats_url: str, worker: App, tmp_path: Path
) -> None:
    """bob may act for bob-* only: against a server fixed to team-bot, initialize and a tool
    call are 403 naming the agent, and nothing is written."""
    tokens = token_file(tmp_path, {"alice": ["team-bot"], "bob": ["bob-*"]})
    async with (
        mcp_http(nats_url, tokens, "--agent", "team-bot") as url,
        httpx2.AsyncClient() as http,
    ):
        refused = await initialize(http, url, **bearer("bob"))
        assert refused.status_code == 403, refused.text
        assert "team-bot" in refused.json()["error_description"]
        assert "mcp-session-id" not in refused.headers
        opened = await initialize(http, url, **bearer("alice"))
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        call["params"] = {"name": "memory_save", "arguments": {"content": "bob was here"}}
        # bob's token on alice's session: refused before the SDK sees it
        headers = {**ACCEPT, **bearer("bob"), "Mcp-Session-Id": session}
        assert (await http.post(url, json=call, headers=headers)).status_code == 403
    assert await stored_agents(worker) == []


async def test_switching_the_agent_header_mid_session_is_refused(
    nats_url: str, worker: App, tmp_path: Path
) -> None:
    """With --agent-header, alice's token may act for alice-*: a session saves as alice-1; the
    same session naming bob-1 is 403 naming bob-1 and writes nothing, naming alice-2 works; the
    SDK's client, switched the same way, gets an error and writes nothing either."""
    tokens = token_file(tmp_path, {"alice": ["alice-*"], "ops": ["*"]})
    header = "X-Memory-Agent"
    async with mcp_http(nats_url, tokens, "--agent-header", header) as url:
        async with httpx2.AsyncClient() as http:
            opened = await initialize(http, url, **bearer("alice", **{header: "alice-1"}))
            session = {
                **ACCEPT,
                **bearer("alice"),
                "Mcp-Session-Id": opened.headers["mcp-session-id"],
            }
            ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(url, json=ready, headers=session)).status_code == 202
            for number, agent in enumerate(("alice-1", "bob-1", "alice-2")):
                call = {"jsonrpc": "2.0", "id": 10 + number, "method": "tools/call"}
                call["params"] = {"name": "memory_save", "arguments": {"content": f"by {agent}"}}
                answer = await http.post(url, json=call, headers={**session, header: agent})
                if agent == "bob-1":
                    assert answer.status_code == 403 and "bob-1" in answer.text, answer.text
                else:
                    assert answer.status_code == 200 and "Saved" in answer.text, answer.text
        async with (
            httpx2.AsyncClient(headers=bearer("alice", **{header: "alice-3"})) as http,
            Client(streamable_http_client(url, http_client=http), cache=None) as client,
        ):
            saved = await client.call_tool("memory_save", {"content": "alice three"})
            assert not saved.is_error, text(saved)
            http.headers[header] = "bob-2"
            with pytest.raises(MCPError):
                await client.call_tool("memory_save", {"content": "as bob"})
    assert await stored_agents(worker) == ["alice-1", "alice-2", "alice-3"]


async def test_a_token_holds_at_most_its_session_cap_and_others_are_unaffected(
    nats_url: str, worker: App, tmp_path: Path
) -> None:
    """--sessions-per-token 2: alice opens two sessions, a third is 429 while bob still opens
    his; once alice ends one (DELETE) she may open another."""
    tokens = token_file(tmp_path, {"alice": ["team-bot"], "bob": ["team-bot"]})
    async with (
        mcp_http(nats_url, tokens, "--agent", "team-bot", "--sessions-per-token", "2") as url,
        httpx2.AsyncClient() as http,
    ):
        sessions = []
        for _ in range(2):
            opened = await initialize(http, url, **bearer("alice"))
            assert opened.status_code == 200, opened.text
            sessions.append(opened.headers["mcp-session-id"])
        full = await initialize(http, url, **bearer("alice"))
        assert full.status_code == 429 and "mcp-session-id" not in full.headers
        assert "alice" in full.json()["error_description"]
        assert (await initialize(http, url, **bearer("bob"))).status_code == 200
        ended = await http.delete(url, headers={**bearer("alice"), "Mcp-Session-Id": sessions[0]})
        assert ended.status_code == 200, ended.text
        assert (await initialize(http, url, **bearer("alice"))).status_code == 200


def refused_start(
    tmp_path: Path, tokens: str | None, *args: str
) -> subprocess.CompletedProcess[str]:
    env = clean_env() if tokens is None else clean_env(MEMORY_WORKER_MCP_TOKENS=tokens)
    command = [*WORKER, "mcp", "--http", str(free_port()), "--nats-url", "nats://127.0.0.1:1"]
    return subprocess.run(
        [*command, *args], env=env, capture_output=True, text=True, timeout=20, cwd=tmp_path
    )


BAD_FILES = {
    "missing.json": None,
    "not-json.json": "{not json",
    "a-list.json": '["alice"]',
    "short-hash.json": '{"alice": {"sha256": "abc123", "agents": ["team-bot"]}}',
    "no-hash.json": '{"alice": {"agents": ["team-bot"]}}',
    "no-agents.json": '{"alice": {"sha256": "' + "a" * 64 + '"}}',
    "empty-agents.json": '{"alice": {"sha256": "' + "a" * 64 + '", "agents": []}}',
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_an_unusable_token_file_stops_the_start_with_78_naming_the_variable(
    tmp_path: Path, name: str
) -> None:
    """A token file that is missing, not JSON, or has an entry without a 64-hex sha256 or a
    non-empty agents list: exit 78 and one line naming MEMORY_WORKER_MCP_TOKENS."""
    path = tmp_path / name
    if BAD_FILES[name] is not None:
        path.write_text(BAD_FILES[name] or "", encoding="utf-8")
    done = refused_start(tmp_path, str(path), "--agent", "team-bot")
    assert done.returncode == 78, done.stderr
    [line] = done.stderr.splitlines()
    assert "MEMORY_WORKER_MCP_TOKENS" in line and str(path) in line


@pytest.mark.parametrize(
    "args",
    [
        ("--agent", "team-bot", "--host", "0.0.0.0"),
        ("--agent", "team-bot", "--host", "192.0.2.1"),
        ("--agent-header", "X-Memory-Agent"),
        ("--agent-header", "X-Memory-Agent", "--host", "127.0.0.1"),
    ],
)
def test_without_tokens_a_public_host_or_an_agent_header_stops_the_start_with_78(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Without MEMORY_WORKER_MCP_TOKENS, --http on a host other than loopback, and
    --agent-header on any host, exit 78 with one line naming the variable."""
    done = refused_start(tmp_path, None, *args)
    assert done.returncode == 78, done.stderr
    [line] = done.stderr.splitlines()
    assert "MEMORY_WORKER_MCP_TOKENS" in line


def test_the_token_command_prints_a_fresh_token_once_and_keeps_only_its_hash(
    tmp_path: Path,
) -> None:
    """`memory-worker token` prints a new token and its entry (the SHA-256, never the token);
    with --file it adds the entry to a token file of mode 0600 that finds the token, and
    refuses a name already there."""
    run = [*WORKER, "token", "--name", "alice", "--agents", "alice-*", "team-bot"]
    printed = subprocess.run(run, capture_output=True, text=True, env=clean_env(), check=True)
    token, line = printed.stdout.splitlines()
    digest = hashlib.sha256(token.encode()).hexdigest()
    assert json.loads(line) == {"alice": {"sha256": digest, "agents": ["alice-*", "team-bot"]}}
    again = subprocess.run(run, capture_output=True, text=True, env=clean_env(), check=True)
    assert again.stdout.splitlines()[0] != token and len(token) >= 40
    path = tmp_path / "tokens.json"
    for name in ("alice", "bob"):
        made = [*WORKER, "token", "--name", name, "--agents", f"{name}-*", "--file", str(path)]
        done = subprocess.run(made, capture_output=True, text=True, env=clean_env())
        assert done.returncode == 0, done.stderr
        [secret] = done.stdout.splitlines()
        assert secret not in path.read_text() and "Bearer" in done.stderr
    assert path.stat().st_mode & 0o777 == 0o600
    found = load_tokens("MEMORY_WORKER_MCP_TOKENS", str(path)).find(secret)
    assert found is not None and found.name == "bob" and found.agents == ("bob-*",)
    taken = subprocess.run(made, capture_output=True, text=True, env=clean_env())
    assert taken.returncode == 64 and "bob" in taken.stderr
    assert set(json.loads(path.read_text())) == {"alice", "bob"}


def test_a_token_is_found_by_its_hash_only_and_acts_for_its_patterns_only(tmp_path: Path) -> None:
    """find() knows a token by the SHA-256 in the file (hex in either case) and nothing close
    to it; allows() is fnmatch over the agent id, case-sensitive."""
    path = tmp_path / "tokens.json"
    upper = hashlib.sha256(b"bob-secret-token").hexdigest().upper()
    path.write_text(json.dumps({"bob": {"sha256": upper, "agents": ["bob-*", "shared"]}}))
    tokens = load_tokens("MEMORY_WORKER_MCP_TOKENS", str(path))
    found = tokens.find("bob-secret-token")
    assert found is not None and found.name == "bob"
    for near in ("bob-secret-token ", "Bob-secret-token", "", upper):
        assert tokens.find(near) is None
    assert found.allows("bob-1") and found.allows("shared")
    assert not found.allows("Bob-1") and not found.allows("alice") and not found.allows("shared2")
