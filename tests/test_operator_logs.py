"""What an operator reads in the logs: maintenance counts, why a request was refused, why
compaction fell back, and a shutdown without false alarms."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest

from tests.conftest import worker_config
from tests.support import Client
from tests.test_cli import free_port
from worker.app import App

Logs = list[MutableMapping[str, Any]]


def events(logs: Logs, name: str) -> Logs:
    return [entry for entry in logs if entry["event"] == name]


async def test_maintenance_logs_its_counts_at_info_whoever_fires_it(
    client: Client, worker: App, captured_logs: Logs
) -> None:
    """Evict and consolidate log `maintenance.done` with the reply's counts and the source,
    fired by the schedule or over the bus alike."""
    await client.store("a", "old and unimportant", importance=0.1, timestamp=1_000)
    await client.store("a", "idle for long", importance=0.9, timestamp=2_000)
    await worker._fire("memory::evict", b"{}")
    await client.ok("memory::consolidate", {"decayRate": 0.5})
    await client.ok("memory::evict", {"dryRun": True, "cap": 0})
    [scheduled, consolidated, dry] = events(captured_logs, "maintenance.done")
    assert scheduled["log_level"] == "info"
    assert {k: scheduled[k] for k in ("trigger", "job", "source", "dry_run")} == {
        "trigger": "memory::evict", "job": "evict", "source": "schedule", "dry_run": False,
    }  # fmt: skip
    assert (scheduled["evicted"], scheduled["stale"]) == (1, 1)
    assert (scheduled["low_confidence"], scheduled["over_cap"]) == (0, 0)
    assert scheduled["duration_ms"] > 0
    assert consolidated["trigger"] == "memory::consolidate" and consolidated["source"] == "bus"
    assert (consolidated["memories_decayed"], consolidated["memories_merged"]) == (1, 0)
    assert dry["dry_run"] is True and dry["over_cap"] == 1 and dry["evicted"] == 1


async def test_a_refused_request_is_logged_with_its_code_and_field_never_its_value(
    client: Client, captured_logs: Logs
) -> None:
    """`trigger.handled` of a refusal carries the error code and the JSON path of the field,
    while the value (which the reply's message may quote) appears nowhere in the log."""
    refused = await client.call("memory::store", {"agentId": "a", "content": "x", "role": "s3cr3t"})
    assert refused.code == "400" and "s3cr3t" in refused.body["error"]["message"]
    missing = await client.call("memory::session::repair", {"agentId": "a", "sessionId": "n0pe"})
    assert missing.code == "404"
    await client.store("a", "fine")
    [role, session, ok] = events(captured_logs, "trigger.handled")
    assert (role["outcome"], role["field"]) == ("invalid_request", "$.role")
    assert (session["outcome"], session["field"]) == ("not_found", "$.sessionId")
    assert ok["outcome"] == "ok" and "field" not in ok
    assert "s3cr3t" not in repr(captured_logs) and "n0pe" not in repr(captured_logs)


@pytest.fixture
async def compacting(nats_url: str, tmp_path: Path) -> AsyncIterator[Client]:
    # Only compaction asks the LLM: a topic's title would log its own `llm.fallback`.
    config = worker_config(
        nats_url, tmp_path / "memory.db", llm_timeout=0.5, topic_titles="builtin"
    )
    app = App(config)
    await app.start()
    nc = await nats.connect(nats_url)
    yield Client(nc)
    await nc.close()
    await app.stop()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (None, "no_responder"),
        ("silent", "timeout"),
        ("error", "error_reply"),
        ("not json", "bad_reply"),
        ("blank", "empty_answer"),
    ],
)
async def test_compaction_logs_why_it_fell_back_from_the_llm(
    nats_url: str, compacting: Client, captured_logs: Logs, answer: str | None, reason: str
) -> None:
    """A fallback summary logs `llm.fallback` at warning with a reason that tells a missing
    service from a slow one, an error reply, a reply that is not the contract's, an empty one."""
    llm = await nats.connect(nats_url)

    async def respond(msg: Any) -> None:
        if answer == "silent":
            return  # takes the request and never answers: the worker's llm_timeout runs out
        if answer == "error":
            await llm.publish(msg.reply, b"{}", headers={"Nats-Service-Error-Code": "500"})
        elif answer == "not json":
            await msg.respond(b"<html>")
        else:
            await msg.respond(msgspec.json.encode({"content": " \n "}))

    if answer is not None:
        await llm.subscribe("llm.complete", cb=respond)
        await llm.flush()
    try:
        for index in range(30):
            await compacting.store("a", f"message {index}", sessionId="s", timestamp=index)
        reply = await compacting.ok("memory::session::compact", {"agentId": "a", "sessionId": "s"})
    finally:
        await llm.close()
    assert reply["summarizer"] == "fallback"
    [fallback] = events(captured_logs, "llm.fallback")
    assert fallback["log_level"] == "warning" and fallback["reason"] == reason
    # Bound by dispatch for the request, so a nested line says whose request it was.
    assert fallback["trigger"] == "memory::session::compact" and fallback["agent"] == "a"


async def test_a_clean_shutdown_logs_no_warning(tmp_path: Path) -> None:
    """SIGTERM to a healthy worker (embedded server, requests in flight) logs nothing at warning
    or above: `nats.disconnected` is for connections lost, not for our own close."""
    env = {
        **os.environ,
        "MEMORY_WORKER_EMBEDDED_PORT": str(free_port()),
        "MEMORY_WORKER_EMBEDDER": "none",
        "MEMORY_WORKER_LOG_FORMAT": "json",
    }
    env.pop("MEMORY_WORKER_NATS_URL", None)
    command = [sys.executable, "-m", "worker", "run", "--db", str(tmp_path / "memory.db")]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    try:
        lines: list[str] = []
        while not any('"worker.started"' in line for line in lines):
            line = await asyncio.wait_for(asyncio.to_thread(process.stderr.readline), 30)
            assert line, "".join(lines)
            lines.append(line)
        nc = await nats.connect(json.loads(lines[-1])["nats"])
        stores = [asyncio.ensure_future(Client(nc).store("a", f"note {i}")) for i in range(50)]
        pending = asyncio.gather(*stores)
        # The signal while the stores are being served: after the first one was acknowledged.
        await asyncio.wait(stores, return_when=asyncio.FIRST_COMPLETED)
        process.send_signal(signal.SIGTERM)
        await pending
        rest = await asyncio.to_thread(process.communicate, timeout=20)
        await nc.close()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    logged = [json.loads(line) for line in [*lines, *rest[1].splitlines()]]
    assert logged[-1]["event"] == "worker.stopped"
    loud = [entry for entry in logged if entry["level"] not in ("debug", "info")]
    assert loud == []
