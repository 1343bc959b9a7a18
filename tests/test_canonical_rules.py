"""Canonical sessions under the rules memories follow: tenants, erase, stats and metrics, export
and import."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import apsw
import nats

from tests.conftest import worker_config
from tests.support import Client
from tests.test_cli import free_port
from tests.test_life import sql
from tests.test_tenancy import ask, info, tenanted  # noqa: F401 (a fixture)
from worker.app import App
from worker.transfer.exporting import export_jsonl
from worker.transfer.importing import import_jsonl

ALICE, BOB = info("TEAM_A", "alice"), info("TEAM_B", "bob")


def message(agent: str, user: str, content: str, channel: str = "web") -> dict[str, Any]:
    return {"agentId": agent, "userId": user, "channel": channel, "role": "user",
            "content": content}  # fmt: skip


async def test_another_tenants_same_agent_and_user_see_nothing(tenanted: App) -> None:  # noqa: F811
    """alice (TEAM_A, granted planner-*) appends; bob of TEAM_B asks for the same agent and user
    and gets 404, his own append starts his own count, and each tenant's stats count its own."""
    said = message("planner-1", "u1", "the launch is on Monday")
    assert (await ask(tenanted, "memory::canonical::append", said, ALICE))["messageCount"] == 1
    asked = {"agentId": "planner-1", "userId": "u1"}
    status, text = await ask(tenanted, "memory::canonical::get", asked, BOB)
    assert status == "404" and "`$.userId`" in text
    theirs = message("planner-1", "u1", "the launch is on Monday", "slack")
    assert (await ask(tenanted, "memory::canonical::append", theirs, BOB))["messageCount"] == 1
    mine = await ask(tenanted, "memory::canonical::get", asked, ALICE)
    assert (mine["lastChannel"], mine["messageCount"]) == ("web", 1)
    assert (await ask(tenanted, "memory::stats", {}, BOB))["canonicalSessions"] == 1
    # A user of a tenant may append only as the agents granted to it.
    status, text = await ask(tenanted, "memory::canonical::append", message("x", "u1", "hi"), ALICE)
    assert status == "403" and "`$.agentId`" in text
    assert sql(
        tenanted, "SELECT tenant, count(*) FROM canonical_sessions GROUP BY 1 ORDER BY 1"
    ) == [
        ("TEAM_A", 1),
        ("TEAM_B", 1),
    ]


async def test_erase_takes_the_agents_canonical_sessions_and_leaves_others(
    client: Client, worker: App
) -> None:
    for agent, user in (("a", "u1"), ("a", "u2"), ("b", "u1")):
        await client.ok("memory::canonical::append", message(agent, user, f"{agent} {user}"))
    reply = await client.ok("memory::erase", {"agentId": "a", "confirm": "a"})
    assert reply["memories"] == 2 and reply["sessions"] == 2
    assert sql(worker, "SELECT agent_id, user_id FROM canonical_sessions") == [("b", "u1")]
    gone = await client.call("memory::canonical::get", {"agentId": "a", "userId": "u1"})
    assert gone.code == "404"


async def test_stats_and_metrics_count_canonical_sessions(nats_url: str, tmp_path: Path) -> None:
    app = App(worker_config(nats_url, tmp_path / "memory.db", metrics_port=free_port()))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        for user in ("u1", "u2", "u2"):
            await client.ok("memory::canonical::append", message("a", user, f"hello {user}"))
        stats: dict[str, Any] = await client.ok("memory::stats", {})
        assert app.metrics is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", app.metrics.port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        response = (await reader.read()).decode()
        writer.close()
    finally:
        await nc.close()
        await app.stop()
    assert stats["canonicalSessions"] == 2 and stats["sessions"] == 2
    assert "memory_worker_canonical_sessions 2\n" in response


async def test_export_and_import_carry_canonical_sessions_with_their_messages(
    client: Client, worker: App, tmp_path: Path
) -> None:
    for n in range(30):  # compacted with the fallback: a summary to carry
        await client.ok("memory::canonical::append", message("a", "u1", f"turn {n}", "slack"))
    await client.ok("memory::canonical::append", message("a", "u2", "another user"))
    out = io.BytesIO()
    conn = apsw.Connection(worker.config.db_path)
    export_jsonl(conn, out, agent_id="a", now=1)
    conn.close()
    assert out.getvalue().count(b'"kind":"canonical"') == 2
    copy = App(worker_config(worker.config.nats_url, tmp_path / "copy.db", subject_prefix="copy."))
    await copy.start()
    try:
        conn = apsw.Connection(copy.config.db_path)
        first = import_jsonl(conn, out.getvalue().splitlines(keepends=True))
        again = import_jsonl(conn, out.getvalue().splitlines(keepends=True))
        conn.close()
        assert (first.canonical_written, again.canonical_written) == (2, 0)
        copied = Client(client.nc, prefix="copy.")
        for user in ("u1", "u2"):
            asked = {"agentId": "a", "userId": user}
            original = await client.ok("memory::canonical::get", asked)
            assert await copied.ok("memory::canonical::get", asked) == original
        session = {"agentId": "a", "sessionId": "canonical:u1"}
        listed = await copied.ok("memory::session::get", session)
        assert listed == await client.ok("memory::session::get", session)
        assert len(listed["messages"]) == 11
        # Appending goes on from the imported count.
        more = await copied.ok("memory::canonical::append", message("a", "u1", "turn 30"))
        assert more["messageCount"] == 31
    finally:
        await copy.stop()
