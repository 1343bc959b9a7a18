"""The README's examples of "Use it from Python" and "Use it from an agent (MCP)" run as
written against a live worker: the Python blocks saved under the name the README gives and run
with the command it gives, the desktop snippet's command line, and the HTTP block."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from schema.life import ListRequest
from tests.support import wait_until
from tests.test_client import CONFIG
from tests.test_readme import section
from worker.app import App
from worker.client import MemoryClient

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DEFAULT_URL = "nats://127.0.0.1:4222"


AGENT = "Use it from an agent (MCP)"


def blocks(name: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", section(README.read_text(), name), re.S | re.M)


def run_python(code: str, name: str, nats_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """As the README says to run it: saved as `name` in a directory that has the checkout's
    .venv, then `.venv/bin/python name` there; the test's worker stands in for the default."""
    venv = Path(sys.prefix)
    if not (venv / "bin" / "memory-worker").exists():
        pytest.skip("the tests do not run from the project's .venv")
    if not (cwd / ".venv").exists():
        (cwd / ".venv").symlink_to(venv)
    (cwd / name).write_text(code.replace(DEFAULT_URL, nats_url), encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    return subprocess.run(
        ["bash", "-c", f".venv/bin/python {name}"],
        cwd=cwd,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def saved_as(text: str, suffix: str) -> str:
    """The file name a section tells the reader to save its example as (`example.py`)."""
    [name] = re.findall(rf"[Ss]aved?\s+(?:it\s+)?as\s+`([a-z_]+\.{suffix})`", text)
    return str(name)


async def test_the_python_example_stores_recalls_and_prints_a_refusal(
    nats_url: str, worker: App, tmp_path: Path
) -> None:
    """Saved and run as the README says, the example finds what it stored and prints the
    worker's 400 naming `$.limit`."""
    [code] = blocks("Use it from Python", "python")
    assert DEFAULT_URL in code
    name = saved_as(section(README.read_text(), "Use it from Python"), "py")
    assert [c.strip() for c in blocks("Use it from Python", "sh")] == [f".venv/bin/python {name}"]
    done = await asyncio.to_thread(run_python, code, name, nats_url, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(" The deploy key rotates on Fridays"), lines
    assert lines[-1].startswith("400 invalid_request ") and "`$.limit`" in lines[-1], lines


async def test_the_desktop_snippet_is_valid_and_its_command_line_starts_the_server(
    nats_url: str, worker: App
) -> None:
    """The `mcpServers` JSON parses; its command with exactly its args (the test's NATS URL in
    place of the default) starts a server the SDK's client talks to over stdio."""
    [snippet] = blocks(AGENT, "json")
    server = json.loads(snippet)["mcpServers"]["memory"]
    assert server["command"] == "memory-worker"
    args = [nats_url if arg == DEFAULT_URL else arg for arg in server["args"]]
    assert args[:3] == ["mcp", "--agent", "claude-desktop"] and nats_url in args
    command = str(Path(sys.prefix) / "bin" / server["command"])
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    parameters = StdioServerParameters(command=command, args=args, env=clean)
    async with Client(parameters, cache=None, read_timeout_seconds=30) as client:
        saved = await client.call_tool("memory_save", {"content": "Prefers tea to coffee"})
        assert not saved.is_error
        found = await client.call_tool("memory_search", {"query": "tea"})
        [block] = found.content
        assert isinstance(block, TextContent) and "Prefers tea to coffee" in block.text


async def test_the_mcp_sdk_example_saves_and_finds_a_memory_through_the_server(
    nats_url: str, worker: App, tmp_path: Path
) -> None:
    """The MCP SDK example, saved and run as the README says, starts `memory-worker mcp` over
    stdio with the SDK's client, saves a memory and prints the search line that finds it."""
    [code] = blocks(AGENT, "python")
    assert DEFAULT_URL in code and "from mcp import Client" in code
    name = saved_as(section(README.read_text(), AGENT), "py")
    assert f"`.venv/bin/python {name}`" in section(README.read_text(), AGENT)
    done = await asyncio.to_thread(run_python, code, name, nats_url, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Prefers tea to coffee" in done.stdout, done.stdout
    async with await MemoryClient.connect(nats_url, config=CONFIG) as memory:
        listed = await memory.list_memories(ListRequest(agent_id="a1"))
        assert [m.content for m in listed.memories] == ["Prefers tea to coffee"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_http_examples_make_tokens_and_serve_only_what_each_token_may(
    nats_url: str, worker: App, tmp_path: Path
) -> None:
    """As written, in an empty directory: the token commands print a token each and write the
    token file; `--http PORT --agent` serves team-bot to its token; with `--agent-header` on
    0.0.0.0 the gateway token acts for the team-* agent its request's header names. No token
    is 401, another token's agent 403, and a request without the header a tool error."""
    lines = [c for c in blocks(AGENT, "sh")[0].splitlines() if c.strip()]
    servers = [line for line in lines if line.startswith("memory-worker mcp ")]
    setup = lines[: lines.index(servers[0])]
    assert len(servers) == 2 and all(" 0.0.0.0" not in line for line in setup)
    bin_dir = str(Path(sys.prefix) / "bin")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    shell = {**clean, "PATH": f"{bin_dir}{os.pathsep}{clean['PATH']}"}
    script = "\n".join([*setup, 'printf "%s\\n" "$MEMORY_WORKER_MCP_TOKENS"'])
    done = subprocess.run(
        ["bash", "-ec", script], cwd=tmp_path, env=shell, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    *printed, token_file = done.stdout.splitlines()
    names = [shlex.split(line)[shlex.split(line).index("--name") + 1] for line in setup[:-1]]
    tokens = dict(zip(names, printed, strict=True))
    assert set(tokens) == {"team-bot", "gateway"} and Path(token_file).is_file()
    for name, token in tokens.items():
        assert token not in Path(token_file).read_text() and name in Path(token_file).read_text()
    header = "X-Memory-Agent"
    cases: list[tuple[str, str, dict[str, str]]] = [
        (servers[0], "team-bot", {}),
        (servers[1], "gateway", {header: "team-bot"}),
    ]
    for command, name, headers in cases:
        port = free_port()
        line = command.split("#")[0].replace("8765", str(port))
        process = subprocess.Popen(
            ["bash", "-c", f"exec {line} --nats-url {nats_url}"],
            cwd=tmp_path,
            env={**shell, "MEMORY_WORKER_MCP_TOKENS": token_file},
        )
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            await wait_for_port(port, process)
            auth = {"Authorization": f"Bearer {tokens[name]}"}
            async with (
                httpx2.AsyncClient(headers={**auth, **headers}) as http,
                Client(streamable_http_client(url, http_client=http), cache=None) as c,
            ):
                saved = await c.call_tool("memory_save", {"content": f"{name} ships Thursdays"})
                assert not saved.is_error, saved.content
            async with httpx2.AsyncClient() as bare:
                hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
                accept = {"Accept": "application/json, text/event-stream"}
                refused = await bare.post(url, json=hello, headers=accept)
                assert refused.status_code == 401
                assert refused.headers["www-authenticate"].startswith("Bearer")
                other = {**accept, header: "team-other"}
                if headers:  # team-bot's token may act for team-bot only
                    other["Authorization"] = f"Bearer {tokens['team-bot']}"
                    assert (await bare.post(url, json=hello, headers=other)).status_code == 403
            if headers:
                async with (
                    httpx2.AsyncClient(headers=auth) as no_header,
                    Client(streamable_http_client(url, http_client=no_header), cache=None) as c,
                ):
                    refused_call = await c.call_tool("memory_save", {"content": "whose?"})
                    [block] = refused_call.content
                    assert refused_call.is_error and isinstance(block, TextContent)
                    assert f"no {header} header" in block.text
        finally:
            process.terminate()
            process.wait(timeout=10)
    async with await MemoryClient.connect(nats_url, config=CONFIG) as memory:
        listed = await memory.list_memories(ListRequest(agent_id="team-bot"))
        contents = sorted(m.content for m in listed.memories)
        assert contents == ["gateway ships Thursdays", "team-bot ships Thursdays"]


async def wait_for_port(port: int, process: subprocess.Popen[Any] | None = None) -> None:
    """Until something listens on the port; fails at once if the process meant to has exited.
    The bound is generous: a loaded machine (the suite runs on several processes) took more
    than 10 s to start `memory-worker mcp --http`, which is not what the tests check."""

    def listening() -> bool:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the server for port {port} exited ({process.returncode})")
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    await wait_until(listening, f"something listening on {port}", timeout=60, interval=0.05)
