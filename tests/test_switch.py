"""The memory switch over the bus (contract section 17): memory::toggle, and what a switched-off
agent's store, recall, maintenance, stats, ingestion, audit, export and erase do."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import apsw
import msgspec
import nats

from tests.conftest import worker_config
from tests.support import Client, wait_until
from tests.test_life import sql
from worker.app import App
from worker.transfer.exporting import export_jsonl
from worker.transfer.importing import import_jsonl

DAY = 86_400_000
OFF: dict[str, Any] = {
    "id": None,
    "stored": False,
    "deduplicated": False,
    "disabled": True,
    "facts": [],
}


async def toggle(client: Client, agent: str, enabled: bool) -> Any:
    return await client.ok("memory::toggle", {"agentId": agent, "enabled": enabled})


async def enabled(client: Client, agent: str) -> bool:
    body = await client.ok("memory::stats", {"agentId": agent})
    assert isinstance(body["enabled"], bool)
    return bool(body["enabled"])


async def test_a_switched_off_agent_stores_nothing_recalls_nothing_and_gets_it_all_back_on(
    client: Client, worker: App
) -> None:
    kept = (await client.store("a", "the launch code is in the blue folder"))["id"]
    await client.ok("memory::update", {"agentId": "a", "id": kept, "pinned": True})
    other = (await client.store("b", "the launch code is elsewhere"))["id"]
    assert await enabled(client, "a") is True
    assert await toggle(client, "a", False) == {"enabled": False}
    assert await enabled(client, "a") is False and await enabled(client, "b") is True

    assert await client.store("a", "a private remark about the launch") == OFF
    assert sql(worker, "SELECT count(*) FROM memories WHERE agent_id = 'a'") == [(1,)]
    assert await client.recall("a", "launch code") == []
    body = await client.ok(
        "memory::recall", {"agentId": "a", "query": "launch", "withPinned": True}
    )
    assert body == {"memories": [], "pinned": []}
    assert [m["id"] for m in await client.recall("b", "launch code")] == [other]

    assert await toggle(client, "a", True) == {"enabled": True}
    assert [m["id"] for m in await client.recall("a", "launch code")] == [kept]
    again = await client.store("a", "a private remark about the launch")
    assert again["stored"] is True and "disabled" not in again
    assert (await client.ok("memory::stats", {}))["agentsDisabled"] == 0


async def test_a_switched_off_agents_store_reply_has_empty_facts_and_asserts_none(
    client: Client, worker: App
) -> None:
    """The store reply always has `facts` (contract section 19), also while the agent is off:
    `[]`, and the fact its text states is not asserted."""
    await toggle(client, "a", False)
    reply = await client.ok("memory::store", {"agentId": "a", "content": "I live in Lisbon."})
    assert reply["facts"] == [] and reply["disabled"] is True
    assert sql(worker, "SELECT count(*) FROM facts") == [(0,)]
    await toggle(client, "a", True)
    again = await client.ok("memory::store", {"agentId": "a", "content": "I live in Lisbon."})
    assert len(again["facts"]) == 1


async def test_toggle_is_idempotent_and_audited_with_the_state_it_set(client: Client) -> None:
    await toggle(client, "a", False)
    await toggle(client, "a", False)  # already off: changes nothing, audits nothing
    await toggle(client, "a", True)
    events = (await client.ok("memory::audit", {"agentId": "a"}))["events"]
    assert [(e["trigger"], e["detail"]) for e in events] == [
        ("memory::toggle", {"enabled": False}),
        ("memory::toggle", {"enabled": True}),
    ]


async def test_bad_toggles_are_refused_naming_the_field_and_change_nothing(
    client: Client, worker: App
) -> None:
    for payload, field in (
        ({"agentId": "a"}, "`enabled`"),  # required
        ({"agentId": "a", "enabled": "no"}, "$.enabled"),
        ({"agentId": "a", "enabled": None}, "$.enabled"),
        ({"enabled": False}, "`agentId`"),
        ({"agentId": " a", "enabled": False}, "$.agentId"),
    ):
        reply = await client.call("memory::toggle", payload)
        assert reply.code == "400", payload
        assert field in reply.body["error"]["message"], (payload, reply.body)
    assert sql(worker, "SELECT count(*) FROM agent_switch") == [(0,)]


async def test_maintenance_leaves_a_switched_off_agent_alone(client: Client, worker: App) -> None:
    for agent in ("off", "on"):
        for index in range(3):
            await client.store(agent, f"old note {index}", timestamp=1, importance=0.1)
    await toggle(client, "off", False)
    old = 1  # last accessed at the epoch: due for decay
    sql(worker, "UPDATE memories SET last_accessed = ?", old)
    decayed = await client.ok("memory::consolidate", {})
    assert decayed["memoriesDecayed"] == 3
    evicted = await client.ok("memory::evict", {"cap": 0})
    assert evicted["evicted"] == 3
    assert sql(worker, "SELECT agent_id, count(*), max(confidence) FROM memories GROUP BY 1") == [
        ("off", 3, 1.0)
    ]


async def test_an_ingested_store_for_a_switched_off_agent_writes_nothing(
    nats_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "memory.db"
    app = App(worker_config(nats_url, db))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        js = nc.jetstream()
        await js.publish(
            "memory.ingest.toggle", msgspec.json.encode({"agentId": "a", "enabled": False})
        )
        await wait_until(
            lambda: sql(app, "SELECT count(*) FROM agent_switch") == [(1,)], "the switch row"
        )
        await js.publish(
            "memory.ingest.store", msgspec.json.encode({"agentId": "a", "content": "private"})
        )
        await js.publish(
            "memory.ingest.store", msgspec.json.encode({"agentId": "b", "content": "public"})
        )

        # The stream is a work queue: a message leaves it once the worker handled it.
        async def handled() -> bool:
            return bool((await js.stream_info("MEMORY_INGEST")).state.messages == 0)

        await wait_until(handled, "both ingested stores handled (MEMORY_INGEST empty)")
        assert sql(app, "SELECT agent_id FROM memories") == [("b",)]
        assert await client.recall("a", "private") == []
    finally:
        await nc.close()
        await app.stop()


async def test_export_and_import_keep_an_agent_switched_off_and_erase_forgets_the_switch(
    client: Client, worker: App, tmp_path: Path
) -> None:
    await client.store("a", "something")
    await toggle(client, "a", False)
    await toggle(client, "quiet", False)  # off before it ever stored anything
    out = io.BytesIO()
    conn = apsw.Connection(worker.config.db_path)
    export_jsonl(conn, out, agent_id=None, now=1)
    conn.close()
    assert out.getvalue().count(b'"kind":"switch"') == 2
    copy = App(worker_config(worker.config.nats_url, tmp_path / "copy.db", subject_prefix="copy."))
    await copy.start()
    try:
        conn = apsw.Connection(copy.config.db_path)
        import_jsonl(conn, out.getvalue().splitlines(keepends=True))
        import_jsonl(conn, out.getvalue().splitlines(keepends=True))  # twice: no harm
        conn.close()
        assert sql(copy, "SELECT agent_id FROM agent_switch ORDER BY 1") == [("a",), ("quiet",)]
        copied = Client(client.nc, prefix="copy.")
        assert await copied.store("a", "more") == OFF
    finally:
        await copy.stop()
    reply = await client.ok("memory::erase", {"agentId": "a", "confirm": "a"})
    assert reply["memories"] == 1
    assert sql(worker, "SELECT agent_id FROM agent_switch") == [("quiet",)]
    assert (await client.store("a", "after the erasure"))["stored"] is True
