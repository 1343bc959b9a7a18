"""The README's examples of "Use it from Python" and "Use it from an agent" run as written
against a live worker."""

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

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from schema.life import ListRequest
from tests.test_client import CONFIG
from tests.test_readme import section
from worker.app import App
from worker.client import MemoryClient

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DEFAULT_URL = "nats://127.0.0.1:4222"


def blocks(name: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", section(README.read_text(), name), re.S | re.M)


def run_python(code: str, nats_url: str) -> subprocess.CompletedProcess[str]:
    """As a reader would run it from the checkout, against the test's worker."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    return subprocess.run(
        [sys.executable, "-c", code.replace(DEFAULT_URL, nats_url)],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_the_python_example_stores_recalls_and_prints_a_refusal(
    nats_url: str, worker: App
) -> None:
    """The example finds what it stored and prints the worker's 400 naming `$.limit`."""
    [code] = blocks("Use it from Python", "python")
    assert DEFAULT_URL in code
    done = await asyncio.to_thread(run_python, code, nats_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(" The deploy key rotates on Fridays"), lines
    assert lines[-1].startswith("400 invalid_request ") and "`$.limit`" in lines[-1], lines


async def test_the_desktop_snippet_is_valid_and_its_command_line_starts_the_server(
    nats_url: str, worker: App
) -> None:
    """The `mcpServers` JSON parses; its command with exactly its args (the test's NATS URL in
    place of the default) starts a server the SDK's client talks to over stdio."""
    [snippet] = blocks("Use it from an agent", "json")
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_http_examples_serve_one_agent_or_the_agent_a_header_names(
    nats_url: str, worker: App
) -> None:
    """`--http PORT --agent` serves that agent at /mcp; with `--agent-header` each request's
    header names the agent, and a request without it is refused naming the header."""
    commands = [c for c in blocks("Use it from an agent", "sh")[0].splitlines() if c.strip()]
    assert len(commands) == 2
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    for command, headers in zip(commands, ({}, {"X-Memory-Agent": "team-bot"}), strict=True):
        port = free_port()
        argv = shlex.split(command.split("#")[0].replace("8765", str(port)))
        argv = [*argv[1:], "--nats-url", nats_url]
        argv = [arg for arg in argv if arg not in ("--host", "0.0.0.0")]
        process = subprocess.Popen([sys.executable, "-m", "worker", *argv], env=clean)
        try:
            async with httpx2.AsyncClient(headers=headers) as http:
                url = f"http://127.0.0.1:{port}/mcp"
                await wait_for_port(port)
                async with Client(streamable_http_client(url, http_client=http), cache=None) as c:
                    saved = await c.call_tool("memory_save", {"content": "Ships on Thursdays"})
                    assert not saved.is_error, saved.content
            if headers:
                async with (
                    httpx2.AsyncClient() as bare,
                    Client(streamable_http_client(url, http_client=bare), cache=None) as c,
                ):
                    refused = await c.call_tool("memory_save", {"content": "whose?"})
                    [block] = refused.content
                    assert refused.is_error and isinstance(block, TextContent)
                    assert "no X-Memory-Agent header" in block.text
        finally:
            process.terminate()
            process.wait(timeout=10)
    async with await MemoryClient.connect(nats_url, config=CONFIG) as memory:
        listed = await memory.list_memories(ListRequest(agent_id="team-bot"))
        assert [m.content for m in listed.memories] == ["Ships on Thursdays"]


async def wait_for_port(port: int) -> None:
    for _ in range(200):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")
