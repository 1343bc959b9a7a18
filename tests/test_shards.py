"""Sharded mode (contract section 16, SCALE.md) with shards in this process against one
JetStream server: requests reach their agent's partition through any shard, every partition has
one owner, and a shard that dies without a word is replaced within two lease TTLs with nothing
acknowledged lost."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import apsw
import nats
import pytest

from tests.conftest import worker_config
from tests.support import Client, wait_until
from worker.shards.app import ShardApp
from worker.shards.lease import lease_of, preference
from worker.shards.partition import partition_of

PARTITIONS = 8
TTL = 1.5


def shard_config(nats_url: str, root: Path, name: str, **overrides: Any) -> Any:
    settings: dict[str, Any] = {
        "mode": "sharded",
        "shard_name": name,
        "data_dir": str(root / name),
        "partitions": PARTITIONS,
        "replicas": 1,
        "lease_ttl": TTL,
    }
    return worker_config(nats_url, root / name / "unused.db", **(settings | overrides))


@contextlib.asynccontextmanager
async def shards(nats_url: str, root: Path, *names: str) -> AsyncIterator[list[ShardApp]]:
    apps = [ShardApp(shard_config(nats_url, root, name)) for name in names]
    try:
        for app in apps:
            await app.start()
        await settled(apps)
        yield apps
    finally:
        for app in apps:
            await app.stop()


async def settled(apps: list[ShardApp], timeout: float = 4 * TTL) -> None:
    """Until every partition is owned by the one running shard that ranks first for it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    names = [app.name for app in apps]
    while True:
        owners = [[app.name for app in apps if app.owned(k)] for k in range(PARTITIONS)]
        if owners == [[preference(k, names)[0]] for k in range(PARTITIONS)]:
            return
        assert loop.time() < deadline, owners
        await asyncio.sleep(0.1)


async def test_any_shard_answers_for_any_agent_and_each_partition_has_one_owner(
    nats_url: str, tmp_path: Path
) -> None:
    async with shards(nats_url, tmp_path, "s1", "s2") as apps:
        owners = {k: [a.name for a in apps if a.owned(k)] for k in range(PARTITIONS)}
        assert {name for names in owners.values() for name in names} == {"s1", "s2"}
        nc = await nats.connect(nats_url)
        client = Client(nc)
        agents = [f"agent-{n}" for n in range(12)]
        for agent in agents:  # the queue group spreads these over both shards
            await client.ok(
                "memory::kg::add",
                {"agentId": agent, "entity": {"id": "e", "type": "t"}},
            )
        for agent in agents:
            body = await client.ok("memory::kg::query", {"agentId": agent, "entityId": "e"})
            assert body["entities"][0]["id"] == "e"
            owner = next(a for a in apps if a.owned(partition_of("", agent, PARTITIONS)))
            node = owner.nodes[partition_of("", agent, PARTITIONS)]
            assert node.applied >= 1  # the write went through the partition's log
        await nc.close()


async def test_a_shard_that_dies_is_replaced_within_two_ttls_and_loses_nothing(
    nats_url: str, tmp_path: Path
) -> None:
    async with shards(nats_url, tmp_path, "s1", "s2") as apps:
        nc = await nats.connect(nats_url)
        client = Client(nc)
        agents = [f"agent-{n}" for n in range(12)]
        for agent in agents:
            await client.ok(
                "memory::kg::add", {"agentId": agent, "entity": {"id": "e", "type": "t"}}
            )
        dead, alive = apps
        # Gone without a word: no lease released, no subscription drained.
        assert dead._balancer is not None
        dead._balancer.cancel()
        await dead.nc.close()
        started = asyncio.get_running_loop().time()
        await settled([alive], timeout=3 * TTL)
        took = asyncio.get_running_loop().time() - started
        assert took <= 2 * TTL + 1.0, took
        for agent in agents:
            body = await client.ok("memory::kg::query", {"agentId": agent, "entityId": "e"})
            assert [e["id"] for e in body["entities"]] == ["e"], agent
        await nc.close()


async def test_an_owner_that_renewed_no_lease_for_a_ttl_writes_nothing_to_the_log(
    nats_url: str, tmp_path: Path
) -> None:
    """An owner whose last renewal was sent a TTL ago by its own clock (a process paused that
    long) refuses a write before it reaches the log, even when no other shard appended since
    (the log's expected sequence would let it through): nothing is stored, the log is as it
    was, the shard no longer owns the partition, and the caller gets 503 to retry."""
    async with shards(nats_url, tmp_path, "s1") as (app,):
        nc = await nats.connect(nats_url)
        client = Client(nc)
        await client.store("a", "stored while the lease is fresh")
        partition = partition_of("", "a", PARTITIONS)
        node, plog, leases = app.owned(partition), app.plog, app.leases
        assert node is not None and plog is not None and leases is not None
        last = await plog.last_seq(partition)
        assert app._balancer is not None
        app._balancer.cancel()  # no renewal from now on, as in a paused process
        await asyncio.wait([app._balancer])
        clock = leases.clock
        leases.clock = lambda: clock() + TTL  # a TTL since the last renewal, by its own clock
        reply = await client.call("memory::store", {"agentId": "a", "content": "stale write"})
        assert reply.code == "503", reply
        assert await plog.last_seq(partition) == last
        assert app.owned(partition) is None
        conn = apsw.Connection(str(node.path), flags=apsw.SQLITE_OPEN_READONLY)
        assert conn.execute("SELECT content FROM memories").fetchall() == [
            ("stored while the lease is fresh",)
        ]
        conn.close()
        await nc.close()


async def test_evict_consolidate_and_stats_without_an_agent_add_up_over_every_partition(
    nats_url: str, tmp_path: Path
) -> None:
    async with shards(nats_url, tmp_path, "s1", "s2"):
        nc = await nats.connect(nats_url)
        client = Client(nc)
        agents = [f"agent-{n}" for n in range(12)]
        for agent in agents:
            await client.store(agent, f"an old note of {agent}", timestamp=1, importance=0.1)
            await client.store(agent, f"a fresh note of {agent}")
        stats = await client.ok("memory::stats", {})
        assert stats["memories"] == 24 and stats["agents"] == 12
        decayed = await client.ok("memory::consolidate", {})
        assert decayed["memoriesDecayed"] == 12  # the old ones, never accessed since
        evicted = await client.ok("memory::evict", {})
        assert evicted["evicted"] == evicted["stale"] == 12
        assert (await client.ok("memory::stats", {}))["memories"] == 12
        # The audit of every agent, page by page across partitions: each event once, oldest
        # first, as many as the agents' own audits hold.
        events, cursor = [], None
        while True:
            asked: dict[str, Any] = {"limit": 5} | ({"cursor": cursor} if cursor else {})
            page = await client.ok("memory::audit", asked)
            events += page["events"]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        own = 0
        for agent in agents:
            own += len((await client.ok("memory::audit", {"agentId": agent}))["events"])
        assert len(events) == own == 12 * 2 + 12 + 12  # stores, decays, evictions
        assert [e["at"] for e in events] == sorted(e["at"] for e in events)
        assert len({(e["agentId"], e["seq"]) for e in events}) == len(events)
        # The agents' listing, page by page across partitions: each agent once, by id.
        listed, cursor = [], None
        while True:
            asked = {"limit": 5} | ({"cursor": cursor} if cursor else {})
            page = await client.ok("memory::agents", asked)
            listed += [agent["agentId"] for agent in page["agents"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert listed == sorted(agents)
        await nc.close()


async def test_the_cluster_command_shows_owners_standbys_applied_sequences_and_lag(
    nats_url: str, tmp_path: Path
) -> None:
    """`memory-worker cluster` reads the lease bucket and the streams: every partition has an
    owner and the other shard as standby, and after a renewal no owner lags its log."""
    import json
    import subprocess
    import sys

    async with shards(nats_url, tmp_path, "s1", "s2") as apps:
        nc = await nats.connect(nats_url)
        client = Client(nc)
        for n in range(12):
            await client.store(f"agent-{n}", "a note")
        await nc.close()
        await wait_until(lambda: renewed(apps), "every owner renewed with what it applied")
        command = [sys.executable, "-m", "worker", "cluster", "--json", "--nats-url", nats_url]
        done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        status = json.loads(done.stdout)
        assert status["shards"] == ["s1", "s2"]
        assert len(status["partitions"]) == PARTITIONS
        for p in status["partitions"]:
            assert p["owner"] == preference(p["partition"], ["s1", "s2"])[0]
            assert p["standbys"] == [preference(p["partition"], ["s1", "s2"])[1]]
            assert p["lag"] == 0 and p["applied"] == p["last"]
        assert sum(p["last"] for p in status["partitions"]) == 12
        table = await asyncio.to_thread(
            subprocess.run, [*command[:-3], "--nats-url", nats_url], capture_output=True, text=True
        )
        assert table.returncode == 0 and "shards alive: s1, s2" in table.stdout


async def renewed(apps: list[ShardApp]) -> bool:
    """Whether each lease names the sequence its owner has applied (a renewal since)."""
    for app in apps:
        assert app.leases is not None
        for partition, node in app.nodes.items():
            if node.owner:
                holder = await lease_of(app.leases.kv, partition)
                if holder is None or holder.applied != node.applied:
                    return False
    return True


async def test_the_cluster_command_on_a_nats_without_shards_says_so(nats_url: str) -> None:
    import subprocess
    import sys

    command = [sys.executable, "-m", "worker", "cluster", "--nats-url", nats_url]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    assert done.returncode == 2 and "no shard has started" in done.stderr


async def test_durable_ingestion_reaches_each_agents_partition_owner(
    nats_url: str, tmp_path: Path
) -> None:
    """A store published on memory.ingest.store is taken by one shard and written by the owner
    of its agent's partition, through the partition's log."""
    import msgspec

    async with shards(nats_url, tmp_path, "s1", "s2") as apps:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        for n in range(12):
            body = msgspec.json.encode({"agentId": f"agent-{n}", "content": f"ingested {n}"})
            await js.publish("memory.ingest.store", body)
        client = Client(nc)

        async def all_stored() -> bool:
            return bool((await client.ok("memory::stats", {}))["memories"] == 12)

        await wait_until(all_stored, "the 12 ingested stores")
        logged = sum(node.applied for app in apps for node in app.nodes.values() if node.owner)
        assert logged >= 1
        [found] = await client.recall("agent-3", "ingested")
        assert found["content"] == "ingested 3"
        await nc.close()


async def test_a_shard_joining_under_load_takes_partitions_over_losing_and_doubling_nothing(
    nats_url: str, tmp_path: Path
) -> None:
    """While stores stream in through two shards, a third starts: the partitions it ranks first
    for move to it (each after it replayed the partition's log), and afterwards every
    acknowledged store is there exactly once, with the id it was acknowledged with."""
    async with shards(nats_url, tmp_path, "s1", "s2") as apps:
        nc = await nats.connect(nats_url)
        client = Client(nc)
        acknowledged: dict[str, str] = {}
        stop = asyncio.Event()

        async def load() -> None:
            n = 0
            while not stop.is_set():
                content = f"note {n}"
                agent = f"agent-{n % 24}"
                n += 1
                reply = await client.call(
                    "memory::store", {"agentId": agent, "content": content}, timeout=30
                )
                if reply.ok:
                    acknowledged[content] = reply.body["id"]

        writers = [asyncio.create_task(load()) for _ in range(4)]
        await wait_until(lambda: len(acknowledged) >= 40, "40 stores before the third shard")
        third = ShardApp(shard_config(nats_url, tmp_path, "s3"))
        await third.start()
        try:
            await settled([*apps, third], timeout=6 * TTL)
            assert any(third.owned(k) for k in range(PARTITIONS))
            before = len(acknowledged)
            await wait_until(lambda: len(acknowledged) >= before + 40, "40 stores after it")
            stop.set()
            await asyncio.gather(*writers)
            assert len(acknowledged) > 50
            stats = await client.ok("memory::stats", {})
            assert stats["memories"] == len(acknowledged)  # none lost, none twice
            for n, (content, memory_id) in enumerate(acknowledged.items()):
                if n % 10 == 0:  # a sample: the same id again, deduplicated
                    agent = f"agent-{int(content.split()[1]) % 24}"
                    again = await client.store(agent, content)
                    assert again["id"] == memory_id and again["deduplicated"] is True
        finally:
            await third.stop()
        await nc.close()


async def test_a_shard_refuses_to_start_against_a_server_without_jetstream(
    tmp_path: Path,
) -> None:
    """A NATS server without JetStream cannot hold the logs: the shard says so and stops."""
    import re
    import subprocess

    from worker.embedded import server_binary
    from worker.shards.log import ShardSetupError

    plain = subprocess.Popen(
        [server_binary(), "-a", "127.0.0.1", "-p", "-1"],  # no -js
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        assert plain.stderr is not None
        port = next(
            int(found.group(1))
            for raw in plain.stderr
            if (found := re.search(rb"connections on [\d.]+:(\d+)", raw))
        )
        app = ShardApp(shard_config(f"nats://127.0.0.1:{port}", tmp_path, "s1"))
        with pytest.raises(ShardSetupError, match="JetStream"):
            await app.start()
        await app.stop()
    finally:
        plain.terminate()
        plain.wait()


async def test_a_client_addressing_an_agent_directly_reaches_its_partitions_owner(
    tmp_path: Path,
) -> None:
    """With the cluster config's mapping (`memory.a.<token>.<verb>` to the partition), a client
    in the worker's account asks the owner without the forwarding hop."""
    from tests.conftest import start_nats, stop_nats
    from worker.shards.partition import agent_token

    conf = tmp_path / "mapping.conf"
    mapping = "memory.p.{{partition(" + str(PARTITIONS) + ",1)}}.{{wildcard(1)}}.>"
    conf.write_text(f'mappings: {{"memory.a.*.>": "{mapping}"}}\n')
    process, url = start_nats(tmp_path / "nats", "-c", str(conf))
    try:
        async with shards(url, tmp_path, "s1", "s2"):
            nc = await nats.connect(url)
            client = Client(nc, prefix="")
            token = agent_token("", "direct")
            reply = await client.raw(
                f"memory.a.{token}.store",  # not a trigger name: the raw subject
                b'{"agentId": "direct", "content": "addressed by token"}',
            )
            assert reply.ok, reply
            [found] = await client.recall("direct", "token")
            assert found["id"] == reply.body["id"]
            await nc.close()
    finally:
        stop_nats(process)


async def test_section_14_state_runs_sharded_tenant_boards_and_shared_keys_in_one_partition(
    nats_url: str, tmp_path: Path
) -> None:
    """Keys of an agent live with its memories; `shared` keys and the task board are the
    tenant's, in the partition of its agent "", whoever asks; usage by model adds up the
    records of every partition."""
    async with shards(nats_url, tmp_path, "s1", "s2"):
        nc = await nats.connect(nats_url)
        client = Client(nc)
        for n in range(8):
            await client.ok("memory::kv::set", {"agentId": f"agent-{n}", "key": "k", "value": n})
            await client.ok(
                "memory::usage::record",
                {"agentId": f"agent-{n}", "model": "m", "promptTokens": 10, "completionTokens": 1},
            )
        await client.ok("memory::kv::set", {"namespace": "shared", "key": "s", "value": 1})
        got = await client.ok("memory::kv::get", {"namespace": "shared", "key": "s"})
        assert got["value"] == 1
        assert (await client.ok("memory::kv::get", {"agentId": "agent-5", "key": "k"}))[
            "value"
        ] == 5
        posted = await client.ok("memory::task::post", {"title": "t", "createdBy": "agent-1"})
        claimed = await client.ok("memory::task::claim", {"agentId": "agent-6"})
        assert claimed["task"]["taskId"] == posted["taskId"]
        done = await client.ok(
            "memory::task::complete",
            {"agentId": "agent-6", "taskId": posted["taskId"], "result": {"ok": True}},
        )
        assert done["task"]["status"] == "completed"
        listed = await client.ok("memory::task::list", {})
        assert [task["taskId"] for task in listed["tasks"]] == [posted["taskId"]]
        usage = await client.ok("memory::usage::query", {"groupBy": "model"})
        assert usage["groups"] == [
            {"key": "m", "promptTokens": 80, "completionTokens": 8, "costUsd": 0.0, "events": 8}
        ]
        by_agent = await client.ok("memory::usage::query", {"groupBy": "agent"})
        assert len(by_agent["groups"]) == 8 and by_agent["total"]["events"] == 8
        await nc.close()


async def test_each_shard_serves_metrics_counting_the_partitions_it_owns(
    nats_url: str, tmp_path: Path
) -> None:
    """With MEMORY_WORKER_METRICS_PORT a shard's /metrics counts the memories of the partitions
    it owns: the shards' figures add up to every memory stored."""
    import urllib.request

    from worker.shards.loopback import free_port

    ports = [free_port(), free_port()]
    apps = [
        ShardApp(shard_config(nats_url, tmp_path, name, metrics_port=port))
        for name, port in zip(("s1", "s2"), ports, strict=True)
    ]
    try:
        for app in apps:
            await app.start()
        await settled(apps)
        nc = await nats.connect(nats_url)
        client = Client(nc)
        for n in range(12):
            await client.store(f"agent-{n}", "a note")
        await nc.close()

        def scrape(port: int) -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as answer:
                return str(answer.read().decode())

        total = 0
        for port in ports:
            text = await asyncio.to_thread(scrape, port)
            [line] = [ln for ln in text.splitlines() if ln.startswith("memory_worker_memories ")]
            total += int(float(line.split()[1]))
        assert total == 12
    finally:
        for app in apps:
            await app.stop()
