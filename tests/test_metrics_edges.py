"""The metrics endpoint's edges (contract section 18): loopback by default, the deploy files
opening it where a scraper needs it, and a request head complete within 5 s."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import worker_config
from tests.test_cli import free_port
from worker.app import App
from worker.config import load_config
from worker.metrics import HEAD_DEADLINE_S, HEAD_MAX_BYTES

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


@pytest.fixture
async def metrics_port(nats_url: str, tmp_path: Path) -> AsyncIterator[tuple[App, int]]:
    """A worker with metrics on and MEMORY_WORKER_METRICS_HOST left at its default."""
    app = App(worker_config(nats_url, tmp_path / "memory.db", metrics_port=free_port()))
    await app.start()
    assert app.metrics is not None
    yield app, app.metrics.port
    await app.stop()


async def test_metrics_listen_on_loopback_unless_told_otherwise(
    metrics_port: tuple[App, int],
) -> None:
    """The default MEMORY_WORKER_METRICS_HOST is 127.0.0.1, and the server binds only there."""
    app, _ = metrics_port
    assert load_config({}).metrics_host == "127.0.0.1"
    assert app.metrics is not None and app.metrics._server is not None
    bound = {socket.getsockname()[0] for socket in app.metrics._server.sockets}
    assert bound == {"127.0.0.1"}


def test_every_deploy_file_that_turns_metrics_on_opens_them_to_the_scraper() -> None:
    """Compose and Kubernetes set MEMORY_WORKER_METRICS_HOST to 0.0.0.0 beside the port, the
    container image does, and the example environment shows the loopback default."""
    turned_on = [
        path
        for path in DEPLOY.rglob("*")
        if path.is_file() and "MEMORY_WORKER_METRICS_PORT: " in path.read_text(encoding="utf-8")
    ]
    assert len(turned_on) == 4, turned_on  # two compose files, two Kubernetes config maps
    for path in turned_on:
        text = path.read_text(encoding="utf-8")
        assert re.search(r'MEMORY_WORKER_METRICS_HOST: "?0\.0\.0\.0"?', text), path
    assert "MEMORY_WORKER_METRICS_HOST=0.0.0.0" in (DEPLOY / "Containerfile").read_text()
    example = (DEPLOY / "memory-worker.env.example").read_text()
    assert "#MEMORY_WORKER_METRICS_HOST=127.0.0.1\n" in example


async def test_a_client_trickling_header_lines_is_cut_off_5_s_after_connecting(
    metrics_port: tuple[App, int],
) -> None:
    """One header line a second never ends the head; the connection is closed without an answer
    about HEAD_DEADLINE_S (5 s) after it was opened, not kept while lines keep coming."""
    _, port = metrics_port
    assert HEAD_DEADLINE_S == 5.0
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\n")

    async def trickle() -> None:
        for number in range(30):
            await asyncio.sleep(1)  # the client's pace, not a wait for anything
            writer.write(f"X-Slow-{number}: y\r\n".encode())
            await writer.drain()

    trickling = asyncio.create_task(trickle())
    try:
        answer = await asyncio.wait_for(reader.read(), HEAD_DEADLINE_S + 5)
    finally:
        trickling.cancel()
        writer.close()
    elapsed = time.monotonic() - started
    assert answer == b""  # closed, with nothing said
    assert HEAD_DEADLINE_S - 0.5 < elapsed < HEAD_DEADLINE_S + 2.5, elapsed


async def test_a_request_head_larger_than_the_limit_is_closed_unanswered(
    metrics_port: tuple[App, int],
) -> None:
    """A whole head of more than HEAD_MAX_BYTES gets no answer: the connection is closed (and
    the next, normal scrape is answered)."""
    _, port = metrics_port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    line = b"X-Filler: " + b"y" * 1000 + b"\r\n"
    writer.write(b"GET /metrics HTTP/1.1\r\n" + line * (HEAD_MAX_BYTES // len(line) + 2) + b"\r\n")
    try:
        answer = await asyncio.wait_for(reader.read(), HEAD_DEADLINE_S + 5)
    finally:
        writer.close()
    assert answer == b""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await reader.read()).startswith(b"HTTP/1.1 200")
    writer.close()
