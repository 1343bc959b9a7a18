"""Refusals per contract section 9: headers, body, a message naming the field, nothing written."""

from __future__ import annotations

from typing import Any

import apsw
import msgspec
import pytest

from tests.support import Client
from worker.app import App


def count_rows(app: App) -> int:
    conn = apsw.Connection(app.config.db_path)
    try:
        total = 0
        for table in ("memories", "sessions", "session_messages", "kg_entities", "kg_relations"):
            [(count,)] = conn.execute(f"SELECT count(*) FROM {table}").fetchall()
            total += int(str(count))
        return total
    finally:
        conn.close()


BAD_STORES = [
    (b"{not json", "400", "malformed JSON"),
    (b"[1, 2]", "400", "Expected `object`"),
    (b'"text"', "400", "Expected `object`"),
    (b'{"agentId": "a", "content": "\xff"}', "400", "UTF-8"),
    (b'{"content": "x"}', "400", "agentId"),
    (b'{"agentId": "a"}', "400", "content"),
    (b'{"agentId": null, "content": "x"}', "400", "$.agentId"),
    (b'{"agentId": 5, "content": "x"}', "400", "$.agentId"),
    (b'{"agentId": "", "content": "x"}', "400", "$.agentId"),
    (b'{"agentId": "a", "content": "   "}', "400", "$.content"),
    (b'{"agentId": "a", "content": "x", "role": "robot"}', "400", "$.role"),
    (b'{"agentId": "a", "content": "x", "importance": 1.5}', "400", "$.importance"),
    (b'{"agentId": "a", "content": "x", "importance": -0.1}', "400", "$.importance"),
    (b'{"agentId": "a", "content": "x", "timestamp": -1}', "400", "$.timestamp"),
    (b'{"agentId": "a", "content": "x", "timestamp": 1e400}', "400", "out of range"),
    (b'{"agentId": "a", "content": "x", "metadata": [1]}', "400", "$.metadata"),
    (b'{"agentId": "a", "content": "x", "sessionId": ""}', "400", "$.sessionId"),
    (b'{"agentId": "a", "content": "x", "surprise": 1}', "400", "surprise"),
    (b'{"agentId": "\\ud800", "content": "x"}', "400",
     "lone surrogate \\ud800 is not valid Unicode (at `$.agentId`)"),
    (b'{"agentId": "a", "content": "x \\udc00 y"}', "400",
     "lone surrogate \\udc00 is not valid Unicode (at `$.content`)"),
    (b'{"agentId": "a", "content": "x", "metadata": {"k": "\\ud83d"}}', "400",
     "lone surrogate \\ud83d is not valid Unicode (at `$.metadata`)"),
    (b'{"agentId": "a", "content": "x", "metadata": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}",
     "400", "nested"),
]  # fmt: skip


@pytest.mark.parametrize(("payload", "status", "mentions"), BAD_STORES)
async def test_a_bad_store_is_refused_naming_the_problem_and_writes_nothing(
    client: Client, worker: App, payload: bytes, status: str, mentions: str
) -> None:
    reply = await client.raw("memory::store", payload)
    assert reply.code == status
    assert reply.body["error"]["code"] == "invalid_request"
    assert mentions in reply.body["error"]["message"]
    assert reply.description == reply.body["error"]["message"]
    assert count_rows(worker) == 0


async def test_oversize_content_is_payload_too_large(client: Client, worker: App) -> None:
    reply = await client.call("memory::store", {"agentId": "a", "content": "x" * 524_289})
    assert reply.code == "413" and reply.body["error"]["code"] == "payload_too_large"
    assert "$.content" in reply.body["error"]["message"]
    assert count_rows(worker) == 0


async def test_content_at_the_limit_is_accepted(client: Client) -> None:
    reply = await client.call("memory::store", {"agentId": "a", "content": "é" * 262_144})
    assert reply.ok, reply


async def test_oversize_metadata_is_payload_too_large(client: Client, worker: App) -> None:
    metadata = {"blob": "x" * 16_384}
    reply = await client.call(
        "memory::store", {"agentId": "a", "content": "x", "metadata": metadata}
    )
    assert reply.code == "413" and "$.metadata" in reply.body["error"]["message"]
    assert count_rows(worker) == 0


@pytest.mark.parametrize(
    ("trigger", "payload", "field"),
    [
        ("memory::recall", {"agentId": "a", "limit": 0}, "$.limit"),
        ("memory::recall", {"agentId": "a", "limit": 101}, "$.limit"),
        ("memory::recall", {"agentId": "a", "roles": []}, "$.roles"),
        ("memory::recall", {"agentId": "a", "roles": ["bot"]}, "$.roles"),
        ("memory::recall", {"agentId": "a", "query": None}, "$.query"),
        ("memory::recall", {"query": "x"}, "agentId"),
        ("memory::evict", {"minConfidence": 2}, "$.minConfidence"),
        ("memory::evict", {"minImportance": -1}, "$.minImportance"),
        ("memory::evict", {"cap": -1}, "$.cap"),
        ("memory::evict", {"maxAge": -5}, "$.maxAge"),
        ("memory::evict", {"dryRun": "yes"}, "$.dryRun"),
        ("memory::evict", {"agentId": ""}, "$.agentId"),
        ("memory::consolidate", {"decayRate": 1.01}, "$.decayRate"),
        ("memory::consolidate", {"decayRate": None}, "$.decayRate"),
    ],
)
async def test_out_of_range_and_wrong_type_values_name_the_field(
    client: Client, trigger: str, payload: dict[str, object], field: str
) -> None:
    reply = await client.call(trigger, payload)
    assert reply.code == "400"
    assert field in reply.body["error"]["message"]


async def test_metadata_nests_at_most_64_levels(client: Client, worker: App) -> None:
    def nested(levels: int) -> object:
        value: object = 1
        for _ in range(levels):
            value = [value]
        return value

    too_deep = {"agentId": "a", "content": "x", "metadata": {"k": nested(64)}}
    reply = await client.call("memory::store", too_deep)
    assert reply.code == "400" and "$.metadata" in reply.body["error"]["message"]
    deepest = {"agentId": "a", "content": "x", "metadata": {"k": nested(63)}}
    assert (await client.call("memory::store", deepest)).ok


async def test_an_empty_body_is_an_empty_object(client: Client) -> None:
    reply = await client.raw("memory::consolidate", b"")
    assert reply.ok and reply.body["memoriesDecayed"] == 0


async def test_the_worker_keeps_serving_after_refusals(client: Client) -> None:
    for payload, _, _ in BAD_STORES:
        await client.raw("memory::store", payload)
    assert (await client.store("a", "still here"))["stored"] is True


ID_FIELDS = [
    ("memory::store", {"agentId": "?", "content": "x"}, "$.agentId"),
    ("memory::store", {"agentId": "a", "content": "x", "sessionId": "?"}, "$.sessionId"),
    ("memory::recall", {"agentId": "?"}, "$.agentId"),
    ("memory::evict", {"agentId": "?"}, "$.agentId"),
    ("memory::kg::add", {"agentId": "a", "entity": {"id": "?"}}, "$.entity.id"),
    ("memory::kg::add",
     {"agentId": "a", "entity": {"id": "e", "relations": [{"target": "?", "type": "t"}]}},
     "$.entity.relations[0].target"),
    ("memory::kg::add",
     {"agentId": "a", "entity": {"id": "e", "relations": [{"target": "f", "type": "?"}]}},
     "$.entity.relations[0].type"),
    ("memory::kg::query", {"agentId": "a", "entityId": "?"}, "$.entityId"),
    ("memory::session::repair", {"agentId": "a", "sessionId": "?"}, "$.sessionId"),
]  # fmt: skip
BAD_IDS = ["a\u0000b", "\u0000", "a\nb", "a\x7f", " a", "a ", "a\n", "   ", "\t", "\u3000",
           "\u200ba", "a\u202eb", "\ufeffa", "a\u2028b"]  # fmt: skip


def with_id(payload: dict[str, Any], value: str) -> dict[str, Any]:
    """The payload with its one "?" placeholder, however deep, replaced by value."""
    decoded: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(payload).replace(
        b'"?"', msgspec.json.encode(value)))  # fmt: skip
    return decoded


@pytest.mark.parametrize(("trigger", "payload", "field"), ID_FIELDS)
async def test_ids_with_control_characters_or_surrounding_whitespace_are_refused(
    client: Client, worker: App, trigger: str, payload: dict[str, Any], field: str
) -> None:
    """Agent, session and entity ids and relation types refuse NUL and other control
    characters, line separators, invisible bidi and zero-width marks, and whitespace at either
    end (whitespace-only too): 400 naming the field and the rule; nothing is written."""
    for value in BAD_IDS:
        reply = await client.call(trigger, with_id(payload, value))
        assert reply.code == "400", (value, reply)
        message = reply.body["error"]["message"]
        assert field in message and "no control or invisible formatting" in message, message
        assert count_rows(worker) == 0, value


async def test_ids_may_hold_inner_spaces_emoji_joiners_and_any_script(client: Client) -> None:
    for agent in ("a b", "日本語", "👨\u200d👩\u200d👧", "e\u0301", "x" * 256, "ゝ:/@#"):
        stored = await client.store(agent, "hello", sessionId=agent)
        assert [m["id"] for m in await client.recall(agent, "hello")] == [stored["id"]]


DUPLICATES = [
    ("memory::store", b'{"agentId": "B", "agentId": "A", "content": "x"}', "`agentId` at `$`"),
    ("memory::store", b'{"agentId" : "B" ,\n "agent\\u0049d":"A", "content": "x"}',
     "`agentId` at `$`"),
    ("memory::store", b'{"agentId": "a", "content": "x", "metadata": {"k": 1, "k": 2}}',
     "`k` at `$.metadata`"),
    ("memory::store", b'{"agentId": "a", "content": "x", "metadata": {"a": [{"k": 1, "k": 1}]}}',
     "`k` at `$.metadata.a[0]`"),
    ("memory::recall", b'{"agentId": "a", "query": "x", "query": "y"}', "`query` at `$`"),
    ("memory::kg::add", b'{"agentId": "a", "entity": {"id": "e", "id": "f"}}',
     "`id` at `$.entity`"),
    ("memory::kg::add",
     b'{"agentId": "a", "entity": {"id": "e", "properties": {"p": "\\"", "p": 2}}}',
     "`p` at `$.entity.properties`"),
    ("memory::kg::add",
     b'{"agentId": "a", "entity": {"id": "e", "relations": [{"target": "f", "type": "t"}, '
     b'{"target": "f", "target": "g", "type": "t"}]}}', "`target` at `$.entity.relations[1]`"),
    ("memory::session::repair", b'{"agentId": "a", "sessionId": "s", "sessionId": "s"}',
     "`sessionId` at `$`"),
]  # fmt: skip


@pytest.mark.parametrize(("trigger", "payload", "names"), DUPLICATES)
async def test_a_key_given_twice_is_refused_at_any_depth(
    client: Client, worker: App, trigger: str, payload: bytes, names: str
) -> None:
    """A key named twice in one object (even spelled with an escape, even with the same value)
    is refused with 400 naming the key and the object, instead of the last one winning; nothing
    is written."""
    reply = await client.raw(trigger, payload)
    assert reply.code == "400" and reply.body["error"]["code"] == "invalid_request", reply
    assert f"duplicate key {names}" in reply.body["error"]["message"]
    assert count_rows(worker) == 0
