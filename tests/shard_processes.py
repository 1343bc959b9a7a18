"""Shard processes (`memory-worker run` with MEMORY_WORKER_MODE=sharded) against a loopback
cluster (tests/cluster.py), for tests that kill them with -9 or pause them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster import Cluster


@dataclass
class Shard:
    name: str
    root: Path
    process: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root / f"{self.name}.log"


def shard_env(cluster: Cluster, shard: Shard, ttl: float) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    return {
        **clean,
        "MEMORY_WORKER_MODE": "sharded",
        "MEMORY_WORKER_NATS_URL": cluster.urls,
        "MEMORY_WORKER_SHARD_NAME": shard.name,
        "MEMORY_WORKER_DATA_DIR": str(shard.root / shard.name),
        "MEMORY_WORKER_PARTITIONS": str(cluster.partitions),
        "MEMORY_WORKER_REPLICAS": "3",
        "MEMORY_WORKER_LEASE_TTL": str(ttl),
        "MEMORY_WORKER_EMBEDDER": "none",
        "MEMORY_WORKER_LOG_FORMAT": "json",
        "MEMORY_WORKER_LOG_LEVEL": "info",
    }


def logged(shard: Shard, event: str) -> list[dict[str, Any]]:
    """The shard's log lines (JSON, on stderr) of this event so far."""
    found = []
    for line in shard.log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # a traceback, or the line being written now
            continue
        if isinstance(entry, dict) and entry.get("event") == event:
            found.append(entry)
    return found


def start_shard(cluster: Cluster, shard: Shard, ttl: float) -> None:
    shard.process = subprocess.Popen(
        [sys.executable, "-m", "worker", "run"],
        env=shard_env(cluster, shard, ttl),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=shard.log.open("ab"),
    )


def kill_shard(shard: Shard) -> None:
    if shard.process is not None:
        shard.process.kill()
        shard.process.wait()
        shard.process = None


def pause_shard(shard: Shard) -> None:
    assert shard.process is not None
    shard.process.send_signal(signal.SIGSTOP)


def resume_shard(shard: Shard) -> None:
    assert shard.process is not None
    shard.process.send_signal(signal.SIGCONT)


def stop_shard(shard: Shard) -> None:
    if shard.process is None:
        return
    shard.process.send_signal(signal.SIGCONT)
    shard.process.terminate()
    try:
        shard.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        shard.process.kill()
        shard.process.wait()
    shard.process = None
