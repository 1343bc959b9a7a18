"""Requests and replies of the key-value store (contract section 14): memory::kv::set, get,
delete and list, per agent or in the tenant's `shared` namespace."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from schema.base import AgentId, Reply, TriggerRequest
from schema.errors import InvalidRequest

MAX_KEY_CHARS = 512
MAX_VALUE_BYTES = 64 * 1024
Key = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KEY_CHARS)]
Prefix = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KEY_CHARS)]
# A cursor holds the last key handed out, which may be 512 characters of 4 bytes each.
KvCursor = Annotated[str, msgspec.Meta(min_length=1, max_length=8192)]
# Any JSON but null: null is the wrong type here as for every key (section 1).
JsonValue = dict[str, Any] | list[Any] | str | int | float | bool
Version = Annotated[int, msgspec.Meta(ge=0, le=2**62)]


class Namespaced(TriggerRequest, frozen=True, kw_only=True):
    """Exactly one of `agentId` (the agent's own keys) and `namespace: "shared"` (the keys every
    agent of the tenant reads and writes)."""

    agent_id: AgentId | UnsetType = UNSET
    namespace: Literal["shared"] | UnsetType = UNSET

    def owner(self) -> str:
        """The `agent_id` column the keys live under: the agent, or '' for `shared` (no agent id
        is empty)."""
        if (self.agent_id is UNSET) == (self.namespace is UNSET):
            raise InvalidRequest(
                'agentId: name exactly one of `agentId` and `namespace: "shared"` - at `$.agentId`'
            )
        return self.agent_id if isinstance(self.agent_id, str) else ""


class KvSetRequest(Namespaced, frozen=True):
    key: Key
    value: JsonValue
    # The version the key must have for the set to happen; 0: only if the key is absent.
    if_version: Version | UnsetType = UNSET


class KvSetReply(Reply, frozen=True):
    version: int


class KvKeyRequest(Namespaced, frozen=True):
    key: Key


class KvGetRequest(KvKeyRequest, frozen=True):
    pass


class KvDeleteRequest(KvKeyRequest, frozen=True):
    pass


class KvItem(Reply, frozen=True):
    key: str
    value: Any
    version: int
    updated_at: int


class KvDeleteReply(Reply, frozen=True):
    deleted: bool


class KvListRequest(Namespaced, frozen=True):
    prefix: Prefix | UnsetType = UNSET
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100
    cursor: KvCursor | UnsetType = UNSET


class KvListReply(Reply, frozen=True):
    items: list[KvItem]
    next_cursor: str | None
