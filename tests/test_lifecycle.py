"""App.start pushes each stop onto an exit stack: stop undoes start in reverse, and a start
that ends part-way releases what it had started."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import nats.aio.client
import pytest

from tests.conftest import worker_config
from tests.support import wait_until
from tests.test_cli import free_port
from worker.app import App
from worker.bus import MemoryService
from worker.embedded import EmbeddedServer
from worker.metrics import MetricsServer
from worker.readers import Readers
from worker.recall_index.backfill import Backfill
from worker.writer import Writer


def recording(order: list[str], name: str, step: Callable[..., Any]) -> Callable[..., Any]:
    def sync_step(*args: Any, **kwargs: Any) -> Any:
        order.append(name)
        return step(*args, **kwargs)

    async def async_step(*args: Any, **kwargs: Any) -> Any:
        order.append(name)
        return await step(*args, **kwargs)

    return async_step if asyncio.iscoroutinefunction(step) else sync_step


async def test_stop_is_the_reverse_of_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Metrics, then the service (requests in flight finish), the backfill, the NATS connection,
    the writer, the database, and the embedded server last."""
    order: list[str] = []
    for owner, method, name in (
        (MetricsServer, "stop", "metrics"),
        (MemoryService, "stop", "service"),
        (Backfill, "close", "backfill"),
        (nats.aio.client.Client, "drain", "nats"),
        (Writer, "stop", "writer"),
        (Readers, "close", "readers"),
        (EmbeddedServer, "stop", "embedded"),
    ):
        monkeypatch.setattr(owner, method, recording(order, name, getattr(owner, method)))
    config = worker_config(
        "", tmp_path / "memory.db", embedded_port=free_port(), metrics_port=free_port()
    )
    app = App(config)
    await app.start()
    assert order == [] and app.embedded is not None
    await app.stop()
    assert order == [
        "metrics",
        "service",
        "backfill",
        "nats",
        "writer",
        "readers",
        "embedded",
    ]


async def test_a_start_cancelled_while_waiting_for_nats_has_opened_and_created_nothing(
    tmp_path: Path, captured_logs: list[MutableMapping[str, Any]]
) -> None:
    """A signal while start-up waits for a NATS server that is not up: the connection comes
    first, so no writer thread was started and no database file or folder was made."""
    db = tmp_path / "data" / "memory.db"
    app = App(worker_config(f"nats://127.0.0.1:{free_port()}", db))
    starting = asyncio.create_task(app.start())
    await wait_until(
        lambda: any(event["event"] == "nats.unreachable" for event in captured_logs),
        "start-up saying it waits for NATS (nats.unreachable)",
    )
    assert not starting.done()
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert app._writer is None and app._conn is None and app.nc is None
    assert not db.parent.exists()
    await app.stop()  # what run() does after any start: nothing left, no error
