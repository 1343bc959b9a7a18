"""A NATS URL may list a cluster's servers wherever one is taken (contract section 18): `run`,
every client command, `mcp` and MemoryClient.connect. Each entry is checked as one URL, and a
client tries them in turn: a dead server first in the list is skipped, not fatal."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from schema.stats import StatsRequest
from tests.test_cli_exits import cli, dead_port
from tests.test_client import CONFIG
from tests.test_mcp import mcp_client, text
from tests.test_shards import shards
from worker.app import App
from worker.client import MemoryClient
from worker.client_errors import Unreachable
from worker.commands import Exit
from worker.config import nats_servers
from worker.db import migrate, open_db

WORKER = [sys.executable, "-m", "worker"]


def dead() -> str:
    """A server nobody listens on: a port just bound and closed."""
    return f"nats://127.0.0.1:{dead_port()}"


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A server that accepts TCP connections and never greets (no NATS INFO)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"nats://127.0.0.1:{sock.getsockname()[1]}"


def test_a_list_is_read_in_order_and_a_bad_entry_is_named() -> None:
    """nats_servers, the one reader of a URL setting: the servers in order, spaces around the
    commas dropped; an entry that is not one NATS URL is refused with its place and its fault."""
    assert nats_servers("nats://a:4222") == ["nats://a:4222"]
    assert nats_servers("nats://a:4222, tls://b:4223") == ["nats://a:4222", "tls://b:4223"]
    with pytest.raises(ValueError, match=r"server 2 of 3: 'nats://b:' has an empty port"):
        nats_servers("nats://a:4222,nats://b:,nats://c:4222")
    with pytest.raises(ValueError, match=r"server 2 of 2: '' is not a NATS URL"):
        nats_servers("nats://a:4222,")


async def test_the_client_skips_dead_and_silent_servers_listed_before_a_live_one(
    nats_url: str, worker: App, silent_server: str
) -> None:
    """MemoryClient.connect with two dead servers and one that never greets before the live one
    connects within its timeout, to the live one, and its requests are answered."""
    listed = f"{dead()},{dead()},{silent_server},{nats_url}"
    started = time.monotonic()
    async with await MemoryClient.connect(listed, config=CONFIG, timeout=4.0) as memory:
        assert time.monotonic() - started < 4.0
        assert memory.server == nats_url
        assert (await memory.stats(StatsRequest())).health == "ok"


async def test_the_client_names_every_listed_server_when_none_answers(
    silent_server: str,
) -> None:
    """No server of the list answers: Unreachable within the timeout, naming each and why."""
    first, second = dead(), dead()
    started = time.monotonic()
    with pytest.raises(Unreachable) as failed:
        await MemoryClient.connect(f"{first},{silent_server},{second}", config=CONFIG, timeout=1.5)
    assert time.monotonic() - started < 3.0
    message = str(failed.value)
    assert message.startswith("none of the 3 NATS servers listed answered")
    for server in (first, silent_server, second):
        assert f"cannot connect to NATS at {server}" in message


def test_the_client_refuses_a_list_with_a_bad_entry_naming_it() -> None:
    with pytest.raises(ValueError, match=r"server 2 of 2: 'nats://127.0.0.1:' has an empty port"):
        asyncio.run(MemoryClient.connect(f"{dead()},nats://127.0.0.1:", config=CONFIG))


@pytest.mark.parametrize(
    "command",
    [["check"], ["fire", "memory::stats"], ["stats", "--json"]],
)
async def test_client_commands_take_a_list_with_dead_servers_first(
    command: list[str], nats_url: str, worker: App
) -> None:
    """check, fire and stats answer through the live server after two dead ones, given by
    --nats-url or by MEMORY_WORKER_NATS_URL."""
    listed = f"{dead()},{dead()},{nats_url}"
    by_flag = await asyncio.to_thread(cli, *command, "--nats-url", listed, "--timeout", "10")
    by_env = await asyncio.to_thread(cli, *command, env={"MEMORY_WORKER_NATS_URL": listed})
    for done in (by_flag, by_env):
        assert done.code == Exit.OK, done.stderr
        assert json.loads(done.stdout)["health" if command[0] != "check" else "name"]


@pytest.mark.parametrize("command", [["check"], ["fire", "memory::stats"], ["cluster"], ["stats"]])
def test_a_bad_server_in_a_list_is_refused_naming_it(command: list[str]) -> None:
    """--nats-url exits 64 and MEMORY_WORKER_NATS_URL 78, each naming the entry and its fault."""
    listed = "nats://127.0.0.1:4222,nats//127.0.0.1:4223"
    done = cli(*command, "--nats-url", listed)
    assert done.code == Exit.USAGE, done.stderr
    assert "server 2 of 2: 'nats//127.0.0.1:4223' is not a NATS URL" in done.stderr
    done = cli(*command, env={"MEMORY_WORKER_NATS_URL": listed})
    assert done.code == Exit.CONFIG, done.stderr
    assert "MEMORY_WORKER_NATS_URL: server 2 of 2: 'nats//127.0.0.1:4223'" in done.stderr


async def test_the_cluster_command_takes_a_list_with_a_dead_server_first(
    nats_url: str, tmp_path: Path
) -> None:
    """`memory-worker cluster` against the cluster's server list, a dead server first."""
    async with shards(nats_url, tmp_path, "s1"):
        done = await asyncio.to_thread(
            cli, "cluster", "--json", "--nats-url", f"{dead()},{nats_url}"
        )
    assert done.code == Exit.OK, done.stderr
    assert json.loads(done.stdout)["shards"] == ["s1"]


async def test_mcp_takes_a_list_with_a_dead_server_first(nats_url: str, worker: App) -> None:
    """`memory-worker mcp --nats-url dead,live` saves and finds through the live server."""
    async with mcp_client("--agent", "a1", "--nats-url", f"{dead()},{nats_url}") as client:
        saved = await client.call_tool("memory_save", {"content": "the list works"})
        assert not saved.is_error, text(saved)
        found = await client.call_tool("memory_search", {"query": "list works"})
        assert "the list works" in text(found)


async def test_shard_split_uploads_through_a_list_with_a_dead_server_first(
    nats_url: str, tmp_path: Path
) -> None:
    """`shard-split --upload` reaches JetStream through the live server after a dead one."""
    db = tmp_path / "memory.db"
    conn = open_db(str(db))
    migrate(conn)
    conn.close()
    env = {**os.environ, "MEMORY_WORKER_REPLICAS": "1"}
    command = [*WORKER, "shard-split", "--db", str(db), "--partitions", "2"]
    command += ["--out", str(tmp_path / "parts"), "--upload", "--nats-url", f"{dead()},{nats_url}"]
    done = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "uploaded 2 snapshots at sequence 0" in done.stderr


async def test_run_serves_through_a_list_with_a_dead_server_first(
    nats_url: str, tmp_path: Path
) -> None:
    """`run --nats-url dead,live` starts and answers `check` on the live server."""
    env = {**os.environ, "MEMORY_WORKER_EMBEDDER": "none", "MEMORY_WORKER_LOG_FORMAT": "json"}
    listed = f"{dead()},{nats_url}"
    process = subprocess.Popen(
        [*WORKER, "run", "--nats-url", listed, "--db", str(tmp_path / "memory.db")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        seen: list[bytes] = []
        while not seen or b'"worker.started"' not in seen[-1]:
            line = await asyncio.wait_for(asyncio.to_thread(process.stderr.readline), 30)
            assert line, b"".join(seen).decode()  # exited before it started
            seen.append(line)
        done = await asyncio.to_thread(cli, "check", "--nats-url", nats_url)
        assert done.code == Exit.OK, done.stderr
    finally:
        process.terminate()
        assert await asyncio.to_thread(process.wait, 20) == 0
