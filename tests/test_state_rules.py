"""Section 14's state under the rules memories follow: tenants and grants, erase, stats and
metrics."""

from __future__ import annotations

import asyncio
import io
import json
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


async def test_tenants_never_see_each_others_keys_tasks_or_usage(tenanted: App) -> None:  # noqa: F811
    set_a = {"namespace": "shared", "key": "k", "value": "a's"}
    assert await ask(tenanted, "memory::kv::set", set_a, BOB) == {"version": 1}
    assert await ask(tenanted, "memory::kv::set", {**set_a, "value": "b's"}, BOB) == {"version": 2}
    status, _ = await ask(tenanted, "memory::kv::get", {"namespace": "shared", "key": "k"}, ALICE)
    assert status == "404"
    await ask(tenanted, "memory::task::post", {"title": "t", "createdBy": "planner-1"}, ALICE)
    assert await ask(tenanted, "memory::task::claim", {"agentId": "x"}, BOB) == {"task": None}
    assert (await ask(tenanted, "memory::task::list", {}, BOB))["tasks"] == []
    record = {"agentId": "planner-1", "model": "m", "promptTokens": 3, "completionTokens": 4}
    assert await ask(tenanted, "memory::usage::record", record, ALICE) == {"recorded": True}
    empty = await ask(tenanted, "memory::usage::query", {"groupBy": "agent"}, BOB)
    assert empty["groups"] == [] and empty["total"]["events"] == 0
    # An operator names the tenant, and sees each one's own.
    admin = await ask(tenanted, "memory::kv::get", {"namespace": "shared", "key": "k",
                                                    "tenant": "TEAM_B"}, None)  # fmt: skip
    assert admin["value"] == "b's"
    assert sql(tenanted, "SELECT tenant, count(*) FROM tasks GROUP BY 1") == [("TEAM_A", 1)]


async def test_grants_bind_agent_ids_and_task_posters_but_not_the_shared_namespace(
    tenanted: App,  # noqa: F811
) -> None:
    """alice may act only as `planner-*`: as the agent of keys, claims, completions and usage,
    and as the poster of a task; `shared` is the tenant's (the board's listing under grants:
    tests/test_grants_bus.py)."""
    for trigger, body, field in (
        ("memory::kv::set", {"agentId": "other", "key": "k", "value": 1}, "agentId"),
        ("memory::task::post", {"title": "t", "createdBy": "other"}, "createdBy"),
        ("memory::task::claim", {"agentId": "other"}, "agentId"),
        ("memory::usage::query", {"agentId": "other", "groupBy": "day"}, "agentId"),
    ):
        status, message = await ask(tenanted, trigger, body, ALICE)
        assert status == "403" and f"`$.{field}`" in message, (trigger, message)
    assert sql(tenanted, "SELECT count(*) FROM kv UNION ALL SELECT count(*) FROM tasks") == [
        (0,),
        (0,),
    ]
    shared = {"namespace": "shared", "key": "k", "value": 1}
    assert await ask(tenanted, "memory::kv::set", shared, ALICE) == {"version": 1}
    posted = await ask(
        tenanted, "memory::task::post", {"title": "t", "createdBy": "planner-1",
                                         "assignee": "other"}, ALICE)  # fmt: skip
    assert isinstance(posted["taskId"], str)


async def test_erase_takes_the_agents_keys_usage_and_posted_tasks_and_frees_its_claims(
    client: Client, worker: App
) -> None:
    for key in ("a1", "a2"):
        await client.ok("memory::kv::set", {"agentId": "a", "key": key, "value": 1})
    await client.ok("memory::kv::set", {"namespace": "shared", "key": "s", "value": 1})
    await client.ok("memory::kv::set", {"agentId": "b", "key": "b1", "value": 1})
    await client.ok("memory::task::post", {"title": "by a", "createdBy": "a"})
    held = (await client.ok("memory::task::post", {"title": "by b", "createdBy": "b"}))["taskId"]
    await client.ok("memory::task::post", {"title": "by b too", "createdBy": "b"})
    # b holds the task a posted, and a holds b's first one.
    assert (await client.ok("memory::task::claim", {"agentId": "b"}))["task"]["title"] == "by a"
    assert (await client.ok("memory::task::claim", {"agentId": "a"}))["task"]["taskId"] == held
    for agent in ("a", "b"):
        await client.ok(
            "memory::usage::record",
            {"agentId": agent, "model": "m", "promptTokens": 1, "completionTokens": 1},
        )
    reply = await client.ok("memory::erase", {"agentId": "a", "confirm": "a"})
    assert reply["kvKeys"] == 2
    assert sql(worker, "SELECT agent_id, key FROM kv ORDER BY 1") == [("", "s"), ("b", "b1")]
    assert sql(worker, "SELECT agent_id FROM usage") == [("b",)]
    assert sql(worker, "SELECT agent_id FROM usage_days") == [("b",)]
    assert sql(worker, "SELECT title, status, claimed_by FROM tasks ORDER BY seq") == [
        ("by b", "pending", None),
        ("by b too", "pending", None),
    ]
    events = (await client.ok("memory::audit", {"agentId": "a"}))["events"]
    assert [(e["trigger"], e["detail"]) for e in events] == [("memory::erase", {"kvKeys": 2})]


async def test_stats_and_metrics_count_keys_tasks_by_status_and_usage(
    nats_url: str, tmp_path: Path
) -> None:
    app = App(worker_config(nats_url, tmp_path / "memory.db", metrics_port=free_port()))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        await client.ok("memory::kv::set", {"agentId": "a", "key": "k", "value": 1})
        await client.ok("memory::kv::set", {"namespace": "shared", "key": "k", "value": 1})
        for title in ("one", "two", "three"):
            await client.ok("memory::task::post", {"title": title, "createdBy": "a"})
        task = (await client.ok("memory::task::claim", {"agentId": "a"}))["task"]
        await client.ok("memory::task::complete", {"agentId": "a", "taskId": task["taskId"],
                                                   "result": 1})  # fmt: skip
        await client.ok("memory::task::claim", {"agentId": "a"})
        for _ in range(4):
            await client.ok(
                "memory::usage::record",
                {"agentId": "a", "model": "m", "promptTokens": 1, "completionTokens": 0},
            )
        stats: dict[str, Any] = await client.ok("memory::stats", {})
        assert app.metrics is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", app.metrics.port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        response = (await reader.read()).decode()
        writer.close()
    finally:
        await nc.close()
        await app.stop()
    counts = {key: stats[key] for key in ("kvKeys", "tasksPending", "tasksClaimed",
                                          "tasksCompleted", "usageRecords")}  # fmt: skip
    assert counts == {"kvKeys": 2, "tasksPending": 1, "tasksClaimed": 1, "tasksCompleted": 1,
                      "usageRecords": 4}  # fmt: skip
    for line in ("kv_keys 2", "tasks_pending 1", "tasks_claimed 1", "tasks_completed 1",
                 "usage_records 4"):  # fmt: skip
        assert f"memory_worker_{line}\n" in response, line
    assert json.dumps(stats)  # the reply is plain JSON


async def test_export_and_import_carry_keys_tasks_and_usage_once(
    client: Client, worker: App, tmp_path: Path
) -> None:
    await client.ok("memory::kv::set", {"agentId": "a", "key": "k", "value": {"x": [1]}})
    await client.ok("memory::kv::set", {"agentId": "a", "key": "k", "value": {"x": [2]}})
    await client.ok("memory::kv::set", {"namespace": "shared", "key": "team", "value": "blue"})
    posted = (await client.ok("memory::task::post", {"title": "t", "createdBy": "a"}))["taskId"]
    await client.ok("memory::task::claim", {"agentId": "b"})
    await client.ok("memory::task::complete", {"agentId": "b", "taskId": posted, "result": [1]})
    for day in range(3):
        await client.ok(
            "memory::usage::record",
            {
                "agentId": "a",
                "model": "m",
                "promptTokens": 10,
                "completionTokens": 1,
                "costUsd": 0.5,
                "timestamp": day * 86_400_000,
            },
        )
    out = io.BytesIO()
    conn = apsw.Connection(worker.config.db_path)
    export_jsonl(conn, out, agent_id=None, now=1)
    only_a = io.BytesIO()
    export_jsonl(conn, only_a, agent_id="a", now=1)
    conn.close()
    assert b'"kind":"kv"' in only_a.getvalue() and b"team" not in only_a.getvalue()
    copy = App(worker_config(worker.config.nats_url, tmp_path / "copy.db", subject_prefix="copy."))
    await copy.start()
    try:
        conn = apsw.Connection(copy.config.db_path)
        first = import_jsonl(conn, out.getvalue().splitlines(keepends=True))
        again = import_jsonl(conn, out.getvalue().splitlines(keepends=True))
        conn.close()
        assert (first.kv_written, first.tasks_added, first.usage_added) == (2, 1, 3)
        assert (again.kv_written, again.tasks_added, again.usage_added) == (0, 0, 0)
        copied = Client(client.nc, prefix="copy.")
        got = await copied.ok("memory::kv::get", {"agentId": "a", "key": "k"})
        assert (got["value"], got["version"]) == ({"x": [2]}, 2)
        shared = await copied.ok("memory::kv::get", {"namespace": "shared", "key": "team"})
        assert shared["value"] == "blue"
        tasks = (await copied.ok("memory::task::list", {}))["tasks"]
        original = (await client.ok("memory::task::list", {}))["tasks"]
        assert tasks == original and tasks[0]["result"] == [1]
        usage = await copied.ok("memory::usage::query", {"groupBy": "day"})
        assert usage == await client.ok("memory::usage::query", {"groupBy": "day"})
        assert usage["total"] == {"promptTokens": 30, "completionTokens": 3, "costUsd": 1.5,
                                  "events": 3}  # fmt: skip
    finally:
        await copy.stop()
