"""memory::consolidate's `mergeThreshold` over the bus, with the builtin hash embedder (a bag of
words and trigrams: the same words in another order are cosine 1): what the reply, recall,
sessions and the audit show, the Python client's field, refused values, and a shard's log
replayed to the same rows. Which memories merge is tested on the handlers
(tests/handlers/test_merge.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from schema.memory import ConsolidateRequest
from tests.conftest import worker_config
from tests.support import Client
from tests.test_replay import replayed, rows
from tests.test_shards import shard_config
from worker.app import App
from worker.client import MemoryClient
from worker.shards.app import ShardApp

FACT = "the deploy key rotates on Fridays"
PARAPHRASE = "on Fridays the deploy key rotates"  # the same words: cosine 1 here


@pytest.fixture
async def hashing(nats_url: str, tmp_path: Path) -> AsyncIterator[Client]:
    app = App(worker_config(nats_url, tmp_path / "memory.db", embedder="builtin",
                            builtin_model="hash"))  # fmt: skip
    await app.start()
    nc = await nats.connect(nats_url)
    yield Client(nc)
    await nc.close()
    await app.stop()


async def contents(client: Client, agent: str) -> list[str]:
    listed = await client.ok("memory::list", {"agentId": agent})
    return sorted(memory["content"] for memory in listed["memories"])


async def test_paraphrases_merge_into_the_newest_and_sessions_and_the_audit_follow(
    hashing: Client,
) -> None:
    client = hashing
    at = int(time.time() * 1000) - 60_000  # recent: nothing decays
    gone = await client.store("a", PARAPHRASE, sessionId="s2", importance=0.9, timestamp=at)
    kept = await client.store("a", FACT, sessionId="s1", importance=0.3, timestamp=at + 1)
    gone, kept = gone["id"], kept["id"]
    await client.store("a", PARAPHRASE + ", said the assistant", role="assistant")
    await client.store("a", f"{PARAPHRASE}, said the assistant again", role="assistant")
    for text in (FACT, PARAPHRASE):
        await client.store("b", text)
    reply = await client.ok("memory::consolidate", {"agentId": "a", "mergeThreshold": 0.95})
    assert reply["memoriesMerged"] == 2  # the user pair, and the assistant pair
    listed = (await client.ok("memory::list", {"agentId": "a"}))["memories"]
    assert sorted((m["role"], m["id"]) for m in listed)[1:] == [("user", kept)]
    assert [m["role"] for m in listed].count("assistant") == 1
    assert len(await contents(client, "b")) == 2
    [hit] = [m for m in await client.recall("a", "deploy key Fridays") if m["role"] == "user"]
    assert (hit["id"], hit["importance"]) == (kept, 0.9)
    moved = await client.ok("memory::session::get", {"agentId": "a", "sessionId": "s2"})
    assert [(m["id"], m["content"]) for m in moved["messages"]] == [(kept, FACT)]
    events = (await client.ok("memory::audit", {"agentId": "a"}))["events"]
    [merge] = [e for e in events if e.get("detail") and "mergedInto" in e["detail"]]
    assert merge["trigger"] == "memory::consolidate" and gone in merge["ids"]
    assert merge["detail"]["mergedInto"][gone] == kept
    again = await client.ok("memory::consolidate", {"agentId": "a", "mergeThreshold": 0.95})
    assert again["memoriesMerged"] == 0


async def test_without_the_threshold_consolidate_merges_nothing(hashing: Client) -> None:
    await hashing.store("a", FACT)
    await hashing.store("a", PARAPHRASE)
    assert (await hashing.ok("memory::consolidate", {}))["memoriesMerged"] == 0
    assert len(await contents(hashing, "a")) == 2


async def test_the_python_client_sends_the_threshold(hashing: Client, nats_url: str) -> None:
    await hashing.store("a", FACT)
    await hashing.store("a", PARAPHRASE)
    async with await MemoryClient.connect(nats_url) as memory:
        reply = await memory.consolidate(ConsolidateRequest(agent_id="a", merge_threshold=1.0))
    assert reply.memories_merged == 1


@pytest.mark.parametrize("value", [0, -0.1, 1.01, "high", None, True])
async def test_a_bad_threshold_is_refused_naming_it_and_nothing_changes(
    hashing: Client, value: Any
) -> None:
    await hashing.store("a", FACT, timestamp=1_000)  # a month unaccessed: decay would touch it
    await hashing.store("a", PARAPHRASE, timestamp=1_000)
    reply = await hashing.call("memory::consolidate", {"mergeThreshold": value})
    assert reply.code == "400" and "$.mergeThreshold" in reply.body["error"]["message"]
    listed = (await hashing.ok("memory::list", {"agentId": "a"}))["memories"]
    assert [m["confidence"] for m in listed] == [1.0, 1.0]


async def test_a_shards_log_replays_a_merge_to_the_owners_rows(
    nats_url: str, tmp_path: Path
) -> None:
    config = shard_config(nats_url, tmp_path, "s1", partitions=1, embedder="builtin",
                          builtin_model="hash")  # fmt: skip
    app = ShardApp(config)
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        await client.store("a", FACT, sessionId="s1")
        await client.store("a", PARAPHRASE, sessionId="s2", importance=0.9)
        await client.store("a", FACT + " and Mondays", sessionId="s1")
        merged = await client.ok("memory::consolidate", {"mergeThreshold": 0.95})
        assert merged["memoriesMerged"] == 1
        node = app.nodes[0]
        copy = await replayed(nc, tmp_path / "copy.db", node.applied)
        copy.close()
        expected, copied = rows(node.path), rows(tmp_path / "copy.db")
        assert len(expected["memories"]) == 2 and len(expected["session_messages"]) == 3
        assert copied == expected
    finally:
        await nc.close()
        await app.stop()
