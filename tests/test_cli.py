"""The `memory-worker` command: fire, check, migrate, config errors, and the daemon's life."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import apsw
import nats
import pytest

from tests.support import Client, wait_until
from worker.app import App

WORKER = [sys.executable, "-m", "worker"]


def cli(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WORKER, *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        env={**os.environ, **(env or {})},
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_fire_prints_the_reply_as_one_json_line(nats_url: str, worker: App) -> None:
    payload = '{"agentId": "a", "content": "fired by hand"}'
    done = await asyncio.to_thread(cli, "fire", "memory::store", payload, "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert json.loads(line)["stored"] is True


async def test_fire_takes_the_subject_form_of_a_trigger(nats_url: str, worker: App) -> None:
    """`memory.store` and `memory.kg.add`, as the subjects read on the bus, fire those
    triggers."""
    stored = '{"agentId": "a", "content": "fired by its subject"}'
    done = await asyncio.to_thread(cli, "fire", "memory.store", stored, "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stored"] is True
    entity = '{"agentId": "a", "entity": {"id": "alice"}}'
    done = await asyncio.to_thread(cli, "fire", "memory.kg.add", entity, "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"stored": True, "id": "alice", "relationsAdded": 0}


async def test_fire_reads_stdin_and_uses_the_environment_url(nats_url: str, worker: App) -> None:
    done = await asyncio.to_thread(
        cli, "fire", "memory::evict", "-", env={"MEMORY_WORKER_NATS_URL": nats_url},
        stdin='{"maxAge": 1296000000, "dryRun": true}',
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["dryRun"] is True


async def test_fire_exits_non_zero_on_an_error_reply(nats_url: str, worker: App) -> None:
    done = await asyncio.to_thread(
        cli, "fire", "memory::recall", '{"agentId": "a", "limit": 0}', "--nats-url", nats_url
    )
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["code"] == "invalid_request"


async def test_fire_without_a_worker_says_so(nats_url: str) -> None:
    done = await asyncio.to_thread(
        cli, "fire", "memory::consolidate", "--nats-url", nats_url, "--timeout", "2"
    )
    assert done.returncode == 2 and "no memory worker" in done.stderr
    assert done.stdout == ""


def test_fire_refuses_a_payload_that_is_not_json() -> None:
    done = cli("fire", "memory::store", "{oops", "--nats-url", "nats://127.0.0.1:1")
    assert done.returncode == 64 and "not JSON" in done.stderr


async def test_check_exits_zero_only_when_the_service_answers(
    nats_url: str, tmp_path: Path
) -> None:
    absent = await asyncio.to_thread(cli, "check", "--nats-url", nats_url, "--timeout", "1")
    assert absent.returncode != 0
    from tests.conftest import worker_config

    app = App(worker_config(nats_url, tmp_path / "memory.db"))
    await app.start()
    try:
        present = await asyncio.to_thread(cli, "check", "--nats-url", nats_url)
        assert present.returncode == 0, present.stderr
    finally:
        await app.stop()


def test_a_bad_variable_stops_start_up_naming_it(tmp_path: Path) -> None:
    done = cli(
        "run", "--db", str(tmp_path / "m.db"), env={"MEMORY_WORKER_MAX_CONTENT_BYTES": "lots"}
    )
    assert done.returncode == 78
    assert "MEMORY_WORKER_MAX_CONTENT_BYTES" in done.stderr
    done = cli("run", env={"MEMORY_WORKER_EVICT_CRON": "every day"})
    assert done.returncode == 78 and "MEMORY_WORKER_EVICT_CRON" in done.stderr
    done = cli("run", env={"MEMORY_WORKER_EMBEDDER": "magic"})
    assert done.returncode == 78 and "MEMORY_WORKER_EMBEDDER" in done.stderr
    done = cli("run", env={"MEMORY_WORKER_EVENT_LOOP": "trio"})
    assert done.returncode == 78 and "MEMORY_WORKER_EVENT_LOOP" in done.stderr


def test_migrate_creates_the_schema_and_refuses_a_newer_database(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "memory.db"
    done = cli("migrate", "--db", str(path))
    assert done.returncode == 0 and "schema version" in done.stdout
    conn = apsw.Connection(str(path))
    assert conn.pragma("journal_mode") == "wal"
    conn.pragma("user_version", 999)
    conn.close()
    done = cli("migrate", "--db", str(path))
    assert done.returncode == 1 and "newer" in done.stderr


@pytest.mark.parametrize("event_loop", [None, "asyncio"])
async def test_run_starts_an_embedded_server_serves_and_stops_cleanly_on_sigterm(
    tmp_path: Path, event_loop: str | None
) -> None:
    """On uvloop's event loop by default (worker/event_loop.py), on asyncio's when asked."""
    port = free_port()
    env = {**os.environ, "MEMORY_WORKER_EMBEDDED_PORT": str(port), "MEMORY_WORKER_EMBEDDER": "none"}
    env.pop("MEMORY_WORKER_NATS_URL", None)
    env.pop("MEMORY_WORKER_EVENT_LOOP", None)
    if event_loop is not None:
        env["MEMORY_WORKER_EVENT_LOOP"] = event_loop
    db = tmp_path / "data" / "memory.db"
    process = subprocess.Popen(
        [*WORKER, "run", "--db", str(db)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        url = f"nats://127.0.0.1:{port}"
        await wait_until(
            lambda: asyncio.to_thread(
                lambda: cli("check", "--nats-url", url, "--timeout", "1").returncode == 0
            ),
            "`memory-worker check` passing against the embedded server",
            interval=0.1,
        )
        nc = await nats.connect(url)
        client = Client(nc)
        stores = [
            asyncio.ensure_future(client.store("a", f"secret content {i}")) for i in range(200)
        ]
        pending = asyncio.gather(*stores)
        # The signal while the stores are being served: after the first one was acknowledged.
        await asyncio.wait(stores, return_when=asyncio.FIRST_COMPLETED)
        process.send_signal(signal.SIGTERM)
        acknowledged = [r["id"] for r in await pending]
        started = time.monotonic()
        stdout, stderr = await asyncio.to_thread(process.communicate, timeout=15)
        assert process.returncode == 0, stderr.decode()
        assert time.monotonic() - started < 10
        await nc.close()
    finally:
        if process.poll() is None:
            process.kill()
    assert stdout == b""
    events = [json.loads(line) for line in stderr.decode().splitlines()]
    names = [event["event"] for event in events]
    assert "nats.embedded_started" in names and names[-1] == "worker.stopped"
    [start] = [event for event in events if event["event"] == "worker.started"]
    assert start["loop"] == (event_loop or "uvloop")
    handled = [event for event in events if event["event"] == "trigger.handled"]
    assert handled and {"trigger", "duration_ms", "outcome", "agent"} <= set(handled[0])
    assert "secret content" not in stderr.decode()
    assert (db.parent / "nats").is_dir()
    conn = apsw.Connection(str(db))
    stored = {row[0] for row in conn.execute("SELECT id FROM memories")}
    assert set(acknowledged) <= stored
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "embedded nats-server still running"


async def test_the_worker_waits_for_a_nats_server_that_is_not_up_yet(tmp_path: Path) -> None:
    from tests.conftest import worker_config
    from worker.embedded import server_binary

    port = free_port()
    app = App(worker_config(f"nats://127.0.0.1:{port}", tmp_path / "memory.db"))
    starting = asyncio.create_task(app.start())
    # Time passing is the behaviour: 1.5 s without a server, and start-up is still waiting.
    await asyncio.sleep(1.5)
    assert not starting.done()
    server = subprocess.Popen(
        [server_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp_path / "js")],
        stderr=subprocess.DEVNULL,
    )
    try:
        await asyncio.wait_for(starting, 20)
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        assert (await Client(nc).store("a", "late server"))["stored"] is True
        await nc.close()
    finally:
        await app.stop()
        server.terminate()
        server.wait()


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ('{"agentId": "a", "content": "\\ud800"}', "lone surrogate"),
        (
            '{"agentId": "a", "content": "c", "metadata": ' + '{"a": ' * 2000 + "1" + "}" * 2001,
            "nested",
        ),
    ],
)
async def test_fire_sends_valid_json_the_worker_refuses_and_prints_its_reply(
    nats_url: str, worker: App, payload: str, says: str
) -> None:
    """A lone surrogate or deep nesting is JSON: `fire` leaves the verdict to the worker, which
    names the field (no traceback, no "not JSON"), and exits 1 for its error reply."""
    done = await asyncio.to_thread(cli, "fire", "memory::store", payload, "--nats-url", nats_url)
    assert done.returncode == 1, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "invalid_request" and says in error["message"]
    assert "$.content" in error["message"] or "$.metadata" in error["message"]
    assert "Traceback" not in done.stderr
