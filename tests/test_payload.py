"""Replies at the NATS connection's max_payload (1 MiB by default): a paged trigger ends its page
early where the next item would not fit and its cursor continues from there; any other reply
that cannot fit is `413 payload_too_large` naming the key to lower, counted as an error. Nothing
is dropped for the caller to wait out its timeout."""

from __future__ import annotations

from typing import Any

import apsw
import msgspec
import nats

from schema.base import AgentId, Reply, TriggerRequest
from tests.support import Client
from tests.test_life import sql
from worker.app import App
from worker.bus import MemoryService
from worker.dispatch import Dispatcher
from worker.route import Route
from worker.telemetry import Telemetry

# The largest reply each paged trigger sent in these tests, for the record (`pytest -s`).
LARGEST: dict[str, int] = {}
TIMEOUT = 8.0  # well within the client's patience: an answer comes at once or never


def big(n: int, size: int) -> str:
    """`size` bytes of text, distinct for each n (no deduplication between them)."""
    head = f"memory number {n} says "
    return head + "lorem ipsum dolor sit amet " * ((size - len(head)) // 27 + 1)


def fitted(text: str, size: int) -> str:
    return text[:size]


async def ask(nc: Any, trigger: str, payload: dict[str, Any]) -> tuple[Any, str | None, int]:
    """(body, error code or None, bytes of the reply)."""
    msg = await nc.request(
        trigger.replace("::", "."), msgspec.json.encode(payload), timeout=TIMEOUT
    )
    code = (msg.headers or {}).get("Nats-Service-Error-Code")
    return msgspec.json.decode(msg.data), code, len(msg.data)


async def page_through(
    nc: Any, trigger: str, request: dict[str, Any], key: str
) -> tuple[list[Any], list[int]]:
    """Every item of a listing, page after page, and each page's size in bytes; every page
    is a success holding at least one item and fits in the connection's max_payload."""
    items: list[Any] = []
    sizes: list[int] = []
    cursor = None
    while True:
        body, code, size = await ask(nc, trigger, request | ({"cursor": cursor} if cursor else {}))
        assert code is None, body
        assert body[key], "a page holds at least one item"
        assert size <= nc.max_payload
        items += body[key]
        sizes.append(size)
        LARGEST[trigger] = max(LARGEST.get(trigger, 0), size)
        cursor = body["nextCursor"]
        if cursor is None:
            print(f"\n{trigger}: {len(sizes)} pages, largest {max(sizes)} bytes")
            return items, sizes


def errors_of(stats: Any, trigger: str) -> tuple[int, int]:
    figures = stats["triggers"][trigger]
    return figures["requests"], figures["errors"]


async def test_recall_too_big_for_max_payload_is_413_naming_limit_and_counts_no_access(
    client: Client, worker: App
) -> None:
    """An agent holding two 512 KiB memories: recall of both is 413 payload_too_large naming
    `limit`, at once, counted as an error; no access is counted; limit 1 answers."""
    nc = client.nc
    size = worker.config.max_content_bytes
    for n in range(2):
        await client.store("a", fitted(big(n, size), size))
    body, code, _ = await ask(nc, "memory::recall", {"agentId": "a", "query": "lorem"})
    assert code == "413", body
    assert body["error"]["code"] == "payload_too_large"
    assert "`limit`" in body["error"]["message"] and "$.limit" in body["error"]["message"]
    stats = await client.ok("memory::stats", {})
    assert errors_of(stats, "memory::recall") == (1, 1)
    assert not worker.services or not worker.services.background
    assert sql(worker, "SELECT sum(access_count) FROM memories") == [(0,)]
    one, code, size_one = await ask(
        nc, "memory::recall", {"agentId": "a", "query": "lorem", "limit": 1}
    )
    assert code is None and len(one["memories"]) == 1 and size_one <= nc.max_payload


async def test_list_with_limit_3_over_three_big_memories_pages_through_all_under_max_payload(
    client: Client,
) -> None:
    """Three 400 KB memories, `limit: 3`: pages end early and continue, in both orders, each
    memory once and in order, every reply within max_payload."""
    stored = [
        (await client.store("a", big(n, 400_000), timestamp=1000 + n))["id"] for n in range(3)
    ]
    for order, expected in (("newest", stored[::-1]), ("oldest", stored)):
        listed, sizes = await page_through(
            client.nc, "memory::list", {"agentId": "a", "limit": 3, "order": order}, "memories"
        )
        assert [memory["id"] for memory in listed] == expected
        assert len(sizes) >= 2


async def test_session_get_pages_a_session_of_big_messages_under_max_payload(
    client: Client,
) -> None:
    """A session of three 400 KB messages is read in pages, positions 1, 2, 3 in order."""
    for n in range(3):
        await client.store("a", big(n, 400_000), sessionId="s", timestamp=1000 + n)
    messages, sizes = await page_through(
        client.nc, "memory::session::get", {"agentId": "a", "sessionId": "s"}, "messages"
    )
    assert [message["position"] for message in messages] == [1, 2, 3]
    assert all(message["content"].startswith(f"memory number {n} ") for n, message in
               enumerate(messages))  # fmt: skip
    assert len(sizes) >= 2


async def test_kv_list_over_twenty_60kb_values_pages_through_every_key_under_max_payload(
    client: Client,
) -> None:
    """Twenty values of 60 KB (1.2 MB in all) under the default limit: pages in key order."""
    keys = [f"k{n:02d}" for n in range(20)]
    for n, key in enumerate(keys):
        await client.ok("memory::kv::set", {"agentId": "a", "key": key, "value": big(n, 60_000)})
    items, sizes = await page_through(client.nc, "memory::kv::list", {"agentId": "a"}, "items")
    assert [item["key"] for item in items] == keys
    assert len(sizes) >= 2


async def test_task_list_over_twenty_60kb_descriptions_pages_through_the_board(
    client: Client,
) -> None:
    """Twenty tasks with 60 KB descriptions: the tenant's board lists in pages, oldest first,
    for every agent of the tenant; another agent's claim still works."""
    posted = []
    for n in range(20):
        reply = await client.ok(
            "memory::task::post",
            {"title": f"t{n}", "description": big(n, 60_000), "createdBy": "boss"},
        )
        posted.append(reply["taskId"])
    tasks, sizes = await page_through(client.nc, "memory::task::list", {}, "tasks")
    assert [task["taskId"] for task in tasks] == posted
    assert len(sizes) >= 2
    pending, _ = await page_through(
        client.nc, "memory::task::list", {"status": "pending", "limit": 1000}, "tasks"
    )
    assert [task["taskId"] for task in pending] == posted


async def test_audit_pages_events_of_a_hundred_ids_each_under_max_payload(
    client: Client,
) -> None:
    """About 1.2 MB of audit events (forgets and unforgets of the same hundred memories, a
    hundred ids each) with `limit: 1000`: pages, oldest first, each event once."""
    ids = [(await client.store("a", f"note number {n}"))["id"] for n in range(100)]
    for _ in range(150):
        await client.ok("memory::forget", {"agentId": "a", "ids": ids})
        await client.ok("memory::unforget", {"agentId": "a", "ids": ids})
    events, sizes = await page_through(
        client.nc, "memory::audit", {"agentId": "a", "limit": 1000}, "events"
    )
    assert [event["seq"] for event in events] == sorted({event["seq"] for event in events})
    assert len(events) == 100 + 300
    assert len(sizes) >= 2


async def test_get_too_big_for_max_payload_is_413_naming_ids(client: Client, worker: App) -> None:
    """memory::get of three 400 KB memories is 413 naming `ids`, counted as an error; the
    worker keeps its connection and asking for fewer answers."""
    ids = [(await client.store("a", big(n, 400_000)))["id"] for n in range(3)]
    body, code, _ = await ask(client.nc, "memory::get", {"agentId": "a", "ids": ids})
    assert code == "413", body
    assert body["error"]["code"] == "payload_too_large" and "`ids`" in body["error"]["message"]
    stats = await client.ok("memory::stats", {})
    assert errors_of(stats, "memory::get") == (1, 1)
    two, code, _ = await ask(client.nc, "memory::get", {"agentId": "a", "ids": ids[:2]})
    assert code is None and [memory["id"] for memory in two["memories"]] == ids[:2]


class HugeRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    size: int


class HugeReply(Reply, frozen=True):
    text: str


def huge(conn: apsw.Connection, req: HugeRequest, *, now: int) -> HugeReply:
    return HugeReply(text="x" * req.size)


HUGE = Route("memory::toy::huge", HugeRequest, reply_type=HugeReply, read=huge)


async def test_any_trigger_whose_reply_cannot_fit_answers_413_instead_of_nothing(
    nats_url: str, worker: App
) -> None:
    """The bus-level guard: a trigger that knows nothing of max_payload, replying 2 MiB, is
    answered 413 payload_too_large (counted as an error in $SRV.STATS), not dropped."""
    assert worker.services is not None
    telemetry = Telemetry()
    dispatcher = Dispatcher(worker.services, [HUGE], telemetry)
    service = MemoryService(worker.nc, dispatcher, "toy.")
    await service.start((HUGE,), {})
    nc = await nats.connect(nats_url)
    try:
        subject = HUGE.subject("toy.")
        msg = await nc.request(subject, b'{"agentId":"a","size":2097152}', timeout=TIMEOUT)
        assert (msg.headers or {}).get("Nats-Service-Error-Code") == "413"
        error = msgspec.json.decode(msg.data)["error"]
        assert error["code"] == "payload_too_large" and str(nc.max_payload) in error["message"]
        assert telemetry.triggers["memory::toy::huge"].errors == 1
        fits = await nc.request(subject, b'{"agentId":"a","size":1000}', timeout=TIMEOUT)
        assert not (fits.headers or {}).get("Nats-Service-Error-Code")
        assert service._service is not None
        stats = f"$SRV.STATS.memory.{service._service.id}"
        srv = msgspec.json.decode((await nc.request(stats, b"", timeout=5)).data)
        [endpoint] = srv["endpoints"]
        assert (endpoint["num_requests"], endpoint["num_errors"]) == (2, 1)
    finally:
        await nc.close()
        await service.stop(timeout=5)


async def test_mcp_tools_answer_a_reply_too_large_with_an_error_naming_what_to_lower(
    nats_url: str, client: Client, worker: App
) -> None:
    """Over MCP: memory_search of two 512 KiB memories and memory_get of three 400 KB ones are
    tool errors naming `limit` and `ids`; memory_list shows a first page and its cursor."""
    from tests.test_mcp import mcp_client, text

    size = worker.config.max_content_bytes
    ids = [(await client.store("a1", fitted(big(n, size), size)))["id"] for n in range(2)]
    ids.append((await client.store("a1", big(2, 400_000)))["id"])
    async with mcp_client("--agent", "a1", "--nats-url", nats_url) as mcp:
        search = await mcp.call_tool("memory_search", {"query": "lorem"})
        assert search.is_error and "payload_too_large" in text(search), text(search)
        assert "`limit`" in text(search)
        get = await mcp.call_tool("memory_get", {"ids": ids})
        assert get.is_error and "payload_too_large" in text(get) and "`ids`" in text(get)
        listed = await mcp.call_tool("memory_list", {})
        assert not listed.is_error and "nextCursor: " in text(listed)
