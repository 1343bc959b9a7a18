"""Every test gets its own real nats-server (on a free port) and its own SQLite file, so that
tests run side by side in pytest-xdist's worker processes (`scripts/test` runs the suite so)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import AsyncIterator, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import nats
import pytest
import structlog

from tests.support import HOSTILE_TALLY, Client
from worker.app import App
from worker.config import load_config
from worker.embedded import server_binary
from worker.logs import configure_logging, merge_request


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In xdist's workers, the tests marked `slow` first, the longest (`slow(seconds=...)`)
    first of all: xdist deals tests out in this order, one or two at a time, so that each long
    test starts early beside the short ones instead of making the run's tail. A run in one
    process keeps the files' order."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: -expected_seconds(item))


def expected_seconds(item: pytest.Item) -> float:
    """What the test's `slow` mark says it takes (10 s when it says nothing); 0 if unmarked."""
    mark = item.get_closest_marker("slow")
    return 0.0 if mark is None else float(mark.kwargs.get("seconds", 10.0))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its tally of hostile requests to the controller."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["hostile_tally"] = dict(HOSTILE_TALLY)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller adds up each worker's tally as the worker ends (an xdist hook)."""
    HOSTILE_TALLY.update(getattr(node, "workeroutput", {}).get("hostile_tally", {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if HOSTILE_TALLY["tried"]:
        terminalreporter.write_line(
            f"test_hostile: {HOSTILE_TALLY['refused']} of {HOSTILE_TALLY['tried']} malformed "
            "requests refused with a 4xx reply"
        )


@pytest.fixture(scope="session", autouse=True)
def quiet_logs() -> None:
    """Warnings and errors only, as the worker logs them; tests that read logs capture them."""
    configure_logging("warning", "console")


@pytest.fixture
def captured_logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every event the worker logs at info level and above, as dicts, during the test."""
    configure_logging("info", "console")
    # With the request's keys merged, as the worker's own processors do (worker/logs.py).
    with structlog.testing.capture_logs(processors=[merge_request]) as logs:
        yield logs
    configure_logging("warning", "console")


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    process, url = start_nats(tmp_path / "nats")
    yield url
    stop_nats(process)


# The contract's formula to the digit: keyword share, and its exact top-k. Only tests that
# check the formula's scores or ranking ask for it (`worker_config(..., **FORMULA)`, or the
# `formula` mark on a test using the `worker` fixture); the rest run with the defaults users get
# (keyword `stems`, recall `expanded`, vector index `auto`).
FORMULA: dict[str, Any] = {"keyword": "share", "recall": "formula"}


def worker_config(nats_url: str, db_path: Path, **overrides: Any) -> Any:
    """The worker's defaults, except: no embedding model (the builtin one would add its load to
    every worker a test starts), no scheduled maintenance, quiet logs, and no CPU pinning (a
    worker started in the test process would pin the test's own thread, and every thread it
    starts after: tests/test_affinity.py runs the worker as a process to test it)."""
    settings: dict[str, Any] = {
        "pin_threads": False,
        "nats_url": nats_url,
        "db_path": str(db_path),
        "embedder": "none",
        "consolidate_cron": "",
        "evict_cron": "",
        "log_level": "warning",
    }
    settings.update(overrides)
    return load_config({}, **settings)


@pytest.fixture
async def worker(
    nats_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[App]:
    """A running worker on its own file; with the test's `formula` mark, scoring by the
    contract's formula (FORMULA)."""
    formula = FORMULA if request.node.get_closest_marker("formula") else {}
    app = App(worker_config(nats_url, tmp_path / "memory.db", **formula))
    await app.start()
    yield app
    await app.stop()


@pytest.fixture
async def client(nats_url: str, worker: App) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_url)
    yield Client(nc)
    await nc.close()
