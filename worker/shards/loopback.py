"""A 3-node NATS cluster with JetStream on 127.0.0.1, for the failure tests and `bench
--sharded`: the shipped deploy/nats/cluster.conf, one process per node, its host names and
ports rewritten for loopback. Nodes can be killed (-9), paused and restarted with their
JetStream directory kept."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import nats

from worker.embedded import server_binary

CONF = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "cluster.conf"
NAMES = ("nats-1", "nats-2", "nats-3")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Node:
    name: str
    port: int
    route_port: int
    store: Path
    conf: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


@dataclass
class Cluster:
    nodes: list[Node]
    partitions: int
    logs: list[Path] = field(default_factory=list)

    @property
    def urls(self) -> str:
        """Every node, as MEMORY_WORKER_NATS_URL takes a cluster."""
        return ",".join(node.url for node in self.nodes)

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def start(self, node: Node) -> None:
        log = node.store.parent / f"{node.name}.log"
        node.process = subprocess.Popen(
            [server_binary(), "-c", str(node.conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log.open("ab"),
            env={**os.environ, "SERVER_NAME": node.name},
        )

    def kill(self, node: Node) -> None:
        """SIGKILL: no goodbye to its peers, nothing flushed that was not already synced."""
        if node.process is not None:
            node.process.kill()
            node.process.wait()
            node.process = None

    def pause(self, node: Node) -> None:
        assert node.process is not None
        node.process.send_signal(signal.SIGSTOP)

    def resume(self, node: Node) -> None:
        assert node.process is not None
        node.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    node.process.send_signal(signal.SIGCONT)
                node.process.terminate()
                try:
                    node.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()
                node.process = None


def node_config(text: str, node: Node, nodes: list[Node], partitions: int) -> str:
    """The shipped file with this node's ports and directory, routes to the others on loopback,
    and the partition count of the test."""
    routes = "\n".join(f"    nats-route://127.0.0.1:{other.route_port}" for other in nodes)
    text = re.sub(r"routes: \[.*?\]", f"routes: [\n{routes}\n  ]", text, flags=re.S)
    text = text.replace("listen: 0.0.0.0:4222", f"listen: 127.0.0.1:{node.port}")
    text = text.replace("listen: 0.0.0.0:6222", f"listen: 127.0.0.1:{node.route_port}")
    text = text.replace("http: 0.0.0.0:8222\n", "")
    text = text.replace("store_dir: /data/jetstream", f'store_dir: "{node.store}"')
    return text.replace("partition(64,1)", f"partition({partitions},1)")


async def wait_ready(cluster: Cluster, timeout: float = 30.0) -> None:
    """Until JetStream answers through every running node (a meta leader is elected)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for node in cluster.nodes:
        if node.process is None:
            continue
        while True:
            try:
                nc = await nats.connect(node.url, connect_timeout=1, max_reconnect_attempts=0)
                try:
                    await nc.jetstream().account_info()
                    break
                finally:
                    await nc.close()
            except Exception:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def running_cluster(root: Path, partitions: int = 8) -> AsyncIterator[Cluster]:
    text = CONF.read_text(encoding="utf-8")
    nodes = [
        Node(name, free_port(), free_port(), root / name / "jetstream", root / f"{name}.conf")
        for name in NAMES
    ]
    for node in nodes:
        node.store.mkdir(parents=True, exist_ok=True)
        node.conf.write_text(node_config(text, node, nodes, partitions), encoding="utf-8")
    cluster = Cluster(nodes, partitions)
    try:
        for node in nodes:
            cluster.start(node)
        await wait_ready(cluster)
        yield cluster
    finally:
        cluster.stop()
