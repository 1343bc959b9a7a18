"""A recall's reply goes to the socket before its access count goes to the writer
(worker/triggers/memory.py `_write_accessed`): handed to the writer first, the write had the
writer thread take the GIL from the reply's send."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support import Client
from worker.app import App


async def test_a_recalls_reply_is_sent_before_its_access_is_written(
    worker: App, client: Client
) -> None:
    await client.store("a", "the lake at dawn")
    await client.recall("a", "lake")  # loads the agent
    services = worker.services
    assert services is not None
    await asyncio.gather(*services.background)
    events: list[str] = []
    transport = services.nc._transport
    send, run = transport.writelines, services.writer.run

    def sent(payload: Any) -> Any:
        events.append("sent")
        return send(payload)

    async def written(fn: Any, **options: Any) -> Any:
        events.append("access")
        return await run(fn, **options)

    transport.writelines = sent
    services.writer.run = written  # type: ignore[method-assign]
    try:
        [memory] = await client.recall("a", "lake")
        await asyncio.gather(*services.background)
    finally:
        transport.writelines = send
        services.writer.run = run  # type: ignore[method-assign]
    assert memory["accessCount"] == 2
    assert events.index("sent") < events.index("access"), events
