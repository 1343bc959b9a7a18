"""A partition's log replayed into an empty file gives the owner's rows exactly (SCALE.md): every
write a shard serves is a decision that the same apply turns into the same rows, the audit
included. Writes that are not decide and apply steps yet are refused in sharded mode, never
applied without their log."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import apsw
import msgspec
import nats
import pytest

from tests.support import Client, wait_until
from tests.test_shards import shard_config
from worker.db import migrate, open_db
from worker.registry import all_writes
from worker.shards.app import ShardApp
from worker.shards.log import PartitionLog
from worker.writes import LogEntry, Replayer

# Tables a write never makes rows in, left out of the comparison, and why.
NOT_WRITTEN = {
    "shard_log": "the log sequence this file applied: the file's own position in the log",
    "sqlite_schema": "the schema (the same migrations; the tables compared are the same)",
}
# Tables the scenario may leave empty, and why.
MAY_BE_EMPTY = {
    "memory_changes_trimmed": "the recall index trims its change log past 200 000 rows only",
}


def committed(path: Path) -> tuple[int, dict[str, list[tuple[Any, ...]]]]:
    """The log sequence the file applied (0 without one) and every row of every table of its
    schema (with the rowid where a table has one), read in one transaction."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.execute("BEGIN")
        listed = conn.execute("SELECT name, wr FROM pragma_table_list WHERE schema = 'main'")
        tables = {str(name): bool(without_rowid) for name, without_rowid in listed}
        applied = 0
        if "shard_log" in tables:
            applied = int(conn.execute("SELECT applied FROM shard_log").get)
        found = {}
        for table, without_rowid in sorted(tables.items()):
            if table in NOT_WRITTEN:
                continue
            columns = "*" if without_rowid else "rowid, *"
            read = conn.execute(f'SELECT {columns} FROM "{table}"')
            found[table] = sorted((tuple(row) for row in read), key=repr)
        conn.execute("COMMIT")
        return applied, found
    finally:
        conn.close()


def rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the file's schema but those no write makes."""
    return committed(path)[1]


async def replayed(nc: Any, path: Path, last: int) -> apsw.Connection:
    """A new file with partition 0's log applied up to `last` by the same apply steps."""
    conn = open_db(path)
    migrate(conn)
    replayer = Replayer(all_writes())
    entries = PartitionLog(nc.jetstream(), 1, 1).read(0, 0)
    async for entry in entries:
        with conn:
            for logged in msgspec.msgpack.decode(entry.data, type=list[LogEntry]):
                replayer.replay(conn, logged)
        if entry.seq >= last:
            break
    await entries.aclose()
    return conn


async def scenario(client: Client) -> None:
    """Every write trigger of the registry, with the cases that decide something."""
    a = (await client.store("a", "the office is in Lisbon", sessionId="s1"))["id"]
    b = (await client.store("a", "mail jane@example.com", role="assistant", sessionId="s1"))["id"]
    await client.store("a", "the office is in Lisbon")  # deduplicated
    await client.store("a", "past 64 bits", metadata={"n": 2**70, "x": -(2**70)})
    await client.ok("memory::update", {"agentId": "a", "id": a, "content": "the office is in Porto",
                                       "pinned": True, "tags": ["office"]})  # fmt: skip
    await client.ok("memory::forget", {"agentId": "a", "ids": [b]})
    await client.store("a", "mail jane@example.com")  # restores the forgotten memory
    await client.ok("memory::forget", {"agentId": "a", "ids": [b]})
    await client.ok("memory::unforget", {"agentId": "a", "ids": [b, "nope"]})
    await client.ok("memory::toggle", {"agentId": "a", "enabled": False})
    await client.store("a", "not kept")
    await client.ok("memory::toggle", {"agentId": "a", "enabled": True})
    await client.ok(
        "memory::kg::add",
        {"agentId": "a", "entity": {"id": "alice", "type": "person",
                                    "relations": [{"target": "bob", "type": "knows"}]}},
    )  # fmt: skip
    await client.ok("memory::kg::delete", {"agentId": "a", "entityId": "bob"})
    kept = {"id": "carol", "relations": [{"target": "dave", "type": "manages"}]}
    await client.ok("memory::kg::add", {"agentId": "a", "entity": kept})
    await client.ok("memory::toggle", {"agentId": "z", "enabled": False})  # left off
    doomed = (await client.store("b", "to be deleted"))["id"]
    await client.ok("memory::delete", {"agentId": "b", "ids": [doomed]})
    await client.store("c", "erased soon")
    await client.ok("memory::erase", {"agentId": "c", "confirm": "c"})
    await client.recall("a", "office")  # its access counts are logged too
    # Topics (section 21): a new topic, a follow-up joining it, and one named by topicId.
    trip = await client.store(
        "t", "Planning a Lisbon trip in May: flights, hotel, trams?", sessionId="w"
    )
    await client.store(
        "t",
        "Alfama hotels are quiet; I'll check the Lisbon flights.",
        role="assistant",
        sessionId="w",
    )
    named = await client.store("t", "Separate thread on sourdough", sessionId="w", topicId="bread")
    assert trip["topicId"] != named["topicId"] == "bread"
    for n in range(3):  # a run of one role that repair folds into one new memory
        await client.store("e", f"part {n} of a long answer", role="assistant", sessionId="r")
    repaired = await client.ok("memory::session::repair", {"agentId": "e", "sessionId": "r"})
    assert repaired["stats"]["consecutiveMerged"] == 2
    for n in range(3):  # compacted with the fallback summary (no LLM answers here)
        await client.store("e", f"turn {n} of a chat", sessionId="c", timestamp=10 + n)
    compacted = await client.ok(
        "memory::session::compact",
        {"agentId": "e", "sessionId": "c", "threshold": 2, "keepRecent": 1},
    )
    assert compacted["compacted"] and compacted["summarizer"] == "fallback"
    for n in range(30):  # a canonical session over two channels, compacted at the 30th
        body = {
            "agentId": "f",
            "userId": "u",
            "channel": ("slack", "web")[n % 2],
            "role": ("user", "assistant")[n % 2],
            "content": f"canonical turn {n}",
        }
        assert (await client.ok("memory::canonical::append", body))["messageCount"] == n + 1
    got = await client.ok("memory::canonical::get", {"agentId": "f", "userId": "u"})
    assert str(got["summary"]).startswith("Summary of 20 earlier messages")
    await client.ok("memory::kv::set", {"agentId": "g", "key": "k", "value": {"n": 1}})
    await client.ok("memory::kv::set", {"agentId": "g", "key": "k", "value": 2, "ifVersion": 1})
    await client.ok("memory::kv::set", {"namespace": "shared", "key": "s", "value": "x"})
    await client.ok("memory::kv::delete", {"agentId": "g", "key": "k"})
    lisbon = (await client.store("i", "I live in Lisbon.", timestamp=5))["id"]
    assert (await client.store("i", "I moved to Porto", timestamp=9))["facts"]  # supersedes
    fact = {"agentId": "i", "subject": "user", "predicate": "likes", "object": "tea"}
    tea = await client.ok("memory::fact::assert", fact | {"validFrom": 3, "sources": [lisbon]})
    await client.ok("memory::fact::assert", fact | {"predicate": "dislikes", "validFrom": 4})
    ended = {"agentId": "i", "subject": "user", "predicate": "lives_in", "at": 20}
    assert (await client.ok("memory::fact::end", ended))["ended"]
    await client.ok("memory::fact::retract", {"agentId": "i", "ids": [tea["fact"]["id"]]})
    for n in range(2):
        await client.ok("memory::task::post", {"title": f"task {n}", "createdBy": "g"})
    claimed = (await client.ok("memory::task::claim", {"agentId": "h"}))["task"]
    await client.ok(
        "memory::task::complete", {"agentId": "h", "taskId": claimed["taskId"], "result": [1]}
    )
    for model in ("m1", "m2"):  # the record's id is the decision's
        usage = {"agentId": "g", "model": model, "promptTokens": 5, "completionTokens": 7}
        await client.ok("memory::usage::record", usage | {"costUsd": 0.25})
    await client.store("m", "the cat sat on the warm mat today")
    await client.store("m", "The cat sat on the warm mat today!")  # a near-duplicate
    old = (await client.store("d", "long ago", timestamp=1, importance=0.1))["id"]
    merged = await client.ok("memory::consolidate", {"decayRate": 0.5, "mergeThreshold": 0.9})
    assert merged["memoriesMerged"] >= 1
    evicted = await client.ok("memory::evict", {})  # every partition: here the one
    assert evicted["evicted"] == 1 and old


async def logged_triggers(nc: Any, last: int) -> set[str]:
    """The triggers of partition 0's log entries up to `last`."""
    found: set[str] = set()
    entries = PartitionLog(nc.jetstream(), 1, 1).read(0, 0)
    async for entry in entries:
        found |= {e.trigger for e in msgspec.msgpack.decode(entry.data, type=list[LogEntry])}
        if entry.seq >= last:
            break
    await entries.aclose()
    return found


async def llm_titles_a_topic(app: ShardApp, nc: Any, client: Client) -> None:
    """The LLM's text of a topic that reached 3 messages (worker/topic_titles.py), written in
    the background once a stand-in for llm.complete answers (the titler, told earlier that no
    LLM service was on the bus, is told to ask again)."""
    text = {"title": "Sourdough", "labels": ["bread"], "summary": "Baking a sourdough loaf."}

    async def answer(msg: Any) -> None:
        await msg.respond(msgspec.json.encode({"content": msgspec.json.encode(text).decode()}))

    llm = await nc.subscribe("llm.complete", cb=answer)
    await nc.flush()
    for node in app.nodes.values():
        if node.services is not None:
            node.services.titler.ask_again()
    for line in ("My sourdough starter smells of acetone after feeding", "Feed it twice daily",
                 "How warm should the sourdough starter be kept overnight?"):  # fmt: skip
        await client.store("t", line, sessionId="bake")

    async def titled() -> bool:
        listed = await client.ok("memory::topic::list", {"agentId": "t", "sessionId": "bake"})
        return [topic["title"] for topic in listed["topics"]] == ["Sourdough"]

    await wait_until(titled, "the LLM's title on the topic")
    await llm.unsubscribe()


async def drive_the_rest(app: ShardApp, nc: Any, client: Client) -> None:
    """The writes no request makes: an ingested message's (its key is logged with it), the
    schedule's claims, the backfill's vectors (repair's merged memory has none) and the LLM's
    text of a topic."""
    from zoneinfo import ZoneInfo

    from scheduler.jobs import CronJob, Schedule
    from worker.shards.cron import partition_scheduler

    usage = {"agentId": "i", "model": "m", "promptTokens": 1, "completionTokens": 1}
    await nc.jetstream().publish("memory.ingest.usage.record", msgspec.json.encode(usage))
    for _ in range(200):
        if (await client.ok("memory::usage::query", {"agentId": "i", "groupBy": "model"}))["total"][
            "events"
        ]:
            break
        await asyncio.sleep(0.05)
    await llm_titles_a_topic(app, nc, client)
    node = app.nodes[0]
    assert node.services is not None
    now = [node.services.clock()]
    schedule = Schedule((CronJob("evict", "memory::evict", "* * * * *"),), ZoneInfo("UTC"))
    scheduler = partition_scheduler(node.services, schedule, {}, clock=lambda: now[0])
    await scheduler.prepare()
    now[0] += 61_000
    assert await scheduler.tick() == ["evict"]


async def test_replaying_a_partitions_log_into_an_empty_file_gives_the_owners_rows(
    nats_url: str, tmp_path: Path
) -> None:
    """Every write of the registry (`all_writes()`: each trigger's and the extra ones) is in
    the log, and the copy replayed from it holds every row of every table the owner holds."""
    config = shard_config(
        nats_url, tmp_path, "s1", partitions=1, embedder="builtin", builtin_model="hash"
    )
    app = ShardApp(config)
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        await scenario(client)
        await drive_the_rest(app, nc, client)
        owner = tmp_path / "s1" / "p0000.db"
        missing = set(all_writes())
        for _ in range(200):  # the recall's access counts are written after its reply
            missing = set(all_writes()) - await logged_triggers(nc, app.nodes[0].applied)
            if not missing:
                break
            await asyncio.sleep(0.05)
        assert not missing, f"writes the scenario does not drive: {sorted(missing)}"
        applied, expected = committed(owner)  # with the sequence it applied
        copy = tmp_path / "copy.db"
        conn = await replayed(nc, copy, applied)
        conn.close()
        empty = {table for table, found in expected.items() if not found}
        assert empty <= set(MAY_BE_EMPTY), f"tables the scenario leaves empty: {sorted(empty)}"
        copied = rows(copy)
        assert copied.keys() == expected.keys()
        for table in expected:
            assert copied[table] == expected[table], table
    finally:
        await nc.close()
        await app.stop()


async def test_a_write_without_decide_and_apply_steps_is_refused_sharded_and_writes_nothing(
    nats_url: str, tmp_path: Path
) -> None:
    """Every trigger's write is decide and apply steps now; a writer job that is not (a plain
    function of the connection) is refused by the owner rather than committed unlogged."""
    app = ShardApp(shard_config(nats_url, tmp_path, "s1", partitions=1))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        await client.store("a", "one", sessionId="s")
        await client.store("a", "two", sessionId="s")
        services = app.nodes[0].services
        assert services is not None
        with pytest.raises(RuntimeError, match="without decide and apply steps"):
            await services.writer.run(
                lambda conn: conn.execute(
                    "INSERT INTO agent_switch (tenant, agent_id, disabled_at) VALUES ('', 'a', 1)"
                )
            )
        assert app.nodes[0].applied == 2  # the two stores, nothing more
        off = await client.store("a", "three")
        assert off["stored"], "the switch row was rolled back"
    finally:
        await nc.close()
        await app.stop()


async def test_a_replayed_batch_whose_writer_batch_runs_again_is_applied_once_more(
    nats_url: str, tmp_path: Path
) -> None:
    """A batch replayed from the log shares a writer batch with a job that fails after writing:
    the writer rolls the batch back and runs it again (worker/writer.py), and the replay is
    applied in that second run too: the file's position and the node's are the log's."""
    app = ShardApp(shard_config(nats_url, tmp_path, "s1", partitions=1))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        await Client(nc).store("a", "one")
        node = app.nodes[0]
        services = node.services
        assert services is not None and node.applied == 1
        entries = node.plog.read(0, 0)
        first = await entries.__anext__()
        await entries.aclose()
        behind = await node.plog.append(0, first.data, after=1)  # a batch the file lacks
        entered, gate = threading.Event(), threading.Event()

        def hold(_: apsw.Connection) -> None:
            entered.set()
            gate.wait(10)

        def write_then_fail(conn: apsw.Connection) -> None:
            conn.execute(
                "INSERT INTO agent_switch (tenant, agent_id, disabled_at) VALUES ('', 'x', 1)"
            )
            raise ValueError("failed after writing")

        held = asyncio.create_task(services.writer.run(hold, durable=False))
        assert await asyncio.to_thread(entered.wait, 10)
        catching_up = asyncio.create_task(node.catch_up())
        await wait_until(lambda: services.writer.queued == 1, "the replay queued", timeout=10)
        failing = asyncio.create_task(services.writer.run(write_then_fail, durable=False))
        await wait_until(lambda: services.writer.queued == 2, "both jobs queued", timeout=10)
        gate.set()
        await held
        assert await catching_up == 1
        with pytest.raises(ValueError, match="failed after writing"):
            await failing
        stored = await services.readers.run(
            lambda conn: conn.execute("SELECT applied FROM shard_log WHERE partition = 0").get
        )
        assert node.applied == behind == stored == 2
    finally:
        await nc.close()
        await app.stop()


async def test_a_shard_runs_the_schedule_for_its_partitions_and_logs_each_claim(
    nats_url: str, tmp_path: Path
) -> None:
    """The owner of a partition fires the maintenance job at its fire time over the partition's
    agents, once: the claim is a logged write, so a replayed copy (a standby, a new owner after
    a failover) holds it too and would not fire that time again."""
    from zoneinfo import ZoneInfo

    from scheduler.jobs import CronJob, Schedule
    from worker.shards.cron import partition_scheduler

    app = ShardApp(shard_config(nats_url, tmp_path, "s1", partitions=1))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        await client.store("a", "stale and unimportant", timestamp=1, importance=0.1)
        node = app.nodes[0]
        assert node.services is not None
        now = [node.services.clock()]
        schedule = Schedule((CronJob("evict", "memory::evict", "* * * * *"),), ZoneInfo("UTC"))
        scheduler = partition_scheduler(node.services, schedule, {}, clock=lambda: now[0])
        await scheduler.prepare()
        now[0] += 61_000  # the next minute's fire time has come
        assert await scheduler.tick() == ["evict"]
        assert await scheduler.tick() == []  # claimed: not again
        assert (await client.ok("memory::stats", {}))["memories"] == 0
        conn = await replayed(nc, tmp_path / "copy.db", node.applied)
        claims = conn.execute("SELECT job, last_fire FROM schedule_claims").fetchall()
        conn.close()
        [(job, last_fire)] = claims
        assert job == "evict" and last_fire == schedule.jobs[0].latest_fire(now[0], schedule.tz)
    finally:
        await nc.close()
        await app.stop()


async def test_a_shard_backfills_missing_vectors_through_its_log(
    nats_url: str, tmp_path: Path
) -> None:
    """Memories stored without a vector get one from the owner's backfill as a logged write,
    so a replayed copy holds the same vectors as the owner."""
    plain = ShardApp(shard_config(nats_url, tmp_path, "s1", partitions=1))
    await plain.start()
    nc = await nats.connect(nats_url)
    client = Client(nc)
    try:
        for n in range(5):
            await client.store("a", f"note number {n} without a vector")
    finally:
        await plain.stop()
    model = ShardApp(
        shard_config(nats_url, tmp_path, "s1", partitions=1, embedder="builtin",
                     builtin_model="hash")
    )  # fmt: skip
    await model.start()
    try:

        async def all_embedded() -> bool:
            return bool((await client.ok("memory::stats", {}))["memoriesWithoutVector"] == 0)

        await wait_until(all_embedded, "the backfill gave every memory a vector")
        node = model.nodes[0]
        conn = await replayed(nc, tmp_path / "copy.db", node.applied)
        copied = conn.execute("SELECT id, embedding_model, embedding FROM memories ORDER BY id")
        copy = [tuple(row) for row in copied]
        conn.close()
        owner = apsw.Connection(str(node.path), flags=apsw.SQLITE_OPEN_READONLY)
        kept = [tuple(row) for row in owner.execute(
            "SELECT id, embedding_model, embedding FROM memories ORDER BY id")]  # fmt: skip
        owner.close()
        assert len(copy) == 5 and all(row[2] is not None for row in copy)
        assert copy == kept
    finally:
        await nc.close()
        await model.stop()
