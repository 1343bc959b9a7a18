"""The key-value store over the bus (contract section 14): memory::kv::set, get, delete and
list, per agent and in `shared`, compare-and-set under concurrency, refusals, audit, ingestion."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import nats

from tests.conftest import worker_config
from tests.support import Client, wait_until
from tests.test_life import sql
from worker.app import App

SHARED = {"namespace": "shared"}


async def kv_set(client: Client, owner: dict[str, str], key: str, value: Any, **more: Any) -> Any:
    return await client.call("memory::kv::set", {**owner, "key": key, "value": value, **more})


async def test_set_get_delete_per_agent_and_shared_with_versions(client: Client) -> None:
    a, b = {"agentId": "a"}, {"agentId": "b"}
    assert (await kv_set(client, a, "prefs", {"tone": "brief"})).body == {"version": 1}
    assert (await kv_set(client, a, "prefs", {"tone": "warm"})).body == {"version": 2}
    got = await client.ok("memory::kv::get", {**a, "key": "prefs"})
    assert got["value"] == {"tone": "warm"} and got["version"] == 2 and got["key"] == "prefs"
    assert isinstance(got["updatedAt"], int)
    # Another agent and the shared namespace are other key spaces.
    assert (await client.call("memory::kv::get", {**b, "key": "prefs"})).code == "404"
    assert (await client.call("memory::kv::get", {**SHARED, "key": "prefs"})).code == "404"
    assert (await kv_set(client, SHARED, "prefs", [1, "two", None])).body == {"version": 1}
    assert (await client.ok("memory::kv::get", {**SHARED, "key": "prefs"}))["value"] == [
        1,
        "two",
        None,
    ]
    assert await client.ok("memory::kv::delete", {**a, "key": "prefs"}) == {"deleted": True}
    assert await client.ok("memory::kv::delete", {**a, "key": "prefs"}) == {"deleted": False}
    assert (await client.call("memory::kv::get", {**a, "key": "prefs"})).code == "404"
    assert (await client.ok("memory::kv::get", {**SHARED, "key": "prefs"}))["version"] == 1
    # A deleted key starts again at version 1.
    assert (await kv_set(client, a, "prefs", "again")).body == {"version": 1}


async def test_if_version_compares_and_sets(client: Client) -> None:
    a = {"agentId": "a"}
    assert (await kv_set(client, a, "k", 1, ifVersion=0)).body == {"version": 1}
    refused = await kv_set(client, a, "k", 2, ifVersion=0)
    assert refused.code == "409" and "`$.ifVersion`" in refused.body["error"]["message"]
    assert (await kv_set(client, a, "k", 2, ifVersion=5)).code == "409"
    assert (await kv_set(client, a, "k", 2, ifVersion=1)).body == {"version": 2}
    assert (await client.ok("memory::kv::get", {**a, "key": "k"}))["value"] == 2
    assert (await kv_set(client, a, "absent", 1, ifVersion=1)).code == "409"
    assert (await client.call("memory::kv::get", {**a, "key": "absent"})).code == "404"


async def test_a_thousand_agents_compare_and_set_one_shared_key_through_two_workers_lose_nothing(
    client: Client, worker: App, nats_url: str
) -> None:
    """Each agent reads the shared list and sets it with itself appended, `ifVersion` the version
    it read. Successes get distinct versions, the final version counts them, and the final list
    holds exactly the agents that succeeded: no update lost."""
    second = App(worker_config(nats_url, Path(worker.config.db_path)))
    await second.start()
    try:
        assert (await kv_set(client, SHARED, "roll", [], ifVersion=0)).body == {"version": 1}

        async def append(agent: str) -> int | None:
            got = await client.ok("memory::kv::get", {**SHARED, "key": "roll"})
            reply = await kv_set(
                client, SHARED, "roll", [*got["value"], agent], ifVersion=got["version"]
            )
            if reply.code == "409":
                return None
            assert reply.ok, reply
            version: int = reply.body["version"]
            return version

        agents = [f"agent-{n}" for n in range(1000)]
        versions = await asyncio.gather(*(append(agent) for agent in agents))
    finally:
        await second.stop()
    won = [v for v in versions if v is not None]
    assert len(won) == len(set(won)) >= 1
    final = await client.ok("memory::kv::get", {**SHARED, "key": "roll"})
    assert final["version"] == 1 + len(won) == max(won)
    winners = {agent for agent, v in zip(agents, versions, strict=True) if v is not None}
    assert sorted(final["value"]) == sorted(winners)


async def test_list_pages_in_key_order_from_a_prefix(client: Client) -> None:
    a = {"agentId": "a"}
    keys = [f"user:{n:03d}" for n in range(25)] + ["user", "usex", "team:1", "user:\U0010ffff"]
    for key in keys:
        await kv_set(client, a, key, {"k": key})
    await kv_set(client, {"agentId": "b"}, "user:999", 0)
    seen, cursor = [], None
    while True:
        body = {**a, "prefix": "user:", "limit": 10, **({"cursor": cursor} if cursor else {})}
        page = await client.ok("memory::kv::list", body)
        seen += [item["key"] for item in page["items"]]
        assert all(item["value"] == {"k": item["key"]} for item in page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == sorted(k for k in keys if k.startswith("user:"))
    everything = await client.ok("memory::kv::list", {**a, "limit": 1000})
    assert [item["key"] for item in everything["items"]] == sorted(keys)
    other = await client.call("memory::kv::list", {**a, "prefix": "team", "cursor": cursor or "x"})
    assert other.code == "400" and "cursor" in other.body["error"]["message"]


async def test_bad_kv_requests_are_refused_naming_the_field_and_change_nothing(
    client: Client, worker: App
) -> None:
    big = "x" * (64 * 1024 - 1)  # with its quotes, 64 KiB + 1 bytes of JSON
    for payload, code, field in (
        ({"agentId": "a", "key": "k" * 513, "value": 1}, "400", "$.key"),
        ({"agentId": "a", "key": "", "value": 1}, "400", "$.key"),
        ({"agentId": "a", "key": "k", "value": big}, "413", "$.value"),
        ({"agentId": "a", "key": "k", "value": None}, "400", "$.value"),
        ({"agentId": "a", "key": "k"}, "400", "`value`"),
        ({"key": "k", "value": 1}, "400", "$.agentId"),
        ({"agentId": "a", "namespace": "shared", "key": "k", "value": 1}, "400", "$.agentId"),
        ({"namespace": "team", "key": "k", "value": 1}, "400", "$.namespace"),
        ({"agentId": "a", "key": "k", "value": 1, "ifVersion": -1}, "400", "$.ifVersion"),
    ):
        reply = await client.call("memory::kv::set", payload)
        assert reply.code == code, (payload, reply)
        assert field in reply.body["error"]["message"], (payload, reply.body)
    refused = await client.raw("memory::kv::set", b'["not", "an", "object"]')
    assert refused.code == "400"
    assert (await kv_set(client, {"agentId": "a"}, "k", "x" * (64 * 1024 - 2))).ok
    assert sql(worker, "SELECT key, version FROM kv") == [("k", 1)]
    assert sql(worker, "SELECT count(*) FROM audit") == [(1,)]


async def test_kv_writes_are_audited_without_keys_or_values(client: Client) -> None:
    await kv_set(client, {"agentId": "a"}, "secret-key", "secret-value")
    await kv_set(client, SHARED, "shared-key", 1)
    await client.ok("memory::kv::delete", {"agentId": "a", "key": "secret-key"})
    await client.ok("memory::kv::delete", {"agentId": "a", "key": "secret-key"})  # nothing
    events = (await client.ok("memory::audit", {}))["events"]
    assert [(e["trigger"], e["agentId"], e["count"], e.get("detail")) for e in events] == [
        ("memory::kv::set", "a", 1, {"version": 1}),
        ("memory::kv::set", "", 1, {"namespace": "shared", "version": 1}),
        ("memory::kv::delete", "a", 1, None),
    ]
    assert b"secret" not in msgspec.json.encode(events)


async def test_a_set_published_on_ingest_is_applied(nats_url: str, worker: App) -> None:
    nc = await nats.connect(nats_url)
    try:
        await nc.jetstream().publish(
            "memory.ingest.kv.set",
            msgspec.json.encode({"agentId": "a", "key": "queued", "value": {"n": 1}}),
        )
        await wait_until(
            lambda: sql(worker, "SELECT key, value FROM kv") == [("queued", '{"n":1}')],
            "the ingested key set",
        )
        events = (await Client(nc).ok("memory::audit", {"agentId": "a"}))["events"]
        assert [(e["trigger"], e["source"]) for e in events] == [("memory::kv::set", "ingest")]
    finally:
        await nc.close()
