"""The Python client's methods for section 14's triggers (key-value, task board, usage,
canonical sessions), kept apart so that worker/client.py stays readable; MemoryClient has them
all."""

from __future__ import annotations

from typing import TypeVar

from schema.base import Reply, TriggerRequest
from schema.canonical import (
    CanonicalAppendReply,
    CanonicalAppendRequest,
    CanonicalGetRequest,
    CanonicalSession,
)
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
from schema.tasks import (
    TaskClaimReply,
    TaskClaimRequest,
    TaskCompleteReply,
    TaskCompleteRequest,
    TaskListReply,
    TaskListRequest,
    TaskPostReply,
    TaskPostRequest,
)
from schema.usage import UsageQueryReply, UsageQueryRequest, UsageRecordReply, UsageRecordRequest

R = TypeVar("R", bound=Reply)

STATE_METHODS = {
    "memory::kv::set": "kv_set",
    "memory::kv::get": "kv_get",
    "memory::kv::delete": "kv_delete",
    "memory::kv::list": "kv_list",
    "memory::task::post": "task_post",
    "memory::task::claim": "task_claim",
    "memory::task::complete": "task_complete",
    "memory::task::list": "task_list",
    "memory::usage::record": "usage_record",
    "memory::usage::query": "usage_query",
    "memory::canonical::get": "canonical_get",
    "memory::canonical::append": "canonical_append",
}


class StateMethods:
    async def _call(
        self, trigger: str, request: TriggerRequest, reply_type: type[R], timeout: float | None
    ) -> R:
        raise NotImplementedError  # MemoryClient's

    async def kv_set(self, request: KvSetRequest, *, timeout: float | None = None) -> KvSetReply:
        return await self._call("memory::kv::set", request, KvSetReply, timeout)

    async def kv_get(self, request: KvGetRequest, *, timeout: float | None = None) -> KvItem:
        return await self._call("memory::kv::get", request, KvItem, timeout)

    async def kv_delete(
        self, request: KvDeleteRequest, *, timeout: float | None = None
    ) -> KvDeleteReply:
        return await self._call("memory::kv::delete", request, KvDeleteReply, timeout)

    async def kv_list(self, request: KvListRequest, *, timeout: float | None = None) -> KvListReply:
        return await self._call("memory::kv::list", request, KvListReply, timeout)

    async def task_post(
        self, request: TaskPostRequest, *, timeout: float | None = None
    ) -> TaskPostReply:
        return await self._call("memory::task::post", request, TaskPostReply, timeout)

    async def task_claim(
        self, request: TaskClaimRequest, *, timeout: float | None = None
    ) -> TaskClaimReply:
        return await self._call("memory::task::claim", request, TaskClaimReply, timeout)

    async def task_complete(
        self, request: TaskCompleteRequest, *, timeout: float | None = None
    ) -> TaskCompleteReply:
        return await self._call("memory::task::complete", request, TaskCompleteReply, timeout)

    async def task_list(
        self, request: TaskListRequest, *, timeout: float | None = None
    ) -> TaskListReply:
        return await self._call("memory::task::list", request, TaskListReply, timeout)

    async def usage_record(
        self, request: UsageRecordRequest, *, timeout: float | None = None
    ) -> UsageRecordReply:
        return await self._call("memory::usage::record", request, UsageRecordReply, timeout)

    async def usage_query(
        self, request: UsageQueryRequest, *, timeout: float | None = None
    ) -> UsageQueryReply:
        return await self._call("memory::usage::query", request, UsageQueryReply, timeout)

    async def canonical_get(
        self, request: CanonicalGetRequest, *, timeout: float | None = None
    ) -> CanonicalSession:
        return await self._call("memory::canonical::get", request, CanonicalSession, timeout)

    async def canonical_append(
        self, request: CanonicalAppendRequest, *, timeout: float | None = None
    ) -> CanonicalAppendReply:
        return await self._call("memory::canonical::append", request, CanonicalAppendReply, timeout)
