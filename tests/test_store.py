"""memory::store over the bus: contract section 2."""

from __future__ import annotations

import hashlib
from typing import Any

import apsw
import pytest

from handlers.store import estimate_importance
from tests.support import Client
from worker.app import App


def rows(app: App, sql: str, *params: object) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(app.config.db_path)
    try:
        return [tuple(row) for row in conn.execute(sql, params)]
    finally:
        conn.close()


async def test_store_returns_a_new_uuid_and_keeps_content_and_hash(
    client: Client, worker: App
) -> None:
    reply = await client.store("a1", "the sky is blue")
    assert reply["stored"] is True and reply["deduplicated"] is False
    assert len(reply["id"]) == 36 and reply["id"][14] == "4"
    [(content, digest)] = rows(
        worker, "SELECT content, hash FROM memories WHERE id = ?", reply["id"]
    )
    assert content == "the sky is blue"
    assert digest == hashlib.sha256(b"the sky is blue").hexdigest()


async def test_same_content_same_agent_is_deduplicated_with_the_existing_id(
    client: Client, worker: App
) -> None:
    first = await client.store("a1", "same words")
    again = await client.store("a1", "same words", role="assistant")
    assert again == {"id": first["id"], "stored": False, "deduplicated": True}
    assert rows(worker, "SELECT count(*) FROM memories") == [(1,)]


async def test_dedup_is_per_agent(client: Client, worker: App) -> None:
    first = await client.store("a1", "shared words")
    other = await client.store("a2", "shared words")
    assert other["stored"] is True and other["id"] != first["id"]


@pytest.mark.parametrize(
    ("content", "role", "expected"),
    [
        ("plain note", "user", 0.5),
        ("plain note", "assistant", 0.6),
        ("x" * 501, "user", 0.6),
        ("x" * 500, "user", 0.5),
        ("found a BUG today", "user", 0.65),
        ("error and fix and critical", "user", 0.65),
        ("```code```", "user", 0.6),
        ("Error ```fix``` " + "y" * 500, "assistant", 0.95),
        ("é" * 251, "user", 0.6),  # 502 bytes of UTF-8, 251 characters
        ("CRITICAL error ```x``` " + "z" * 600, "assistant", 0.95),
    ],
)
def test_importance_estimate_follows_the_contract(content: str, role: str, expected: float) -> None:
    assert estimate_importance(content, role) == pytest.approx(min(1.0, expected))


async def test_stored_memory_starts_with_full_confidence_and_no_accesses(
    client: Client, worker: App
) -> None:
    reply = await client.store("a1", "note", timestamp=1_700_000_000_000, importance=0.3)
    [row] = rows(
        worker,
        "SELECT confidence, access_count, last_accessed, timestamp, importance, role, metadata "
        "FROM memories WHERE id = ?",
        reply["id"],
    )
    assert row == (1.0, 0, 1_700_000_000_000, 1_700_000_000_000, 0.3, "user", None)


async def test_metadata_is_returned_as_stored(client: Client) -> None:
    metadata = {"source": "slack", "tags": ["a", "b"], "nested": {"n": 1.5, "ok": True}}
    await client.store("a1", "with metadata", metadata=metadata)
    [memory] = await client.recall("a1", "metadata")
    assert memory["metadata"] == metadata


async def test_session_store_appends_once_even_when_deduplicated(
    client: Client, worker: App
) -> None:
    first = await client.store("a1", "hello", sessionId="s1")
    await client.store("a1", "hello", sessionId="s1")
    await client.store("a1", "hello", sessionId="s2")
    refs = rows(
        worker,
        "SELECT session_id, memory_id FROM session_messages ORDER BY session_id, position",
    )
    assert refs == [("s1", first["id"]), ("s2", first["id"])]


async def test_store_updates_the_session_updated_at(client: Client, worker: App) -> None:
    await client.store("a1", "one", sessionId="s1")
    [(created, updated_before)] = rows(worker, "SELECT created_at, updated_at FROM sessions")
    await client.store("a1", "two", sessionId="s1")
    [(created_after, updated_after)] = rows(worker, "SELECT created_at, updated_at FROM sessions")
    assert created_after == created and updated_after >= updated_before


async def test_a_success_reply_means_the_row_is_committed(client: Client, worker: App) -> None:
    reply = await client.store("a1", "durable")
    # A second connection sees it at once: the reply came after COMMIT.
    assert rows(worker, "SELECT id FROM memories") == [(reply["id"],)]
