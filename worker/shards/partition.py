"""Which partition an agent lives in, computed exactly as nats-server's `partition(P, 1)`
subject mapping computes it, so that a client addressing `memory.a.<token>.<verb>` reaches the
partition the worker would have chosen (tests/test_partition.py checks both against a server).

The token is a short hash of (tenant, agentId) rather than the agentId itself: an id may hold
characters a subject token cannot (`.`, `*`, `>`, spaces), and two tenants' agents of one name
must land apart.
"""

from __future__ import annotations

import hashlib
from typing import Any

from schema.base import tenant_of

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


# A tenant's task board is one, whoever posts or claims: it lives in the partition of the
# tenant's agent "" (as do its `shared` keys).
TENANT_WIDE = frozenset(
    {"memory::task::post", "memory::task::claim", "memory::task::complete", "memory::task::list"}
)


def home_of(trigger: str, request: Any) -> tuple[str, str] | None:
    """The (tenant, agentId) whose partition holds what the request acts on; None for a request
    over every agent."""
    tenant = tenant_of(request)
    if trigger in TENANT_WIDE:
        return (tenant, "")
    agent_id = getattr(request, "agent_id", None)
    if isinstance(agent_id, str):
        return (tenant, agent_id)
    if getattr(request, "namespace", None) == "shared":
        return (tenant, "")
    return None
