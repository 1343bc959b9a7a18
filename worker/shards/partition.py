"""Which partition an agent lives in, computed exactly as nats-server's `partition(P, 1)`
subject mapping computes it, so that a client addressing `memory.a.<token>.<verb>` reaches the
partition the worker would have chosen (tests/test_partition.py checks both against a server).

The token is a short hash of (tenant, agentId) rather than the agentId itself: an id may hold
characters a subject token cannot (`.`, `*`, `>`, spaces), and two tenants' agents of one name
must land apart.
"""

from __future__ import annotations

import hashlib

FNV_OFFSET = 0x811C9DC5
FNV_PRIME = 0x01000193


def agent_token(tenant: str, agent_id: str) -> str:
    """16 hex characters: a valid subject token for any (tenant, agentId)."""
    key = (tenant + "\x00" + agent_id).encode("utf-8", "surrogatepass")
    return hashlib.sha256(key).hexdigest()[:16]


def fnv1a32(data: bytes) -> int:
    value = FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * FNV_PRIME) & 0xFFFFFFFF
    return value


def partition_of_token(token: str, partitions: int) -> int:
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    return fnv1a32(token.encode("ascii")) % partitions


def partition_of(tenant: str, agent_id: str, partitions: int) -> int:
    return partition_of_token(agent_token(tenant, agent_id), partitions)
