"""Maintenance in bounded chunks, as the bus shows it: stores keep being answered while a large
eviction runs (the pure parts are in tests/handlers/test_maintenance_chunks.py)."""

from __future__ import annotations

import asyncio
import time

import apsw

from tests.handlers.test_maintenance_chunks import seed
from tests.support import Client
from worker.app import App
from worker.triggers.chunked import CHUNK


async def test_stores_sent_during_a_large_eviction_answer_before_it_ends(
    client: Client, worker: App
) -> None:
    """Eviction runs in chunks of CHUNK memories, so stores get the writer in between; as one
    transaction (the old way) every store sent after it began waited for all of it."""
    count = 6 * CHUNK
    conn = apsw.Connection(worker.config.db_path)
    conn.set_busy_timeout(5000)
    try:
        seed(conn, count)
    finally:
        conn.close()
    evicting = asyncio.create_task(client.ok("memory::evict", {"agentId": "a", "cap": 0}))
    answered_during = 0
    started = time.monotonic()
    while not evicting.done() and time.monotonic() - started < 60:
        await client.store("bystander", f"note {answered_during}")
        answered_during += 0 if evicting.done() else 1
    reply = await evicting
    assert reply["evicted"] == count
    assert answered_during >= 2
