"""`memory-worker shard-split` (SCALE.md "Moving an existing database"): a single database with
agents in several tenants becomes one file per partition, every row in exactly the file of its
agent's partition, and shards started on the uploaded snapshots answer for every agent as the
single worker did: same memories, same ids."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import apsw
import nats

from tests.conftest import worker_config
from tests.support import Client
from tests.test_cli import free_port
from tests.test_shards import PARTITIONS, settled, shard_config
from worker.app import App
from worker.shards.app import ShardApp
from worker.shards.partition import partition_of

TENANTS = ["", "acme", "globex"]
AGENTS = [f"agent-{n}" for n in range(5)]
TABLES = [
    "memories", "sessions", "session_messages", "kg_entities", "kg_relations", "agent_switch",
    "kv", "tasks", "usage", "usage_days", "audit",
]  # fmt: skip


async def single_database(nats_url: str, db: Path) -> dict[tuple[str, str], set[str]]:
    """A single worker's file with every kind of agent row in three tenants; the memory ids of
    each (tenant, agent)."""
    app = App(worker_config(nats_url, db, tenancy="account"))
    await app.start()
    nc = await nats.connect(nats_url)
    client = Client(nc)
    ids: dict[tuple[str, str], set[str]] = {}
    try:
        for tenant in TENANTS:
            scope = {"tenant": tenant}
            for agent in AGENTS:
                for text in ("keeps the launch notes", "owns the budget"):
                    stored = await client.store(agent, f"{agent} {text}", sessionId="s", **scope)
                    ids.setdefault((tenant, agent), set()).add(stored["id"])
                entity = {"id": "e", "type": "t", "relations": [{"target": "f", "type": "r"}]}
                await client.ok("memory::kg::add", {"agentId": agent, "entity": entity, **scope})
                await client.ok("memory::kv::set", {"agentId": agent, "key": "k", "value": 1,
                                                    **scope})  # fmt: skip
                await client.ok("memory::usage::record", {"agentId": agent, "model": "m",
                                "promptTokens": 3, "completionTokens": 1, "costUsd": 0.1,
                                **scope})  # fmt: skip
            await client.ok("memory::kv::set", {"namespace": "shared", "key": "k", "value": 2,
                                                **scope})  # fmt: skip
            await client.ok("memory::task::post", {"title": "t", "createdBy": AGENTS[0],
                                                   **scope})  # fmt: skip
            await client.ok("memory::toggle", {"agentId": AGENTS[1], "enabled": False, **scope})
    finally:
        await nc.close()
        await app.stop()
    return ids


def split(*args: str, nats_url: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "worker", "shard-split", *args]
    if nats_url is not None:
        command += ["--nats-url", nats_url]
    env = {**os.environ, "MEMORY_WORKER_REPLICAS": "1", "MEMORY_WORKER_LOG_LEVEL": "warning"}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def counts(path: Path) -> dict[str, int]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {t: int(conn.execute(f"SELECT count(*) FROM {t}").get) for t in TABLES}
    finally:
        conn.close()


def agents_in(path: Path) -> set[tuple[str, str]]:
    """The agents whose rows the file holds; a task is the tenant's (agent '')."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        agent = {"tasks": "''"}
        union = " UNION ".join(
            f"SELECT tenant, {agent.get(table, 'agent_id')} FROM {table}" for table in TABLES
        )
        return {(tenant, agent) for tenant, agent in conn.execute(union)}
    finally:
        conn.close()


async def test_split_puts_every_row_in_its_agents_partition_and_shards_answer_with_the_same_ids(
    nats_url: str, tmp_path: Path
) -> None:
    db, out = tmp_path / "memory.db", tmp_path / "parts"
    ids = await single_database(nats_url, db)
    done = await asyncio.to_thread(
        split, "--db", str(db), "--partitions", str(PARTITIONS), "--out", str(out), "--upload",
        nats_url=nats_url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"uploaded {PARTITIONS} snapshots at sequence 0" in done.stderr

    files = sorted(out.iterdir())
    assert [f.name for f in files] == [f"p{k:04d}.db" for k in range(PARTITIONS)]
    source = counts(db)
    assert all(source.values()), source  # every kind of row is there to be split
    totals = {table: sum(counts(f)[table] for f in files) for table in TABLES}
    assert totals == source
    for k, path in enumerate(files):
        for tenant, agent in agents_in(path):
            assert partition_of(tenant, agent, PARTITIONS) == k, (tenant, agent, k)
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        assert list(conn.execute("SELECT partition, applied FROM shard_log")) == [(k, 0)]
        conn.close()
    shared = [(tenant, "") for tenant in TENANTS]  # the shared keys: agent '' of each tenant
    assert {a for f in files for a in agents_in(f)} == set(ids) | set(shared)

    apps = [ShardApp(shard_config(nats_url, tmp_path, name, tenancy="account"))
            for name in ("s1", "s2")]  # fmt: skip
    nc = await nats.connect(nats_url)
    client = Client(nc)
    try:
        for app in apps:
            await app.start()
        await settled(apps)
        for (tenant, agent), known in ids.items():
            if agent == AGENTS[1]:  # switched off before the split: still off after it
                assert await client.recall(agent, "budget", tenant=tenant) == []
                continue
            found = await client.recall(agent, "launch budget", tenant=tenant)
            assert {memory["id"] for memory in found} == known, (tenant, agent)
            again = await client.store(agent, f"{agent} owns the budget", tenant=tenant)
            assert again["deduplicated"] and again["id"] in known
    finally:
        await nc.close()
        for app in apps:
            await app.stop()

    refused = await asyncio.to_thread(
        split, "--db", str(db), "--out", str(tmp_path / "again"), "--upload", nats_url=nats_url
    )
    assert refused.returncode == 1, refused.stderr
    assert "--upload: the snapshot bucket already holds p0000.a" in refused.stderr
    assert not (tmp_path / "again").exists()  # refused before anything was written


async def test_split_refuses_a_non_empty_out_dir_a_missing_database_and_bad_partitions(
    nats_url: str, tmp_path: Path
) -> None:
    db, out = tmp_path / "memory.db", tmp_path / "parts"
    await single_database(nats_url, db)
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = db.read_bytes()
    busy = await asyncio.to_thread(split, "--db", str(db), "--out", str(out))
    assert busy.returncode == 1, busy.stderr
    assert f"--out: {out} exists and is not an empty directory" in busy.stderr
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and db.read_bytes() == before

    fresh = tmp_path / "fresh"
    missing = await asyncio.to_thread(split, "--db", str(tmp_path / "no.db"), "--out", str(fresh))
    assert missing.returncode == 1 and "--db: no database at" in missing.stderr
    assert not (tmp_path / "no.db").exists() and not fresh.exists()

    closed = f"nats://127.0.0.1:{free_port()}"
    unreachable = await asyncio.to_thread(
        split, "--db", str(db), "--out", str(fresh), "--upload", nats_url=closed
    )
    assert unreachable.returncode == 3 and "127.0.0.1" in unreachable.stderr
    assert not fresh.exists()

    for bad in ("0", "1025", "many"):
        usage = await asyncio.to_thread(split, "--db", str(db), "--partitions", bad, "--out", "x")
        assert usage.returncode == 64 and "--partitions" in usage.stderr, usage.stderr
    assert not (tmp_path / "x").exists() and not Path("x").exists()


def test_split_of_a_database_with_a_table_it_cannot_place_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    from worker.db import migrate, open_db
    from worker.shards.split import SplitError, split_database

    db, out = tmp_path / "memory.db", tmp_path / "parts"
    conn = open_db(db)
    migrate(conn)
    conn.execute("CREATE TABLE notes (tenant TEXT, body TEXT); INSERT INTO notes VALUES ('', 'x')")
    conn.close()
    try:
        split_database(db, out, 4)
    except SplitError as error:
        assert "table notes has no tenant and agent_id" in str(error)
    else:
        raise AssertionError("the split should have been refused")
    assert not out.exists()
