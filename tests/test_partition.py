"""An agent's partition as the worker computes it agrees with nats-server's own `partition(P, 1)`
subject mapping (SCALE.md): a client that addresses `memory.a.<token>.<verb>` reaches the same
partition the worker would route the agent to."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from tests.conftest import start_nats, stop_nats
from worker.shards.partition import agent_token, fnv1a32, partition_of, partition_of_token

PARTITIONS = (1, 7, 64)


def test_fnv1a32_matches_the_published_test_vectors() -> None:
    """The FNV-1a 32-bit reference values (the empty string, 'a', 'foobar')."""
    assert fnv1a32(b"") == 0x811C9DC5
    assert fnv1a32(b"a") == 0xE40C292C
    assert fnv1a32(b"foobar") == 0xBF9CF968


def test_tokens_are_subject_safe_and_keep_tenants_apart() -> None:
    """Any agent id, dots and wildcards included, gives 16 hex characters; the same id in two
    tenants gives two tokens."""
    for agent in ("a1", "a.b", "*", ">", "agent with spaces", "é"):
        token = agent_token("", agent)
        assert len(token) == 16 and set(token) <= set("0123456789abcdef")
    assert agent_token("TEAM_A", "a1") != agent_token("TEAM_B", "a1")
    assert partition_of("", "a1", 64) == partition_of_token(agent_token("", "a1"), 64)
    with pytest.raises(ValueError):
        partition_of("", "a1", 0)


async def test_the_worker_and_the_server_mapping_agree_on_every_partition(tmp_path: Path) -> None:
    """For P in (1, 7, 64) and 1000 agents each, the partition nats-server's mapping puts
    `memory.a.<token>.store` in is the one the worker computes."""
    mappings = "\n".join(
        f'"map{p}.a.*.>": "map{p}.p.{{{{partition({p},1)}}}}.{{{{wildcard(1)}}}}.>"'
        for p in PARTITIONS
    )
    conf = tmp_path / "mapping.conf"
    conf.write_text(f"mappings: {{\n{mappings}\n}}\n")
    process, url = start_nats(tmp_path / "nats", "-c", str(conf))
    try:
        nc = await nats.connect(url)
        agents = [f"agent-{n}" for n in range(1000)]
        for p in PARTITIONS:
            sub = await nc.subscribe(f"map{p}.p.*.*.>")
            for agent in agents:
                await nc.publish(f"map{p}.a.{agent_token('T', agent)}.kg.add", b"")
            await nc.flush()
            seen: dict[str, int] = {}
            for _ in agents:
                msg = await asyncio.wait_for(sub.next_msg(), 5)
                _, _, partition, token, *verb = msg.subject.split(".")
                assert verb == ["kg", "add"]
                seen[token] = int(partition)
            await sub.unsubscribe()
            assert seen == {
                agent_token("T", agent): partition_of("T", agent, p) for agent in agents
            }
            assert len(set(seen.values())) == p  # 1000 agents reach every partition
        await nc.close()
    finally:
        stop_nats(process)
