"""The shipped 3-node cluster config starts on loopback, replicates an R3 stream and keeps an
acknowledged message when the node that leads the stream is killed (SCALE.md's premise)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.js.api import StreamConfig

from tests.cluster import running_cluster
from tests.support import wait_until


@pytest.mark.slow
async def test_an_r3_stream_keeps_acknowledged_messages_when_its_leader_is_killed(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path) as cluster:
        nc = await nats.connect(cluster.urls.split(","))
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="PROBE", subjects=["probe.>"], num_replicas=3))
        for n in range(50):
            await js.publish(f"probe.{n}", str(n).encode())
        info = await js.stream_info("PROBE")
        assert info.cluster is not None and len(info.cluster.replicas or []) == 2
        leader = cluster.node(str(info.cluster.leader))
        cluster.kill(leader)
        await nc.close()
        others = [node.url for node in cluster.nodes if node is not leader]
        nc = await nats.connect(others)
        js = nc.jetstream()

        async def stream_info() -> Any:
            try:
                return await js.stream_info("PROBE")
            except nats.errors.Error:  # no leader yet: the other two are electing one
                return None

        info = await wait_until(stream_info, "the stream answering from a new leader")
        assert info.state.messages == 50
        await nc.close()
