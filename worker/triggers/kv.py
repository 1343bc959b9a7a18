"""Key-value state beside memories (contract section 14): memory::kv::set, get, delete and list,
an agent's own keys or, with `namespace: "shared"`, the keys every agent of its tenant shares
(held with the tenant's task board in sharded mode). A set and a delete decide nothing but
their request and time (handlers/kv.py): the version a set gives follows from the state it
applies to, which every copy of a partition shares."""

from __future__ import annotations

from typing import Any

from handlers import kv
from schema.kv import (
    KvDeleteReply,
    KvDeleteRequest,
    KvGetRequest,
    KvItem,
    KvListReply,
    KvListRequest,
    KvSetReply,
    KvSetRequest,
)
from worker.route import AGENT_OR_SHARED, Route
from worker.writes import requested

SET = Route(
    "memory::kv::set",
    KvSetRequest,
    reply_type=KvSetReply,
    write=requested(KvSetRequest, kv.kv_set, kv.kv_set_changes),
    scope=AGENT_OR_SHARED,
    ingest=True,
)
GET = Route(
    "memory::kv::get", KvGetRequest, reply_type=KvItem, read=kv.kv_get, scope=AGENT_OR_SHARED
)
DELETE = Route(
    "memory::kv::delete",
    KvDeleteRequest,
    reply_type=KvDeleteReply,
    write=requested(KvDeleteRequest, kv.kv_delete, kv.kv_delete_changes),
    scope=AGENT_OR_SHARED,
    ingest=True,
)
LIST = Route(
    "memory::kv::list",
    KvListRequest,
    reply_type=KvListReply,
    read=kv.kv_list,
    scope=AGENT_OR_SHARED,
)
ROUTES: tuple[Route[Any, Any], ...] = (SET, GET, DELETE, LIST)
