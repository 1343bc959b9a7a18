"""Every test gets its own real nats-server (on a free port) and its own SQLite file."""

from __future__ import annotations

import re
import subprocess
from collections.abc import AsyncIterator, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import nats
import pytest
import structlog

from tests.support import Client
from worker.app import App
from worker.config import load_config
from worker.embedded import server_binary
from worker.logs import configure_logging


def start_nats(store: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start nats-server on a port it picks itself; return the process and its client URL."""
    store.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [server_binary(), "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", str(store), *extra],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    seen = []
    for raw in process.stderr:
        line = raw.decode(errors="replace")
        seen.append(line)
        match = re.search(r"Listening for client connections on [\d.]+:(\d+)", line)
        if match:
            scheme = "tls" if "--tls" in extra else "nats"
            return process, f"{scheme}://127.0.0.1:{match.group(1)}"
    raise RuntimeError("nats-server did not start:\n" + "".join(seen))


def stop_nats(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session", autouse=True)
def quiet_logs() -> None:
    """Warnings and errors only, as the worker logs them; tests that read logs capture them."""
    configure_logging("warning", "console")


@pytest.fixture
def captured_logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every event the worker logs at info level and above, as dicts, during the test."""
    configure_logging("info", "console")
    # With the context vars merged, as the worker's own processors do (worker/logs.py).
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as logs:
        yield logs
    configure_logging("warning", "console")


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    process, url = start_nats(tmp_path / "nats")
    yield url
    stop_nats(process)


def worker_config(nats_url: str, db_path: Path, **overrides: Any) -> Any:
    settings: dict[str, Any] = {
        "nats_url": nats_url,
        "db_path": str(db_path),
        "embedder": "none",
        "keyword": "share",  # the contract's formula, which the tests check to the digit
        "recall": "formula",  # its exact top-k (the expanded mode has tests of its own)
        "consolidate_cron": "",
        "evict_cron": "",
        "log_level": "warning",
    }
    settings.update(overrides)
    return load_config({}, **settings)


@pytest.fixture
async def worker(nats_url: str, tmp_path: Path) -> AsyncIterator[App]:
    app = App(worker_config(nats_url, tmp_path / "memory.db"))
    await app.start()
    yield app
    await app.stop()


@pytest.fixture
async def client(nats_url: str, worker: App) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_url)
    yield Client(nc)
    await nc.close()
