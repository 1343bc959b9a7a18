"""Recalls' access counts (worker/access_counts.py): gathered for a moment after the replies,
then written in one transaction per agent that leaves what one write per recall would have left;
a stop writes what is held at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import nats

from tests.conftest import worker_config
from tests.support import Client
from worker.app import App
from worker.writer import Writer


def on_file(db_path: Path) -> dict[str, tuple[int, int]]:
    """Each memory's (access_count, last_accessed) as the database holds them."""
    conn = apsw.Connection(str(db_path))
    try:
        rows = conn.execute("SELECT content, access_count, last_accessed FROM memories")
        return {content: (count, at) for content, count, at in rows}
    finally:
        conn.close()


def count_writes(writer: Writer) -> list[int]:
    """Counts the writer jobs submitted from now on (one item per job)."""
    jobs: list[int] = []
    run = writer.run

    async def counted(fn: Callable[[Any], Any], **options: Any) -> Any:
        jobs.append(1)
        return await run(fn, **options)

    writer.run = counted  # type: ignore[method-assign]
    return jobs


async def test_recalls_gathered_are_written_as_one_write_with_summed_counts_and_the_latest_time(
    worker: App, client: Client, tmp_path: Path
) -> None:
    await client.store("a", "the lake at dawn")
    await client.store("a", "a heron on the shore")
    assert worker.services is not None
    worker.services.accesses.gather = 60.0  # held until hurried below
    jobs = count_writes(worker.services.writer)
    replies = [await client.recall("a", "lake", limit=1) for _ in range(3)]
    replies += [await client.recall("a", "heron", limit=1) for _ in range(2)]
    assert [reply[0]["content"] for reply in replies] == ["the lake at dawn"] * 3 + [
        "a heron on the shore"
    ] * 2
    assert [reply[0]["accessCount"] for reply in replies] == [1, 2, 3, 1, 2]
    assert on_file(tmp_path / "memory.db")["the lake at dawn"][0] == 0  # held, not written
    worker.services.accesses.hurry()
    await asyncio.gather(*worker.services.background)
    lake, heron = replies[2][0], replies[4][0]
    assert on_file(tmp_path / "memory.db") == {
        "the lake at dawn": (3, lake["lastAccessed"]),
        "a heron on the shore": (2, heron["lastAccessed"]),
    }
    assert jobs == [1]  # one write for the five recalls of one agent


async def test_a_stop_writes_the_access_counts_held_without_waiting_the_moment_out(
    nats_url: str, tmp_path: Path
) -> None:
    app = App(worker_config(nats_url, tmp_path / "memory.db"))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        await client.store("a", "the lake at dawn")
        assert app.services is not None
        app.services.accesses.gather = 3600.0  # longer than a stop waits for background work
        [found] = await client.recall("a", "lake")
    finally:
        await nc.close()
        await app.stop()
    assert on_file(tmp_path / "memory.db") == {"the lake at dawn": (1, found["lastAccessed"])}
