"""Facts are whole like every agent's data (contract section 19): counted by memory::stats by
status (over every agent, and for one), removed by erase, carried by export and import (their
sources following their memories' ids), accepted through durable ingestion, scoped by tenant."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import apsw
import msgspec
import nats

from tests.shipped_nats import tenant_bus
from tests.support import Client, wait_until
from tests.test_life import sql
from tests.test_transfer import migrated
from worker.app import App
from worker.transfer.commands import export_jsonl, import_jsonl

DAY = 86_400_000
T0 = 1_600_000_000_000
FACT_ROWS = (
    "SELECT tenant, agent_id, id, subject, predicate, object, valid_from, valid_to, ended_at, "
    "recorded_at, expired_at, confidence, superseded_by, sourced FROM facts ORDER BY id"
)


async def some_facts(client: Client, agent: str) -> dict[str, Any]:
    """Paris (past), Berlin (current), tea liked (retracted), from a memory and by hand."""
    paris = await client.store(agent, "I live in Paris.", timestamp=T0)
    berlin = await client.store(agent, "I moved to Berlin.", timestamp=T0 + DAY)
    fact = {"agentId": agent, "subject": "user", "predicate": "likes", "object": "tea"}
    tea = await client.ok("memory::fact::assert", fact)
    await client.ok("memory::fact::retract", {"agentId": agent, "ids": [tea["fact"]["id"]]})
    return {"paris": paris, "berlin": berlin, "tea": tea["fact"]["id"]}


async def test_stats_count_facts_by_status_over_all_agents_and_for_one(client: Client) -> None:
    await some_facts(client, "a")
    await some_facts(client, "b")
    await client.ok(
        "memory::fact::assert",
        {"agentId": "b", "subject": "user", "predicate": "speaks", "object": "Welsh"},
    )
    every = await client.ok("memory::stats", {})
    assert every["facts"] == {"current": 3, "past": 2, "retracted": 2}
    one = await client.ok("memory::stats", {"agentId": "b"})
    assert one["facts"] == {"current": 2, "past": 1, "retracted": 1}


async def test_erasing_an_agent_removes_its_facts_and_their_sources_only(
    client: Client, worker: App
) -> None:
    await some_facts(client, "a")
    await some_facts(client, "b")
    await client.ok("memory::erase", {"agentId": "a", "confirm": "a"})
    assert await client.ok("memory::fact::query", {"agentId": "a", "includeHistory": True}) == {
        "facts": []
    }
    assert sql(worker, "SELECT DISTINCT agent_id FROM facts") == [("b",)]
    assert sql(worker, "SELECT DISTINCT agent_id FROM fact_sources") == [("b",)]


async def test_export_and_import_carry_facts_with_their_history_and_sources(
    client: Client, worker: App, tmp_path: Path
) -> None:
    made = await some_facts(client, "a")
    source = apsw.Connection(worker.config.db_path)
    out = io.BytesIO()
    try:
        export_jsonl(source, out, agent_id="a", now=T0)
        rows = [tuple(row) for row in source.execute(FACT_ROWS)]
        sources = [tuple(r) for r in source.execute("SELECT * FROM fact_sources ORDER BY 3")]
    finally:
        source.close()
    lines = io.BytesIO(out.getvalue()).readlines()
    kinds = [msgspec.json.decode(line).get("kind") for line in lines]
    assert kinds.count("fact") == 3
    assert b"Berlin" in out.getvalue()
    target = migrated(tmp_path / "target.db")
    try:
        first = import_jsonl(target, lines)
        assert (first.facts_imported, first.facts_skipped) == (3, 0)
        assert [tuple(row) for row in target.execute(FACT_ROWS)] == rows
        assert [tuple(r) for r in target.execute("SELECT * FROM fact_sources ORDER BY 3")] == (
            sources
        )
        again = import_jsonl(target, lines)
        assert (again.facts_imported, again.facts_skipped) == (0, 3)
        assert [tuple(row) for row in target.execute(FACT_ROWS)] == rows
    finally:
        target.close()
    assert made["berlin"]["facts"]


async def test_fact_writes_published_on_ingest_are_applied_once(nats_url: str, worker: App) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        fact = {"agentId": "a", "subject": "user", "predicate": "speaks", "object": "Welsh"}
        await js.publish("memory.ingest.fact.assert", msgspec.json.encode(fact | {"validFrom": 1}))
        await wait_until(
            lambda: sql(worker, "SELECT object, valid_to FROM facts") == [("Welsh", None)],
            "the ingested assert applied",
        )
        await js.publish("memory.ingest.fact.end", msgspec.json.encode(fact | {"at": 5}))
        await wait_until(
            lambda: sql(worker, "SELECT valid_to FROM facts") == [(5,)], "the ingested end"
        )
        [(fact_id,)] = sql(worker, "SELECT id FROM facts")
        retract = {"agentId": "a", "ids": [fact_id]}
        await js.publish("memory.ingest.fact.retract", msgspec.json.encode(retract))
        await wait_until(
            lambda: sql(worker, "SELECT expired_at IS NOT NULL FROM facts") == [(1,)],
            "the ingested retract",
        )
        events = (await Client(nc).ok("memory::audit", {"agentId": "a"}))["events"]
        assert [(e["trigger"], e["source"]) for e in events] == [
            ("memory::fact::assert", "ingest"),
            ("memory::fact::end", "ingest"),
            ("memory::fact::retract", "ingest"),
        ]
    finally:
        await nc.close()


async def test_two_tenants_with_one_agent_id_see_only_their_own_facts(tmp_path: Path) -> None:
    async with tenant_bus(tmp_path) as bus:
        alice, carol = await bus.user("alice"), await bus.user("carol")
        await alice.store("a1", "I live in Paris.")
        fact = {"agentId": "a1", "subject": "user", "predicate": "speaks", "object": "Welsh"}
        await carol.ok("memory::fact::assert", fact)
        mine = await alice.ok("memory::fact::query", {"agentId": "a1"})
        assert [f["object"] for f in mine["facts"]] == ["Paris"]
        theirs = await carol.ok("memory::fact::query", {"agentId": "a1"})
        assert [f["object"] for f in theirs["facts"]] == ["Welsh"]
        paris = mine["facts"][0]["id"]
        gone = await carol.ok("memory::fact::retract", {"agentId": "a1", "ids": [paris]})
        assert gone == {"retracted": 0, "missing": [paris]}
        assert (await alice.ok("memory::stats"))["facts"]["current"] == 1
