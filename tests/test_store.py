"""memory::store over the bus: contract section 2. What the handler decides (ids, dedup, the
importance estimate, stored fields, session lists) is in tests/handlers/test_store.py."""

from __future__ import annotations

from typing import Any

import apsw

from tests.support import Client
from worker.app import App


def rows(app: App, sql: str, *params: object) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(app.config.db_path)
    try:
        return [tuple(row) for row in conn.execute(sql, params)]
    finally:
        conn.close()


async def test_store_replies_id_stored_and_deduplicated_on_the_wire(client: Client) -> None:
    first = await client.store("a1", "same words")
    assert first["stored"] is True and first["deduplicated"] is False and len(first["id"]) == 36
    again = await client.store("a1", "same words", role="assistant")
    assert again == {
        "id": first["id"],
        "stored": False,
        "deduplicated": True,
        "redactions": {},
        "flags": [],
        "facts": [],
    }


async def test_metadata_is_returned_as_stored(client: Client) -> None:
    metadata = {"source": "slack", "tags": ["a", "b"], "nested": {"n": 1.5, "ok": True}}
    await client.store("a1", "with metadata", metadata=metadata)
    [memory] = await client.recall("a1", "metadata")
    assert memory["metadata"] == metadata


async def test_a_success_reply_means_the_row_is_committed(client: Client, worker: App) -> None:
    reply = await client.store("a1", "durable")
    # A second connection sees it at once: the reply came after COMMIT.
    assert rows(worker, "SELECT id FROM memories") == [(reply["id"],)]
