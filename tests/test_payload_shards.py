"""Sharded mode at the NATS max_payload: a request a shard forwards to its partition's owner,
and a listing fanned out over every partition, answer within max_payload (pages that end early,
or 413 naming the key to lower), like a single worker's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import nats

from tests.support import Client
from tests.test_payload import LARGEST, TIMEOUT, ask, big, fitted, page_through
from tests.test_shards import PARTITIONS, shards
from worker.shards.partition import agent_token, partition_of_token


def partition_subject(agent: str, verb: str) -> str:
    """Where a shard forwards a request for this agent (worker/shards/router.py)."""
    token = agent_token("", agent)
    return f"memory.p.{partition_of_token(token, PARTITIONS)}.{token}.{verb}"


async def test_forwarded_recall_too_big_is_413_and_forwarded_pages_fit(
    nats_url: str, tmp_path: Path
) -> None:
    """Two shards: a recall of two 512 KiB memories is 413 naming `limit` through either shard
    and from the partition's owner itself (not a 503 after retries, not silence); kv::list of
    twenty 60 KB values pages within max_payload, through the front and from the owner."""
    async with shards(nats_url, tmp_path, "s1", "s2") as apps:
        nc = await nats.connect(nats_url)
        client = Client(nc)
        size = apps[0].config.max_content_bytes
        for n in range(2):
            await client.store("a", fitted(big(n, size), size))
        for _ in range(4):  # the queue group spreads these: some are forwarded
            body, code, _ = await ask(nc, "memory::recall", {"agentId": "a", "query": "lorem"})
            assert code == "413" and "`limit`" in body["error"]["message"], body
        owner = await nc.request(
            partition_subject("a", "recall"),
            msgspec.json.encode({"agentId": "a", "query": "lorem"}),
            timeout=TIMEOUT,
        )
        assert (owner.headers or {}).get("Nats-Service-Error-Code") == "413"
        keys = [f"k{n:02d}" for n in range(20)]
        for n, key in enumerate(keys):
            await client.ok(
                "memory::kv::set", {"agentId": "a", "key": key, "value": big(n, 60_000)}
            )
        for _ in range(2):
            items, sizes = await page_through(nc, "memory::kv::list", {"agentId": "a"}, "items")
            assert [item["key"] for item in items] == keys and len(sizes) >= 2
        direct = await nc.request(
            partition_subject("a", "kv.list"), b'{"agentId": "a"}', timeout=TIMEOUT
        )
        page = msgspec.json.decode(direct.data)
        assert page["nextCursor"] and 0 < len(page["items"]) < 20
        assert len(direct.data) <= nc.max_payload
        await nc.close()


async def test_the_audit_fanned_out_over_every_partition_pages_within_max_payload(
    nats_url: str, tmp_path: Path
) -> None:
    """About 1.3 MB of audit events (a hundred ids each) spread over the partitions, read
    without an agent with `limit: 1000`: every page fits, each event once, oldest first."""
    async with shards(nats_url, tmp_path, "s1", "s2"):
        nc = await nats.connect(nats_url)
        client = Client(nc)
        agents = [f"agent-{n}" for n in range(4)]
        expected = 0
        for agent in agents:
            ids = [(await client.store(agent, f"note {n} of {agent}"))["id"] for n in range(100)]
            for _ in range(42):
                await client.ok("memory::forget", {"agentId": agent, "ids": ids})
                await client.ok("memory::unforget", {"agentId": agent, "ids": ids})
            expected += 100 + 84
        events: list[Any]
        events, sizes = await page_through(nc, "memory::audit", {"limit": 1000}, "events")
        assert len(sizes) >= 2 and len(events) == expected
        assert len({(e["agentId"], e["seq"]) for e in events}) == expected
        assert [e["at"] for e in events] == sorted(e["at"] for e in events)
        print(f"\nlargest replies: {LARGEST}")
        await nc.close()
