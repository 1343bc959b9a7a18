"""Credentials in a NATS URL never appear in the worker's logs or the CLI's output."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import start_nats, stop_nats
from tests.support import Client
from worker.logs import configure_logging
from worker.redact import redact

PASSWORD = "Zq9-hunter2-secret"
WRONG = "Zq9-not-the-password"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("nats://alice:s3cret@host:4222", "nats://alice:***@host:4222"),
        ("tls://alice:s3cret@host", "tls://alice:***@host"),
        ("nats://tok3n@host:4222", "nats://***@host:4222"),
        ("ws://alice:p@ss:w,rd@host:80/path", "ws://alice:***@host:80/path"),
        ("nats://a:x@h1:4222,nats://b:y@h2:4222", "nats://a:***@h1:4222,nats://b:***@h2:4222"),
        (
            "cannot connect to NATS at nats://alice:s3cret@host:4222: nats: timeout",
            "cannot connect to NATS at nats://alice:***@host:4222: nats: timeout",
        ),
        ("nats://alice:s3/cret@host:4222", "nats://alice:***@host:4222"),
        ("nats://tok/en@host:4222", "nats://***@host:4222"),
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("mail me at alice@example.com", "mail me at alice@example.com"),
        ("", ""),
    ],
)
def test_the_password_or_token_of_a_url_is_masked_and_the_rest_kept(text: str, shown: str) -> None:
    assert redact(text) == shown


@given(
    user=st.text(alphabet="abcdefghij-_.", min_size=1, max_size=12),
    secret=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:%@", max_size=30),
    token=st.booleans(),
)
def test_no_password_survives_redaction(user: str, secret: str, token: bool) -> None:
    """Whatever characters a password or token has (`@`, `:` and `,` included), the redacted
    text keeps none of it, and still names the host."""
    if token:  # a URL's userinfo up to its first `:` is a user name, so a token has none
        secret = secret.replace(":", "")
    marked = "PW" + secret  # the marker keeps the check from matching another part by chance
    url = f"nats://{marked}@db.example:4222" if token else f"nats://{user}:{marked}@db.example:4222"
    shown = redact(f"cannot connect to NATS at {url}: refused")
    assert marked not in shown
    assert "@db.example:4222: refused" in shown


def test_the_logger_masks_credentials_in_any_field() -> None:
    """A URL with a password logged under any field name, or inside an exception's text, is
    masked by the logging set-up itself: the safety net for fields added later."""
    out = io.StringIO()
    configure_logging("info", "json", file=out)
    try:
        log = structlog.get_logger()
        log.info("some.event", upstream=f"nats://alice:{PASSWORD}@host:4222", n=1)
        try:
            raise ConnectionError(f"lost nats://{PASSWORD}@host:4222")
        except ConnectionError:
            log.error("other.event", exc_info=True)
    finally:
        configure_logging("warning", "console")
    err = out.getvalue()
    assert PASSWORD not in err
    assert "nats://alice:***@host:4222" in err and "lost nats://***@host:4222" in err


# --- a real worker and the CLI ------------------------------------------------------------------


@pytest.fixture
def secured_url(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A nats-server requiring user `memory` with PASSWORD; yields it and its URL without
    credentials."""
    conf = tmp_path / "nats-server.conf"
    users = [{"user": "memory", "password": PASSWORD}]
    conf.write_text(f"authorization {{\n  users = {json.dumps(users)}\n}}\n", encoding="utf-8")
    process, url = start_nats(tmp_path / "nats", "-c", str(conf))
    yield process, url
    stop_nats(process)


def with_credentials(url: str, password: str) -> str:
    return url.replace("nats://", f"nats://memory:{password}@", 1)


def environment(**settings: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    return {**clean, **{"MEMORY_WORKER_" + k.upper(): v for k, v in settings.items()}}


class Lines:
    """A process's stderr, read on a thread; `wait_for` blocks until a line holds a text."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.lines: list[str] = []
        assert process.stderr is not None
        self._stream = process.stderr
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for raw in self._stream:
            self.lines.append(raw.decode(errors="replace"))

    def wait_for(self, text: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            time.sleep(0.05)
        raise AssertionError(f"no {text!r} in:\n{''.join(self.lines)}")

    def text(self) -> str:
        self._thread.join(timeout=10)
        return "".join(self.lines)


async def test_a_running_worker_never_logs_the_password_of_its_nats_url(
    secured_url: tuple[subprocess.Popen[bytes], str], tmp_path: Path
) -> None:
    """`memory-worker run` with the password in MEMORY_WORKER_NATS_URL, at info level: start-up,
    a served request, the server going away (disconnect and reconnect errors) and shutdown log
    the URL as `nats://memory:***@…`, never the password."""
    server, url = secured_url
    env = environment(
        nats_url=with_credentials(url, PASSWORD),
        db_path=str(tmp_path / "memory.db"),
        embedder="none",
        ingest="false",
        consolidate_cron="",
        evict_cron="",
        log_level="info",
        log_format="json",
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "worker", "run"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    logs = Lines(worker)
    try:
        await asyncio.to_thread(logs.wait_for, "worker.started")
        nc = await nats.connect(url, user="memory", password=PASSWORD)
        await Client(nc).store("a1", "served while logging")
        await nc.close()
        await asyncio.to_thread(logs.wait_for, "trigger.handled")
        stop_nats(server)  # the worker now says it cannot reach the server
        await asyncio.to_thread(logs.wait_for, "nats.unreachable")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(worker.wait, 20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    text = logs.text()
    assert PASSWORD not in text, text
    assert with_credentials(url, "***") in text, text


async def test_cli_messages_never_print_the_password_of_a_url(
    secured_url: tuple[subprocess.Popen[bytes], str], tmp_path: Path
) -> None:
    """`check` with a refused password, `fire` when no worker answers and `run` refused at
    start-up each print one line naming the server as `nats://memory:***@…`."""
    _, url = secured_url

    def cli(*args: str, **settings: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "worker", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=environment(db_path=str(tmp_path / "memory.db"), **settings),
        )

    refused = await asyncio.to_thread(
        cli, "check", "--nats-url", with_credentials(url, WRONG), "--timeout", "2"
    )
    unanswered = await asyncio.to_thread(
        cli, "fire", "memory::stats", "--timeout", "1", nats_url=with_credentials(url, PASSWORD)
    )
    not_started = await asyncio.to_thread(
        cli, "run", nats_url=with_credentials(url, WRONG), embedder="none", ingest="false"
    )
    for done, password in ((refused, WRONG), (unanswered, PASSWORD), (not_started, WRONG)):
        assert done.returncode != 0
        assert password not in done.stderr + done.stdout, done.stderr
        assert with_credentials(url, "***") in done.stderr, done.stderr


def test_a_refused_nats_url_is_quoted_without_its_password() -> None:
    """Configuration errors quote the URL they refuse, masked like every other place."""
    from worker.config import nats_url_problem

    problem = nats_url_problem("nats://alice:hunter2@127.0.0.1:")
    assert problem is not None and "empty port" in problem
    assert "hunter2" not in problem and "alice:***@" in problem


@pytest.mark.parametrize("url", ["nats://alice:s3/cr//et@h:4222", "nats://to#k?en@h:4222"])
def test_a_password_a_url_cannot_carry_is_refused_without_showing_it(url: str) -> None:
    """nats-py reads `/`, `?` and `#` as the end of the host, so such a password is refused,
    and the message shows none of it (`//` inside it would defeat any URL pattern)."""
    from worker.config import nats_url_problem

    problem = nats_url_problem(url)
    assert problem is not None and "'nats://***@h:4222'" in problem and "_PASSWORD" in problem
    for part in ("s3", "cr//et", "to#k", "k?en"):
        assert part not in problem
