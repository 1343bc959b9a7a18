"""Facts follow their memories (contract section 19): a fact whose every source is forgotten is
left out of answers until one is unforgotten; one whose every source is gone (delete, eviction,
merge away) is deleted with its history and leaves its timeline; one asserted without sources
stays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats

from tests.conftest import worker_config
from tests.support import Client
from tests.test_life import sql
from worker.app import App

DAY = 86_400_000


async def facts(client: Client, **fields: Any) -> list[tuple[str, str]]:
    body = await client.ok("memory::fact::query", {"agentId": "a", **fields})
    return [(f["object"], f["status"]) for f in body["facts"]]


async def test_a_fact_is_hidden_while_every_source_is_forgotten(client: Client) -> None:
    first = await client.store("a", "I live in Paris.", timestamp=DAY)
    second = await client.store("a", "Again: I live in Paris", timestamp=2 * DAY)
    await client.ok(
        "memory::fact::assert",
        {"agentId": "a", "subject": "user", "predicate": "speaks", "object": "Welsh"},
    )
    await client.ok("memory::forget", {"agentId": "a", "ids": [first["id"]]})
    assert await facts(client) == [("Paris", "current"), ("Welsh", "current")]
    await client.ok("memory::forget", {"agentId": "a", "ids": [second["id"]]})
    assert await facts(client) == [("Welsh", "current")]
    assert await facts(client, asOf=3 * DAY) == []
    assert await facts(client, includeHistory=True) == [("Welsh", "current")]
    shown = await client.ok("memory::context", {"agentId": "a", "query": "where do I live"})
    assert "fact:" not in shown["text"]
    await client.ok("memory::unforget", {"agentId": "a", "ids": [second["id"]]})
    assert await facts(client) == [("Paris", "current"), ("Welsh", "current")]


async def test_deleting_the_last_source_deletes_the_fact_and_reopens_the_one_it_ended(
    client: Client, worker: App
) -> None:
    paris = await client.store("a", "I live in Paris.", timestamp=DAY)
    berlin = await client.store("a", "I moved to Berlin.", timestamp=5 * DAY)
    assert await facts(client) == [("Berlin", "current")]
    await client.ok("memory::delete", {"agentId": "a", "ids": [berlin["id"]]})
    [fact] = (await client.ok("memory::fact::query", {"agentId": "a", "includeHistory": True}))[
        "facts"
    ]
    assert fact["id"] == paris["facts"][0] and fact["validTo"] is None
    assert fact["supersededBy"] is None
    assert sql(worker, "SELECT count(*) FROM facts") == [(1,)]
    assert sql(worker, "SELECT count(*) FROM fact_sources") == [(1,)]


async def test_eviction_deletes_facts_whose_memories_it_removes(client: Client) -> None:
    await client.store("a", "I live in Oslo.", timestamp=DAY, importance=0.05)
    await client.store("a", "I moved to Bergen.", timestamp=2 * DAY, importance=0.9)
    kept = await client.ok(
        "memory::fact::assert",
        {"agentId": "a", "subject": "user", "predicate": "speaks", "object": "Welsh"},
    )
    evicted = await client.ok("memory::evict", {"agentId": "a", "maxAge": 1})
    assert evicted["evicted"] == 1
    assert await facts(client, includeHistory=True) == [("Bergen", "current"), ("Welsh", "current")]
    assert kept["fact"]["sources"] == []


async def test_a_memory_merged_away_leaves_its_facts_to_the_sources_that_remain(
    nats_url: str, tmp_path: Path
) -> None:
    config = worker_config(nats_url, tmp_path / "memory.db", embedder="builtin",
                           builtin_model="hash")  # fmt: skip
    app = App(config)
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        await client.store("a", "the cat sat on the warm mat today and I live in Rome")
        await client.store("a", "The cat sat on the warm mat today and I live in Rome!")
        assert sql(app, "SELECT count(*) FROM fact_sources") == [(2,)]
        merged = await client.ok("memory::consolidate", {"decayRate": 0.5, "mergeThreshold": 0.9})
        assert merged["memoriesMerged"] == 1
        [fact] = (await client.ok("memory::fact::query", {"agentId": "a"}))["facts"]
        [(survivor,)] = sql(app, "SELECT id FROM memories")
        assert fact["sources"] == [survivor] and fact["object"] == "Rome"
    finally:
        await nc.close()
        await app.stop()
