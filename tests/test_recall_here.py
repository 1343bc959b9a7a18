"""Where a recall ranks (worker/triggers/memory.py `HERE_ROWS`): on the event loop itself when the
agent is loaded, the ranking short and no reader thread busy, so that it skips the trip to a
thread and back; on a reader thread otherwise, so that it overtakes none of their work."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from tests.support import Client
from worker.app import App
from worker.readers import Readers


def count_runs(readers: Readers) -> list[int]:
    """Counts the calls handed to the reader threads from now on (one list item per call)."""
    calls: list[int] = []
    run = readers.run

    async def counted(fn: Callable[[Any], Any]) -> Any:
        calls.append(1)
        return await run(fn)

    readers.run = counted  # type: ignore[method-assign]
    return calls


async def test_a_recall_of_a_loaded_agent_with_no_reader_busy_ranks_on_the_event_loop(
    worker: App, client: Client
) -> None:
    await client.store("a", "the lake at dawn")
    await client.store("a", "a heron on the shore")
    assert (await client.recall("a", "lake"))[0]["content"] == "the lake at dawn"
    assert worker.services is not None
    # The first recall's access count is written in the background; its commit, applied to the
    # index under the index's lock, would send this recall to a thread: wait for it.
    await asyncio.gather(*worker.services.background)
    calls = count_runs(worker.services.readers)
    found = await client.recall("a", "heron")
    assert found[0]["content"] == "a heron on the shore"
    assert found[0]["accessCount"] == 2  # returned by both recalls
    assert calls == []


async def test_a_recall_takes_a_reader_thread_while_another_read_is_running(
    worker: App, client: Client
) -> None:
    await client.store("a", "the lake at dawn")
    await client.recall("a", "lake")  # loads the agent
    assert worker.services is not None
    readers = worker.services.readers
    started, release = threading.Event(), threading.Event()

    def hold(conn: Any) -> None:
        started.set()
        release.wait(10)

    held = asyncio.ensure_future(readers.run(hold))
    try:
        await asyncio.to_thread(started.wait, 10)
        calls = count_runs(readers)
        assert [m["content"] for m in await client.recall("a", "lake")] == ["the lake at dawn"]
        assert calls == [1]
    finally:
        release.set()
        await held
