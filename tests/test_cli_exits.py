"""The client commands fail fast, each way of failing with its own exit code and line."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from worker.__main__ import _parser
from worker.commands import Exit

WORKER = [sys.executable, "-m", "worker"]


def cli(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Run:
    started = time.monotonic()
    done = subprocess.run(
        [*WORKER, *args],
        capture_output=True,
        text=True,
        timeout=20,  # the old client never returned at all
        input=stdin,
        env={**os.environ, **(env or {})},
    )
    return Run(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float


def dead_port() -> int:
    """A port that was just bound and closed: nothing listens there."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and then never says anything (no NATS INFO)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("command", [["fire", "memory::stats"], ["check"], ["stats"]])
def test_fire_check_and_stats_fail_at_once_when_nothing_listens(command: list[str]) -> None:
    """Against a closed port each exits 3 ("cannot reach NATS") long before its timeout."""
    done = cli(*command, "--nats-url", f"nats://127.0.0.1:{dead_port()}", "--timeout", "10")
    assert done.code == Exit.UNREACHABLE, done.stderr
    assert "cannot connect to NATS" in done.stderr and done.stdout == ""
    assert done.seconds < 5


@pytest.mark.parametrize("command", [["fire", "memory::stats"], ["check"]])
def test_a_server_that_never_completes_the_handshake_fails_within_the_timeout(
    command: list[str], silent_server: int
) -> None:
    """A listener that never sends INFO ends the attempt within --timeout, exit 3."""
    done = cli(*command, "--nats-url", f"nats://127.0.0.1:{silent_server}", "--timeout", "1")
    assert done.code == Exit.UNREACHABLE, done.stderr
    assert "cannot connect to NATS" in done.stderr
    assert done.seconds < 6


def test_an_unknown_trigger_is_refused_naming_the_valid_ones(nats_url: str) -> None:
    """A misspelt trigger is a usage error (64) listing the real ones, not "no worker answers"."""
    done = cli("fire", "memory::kg::ad", "--nats-url", nats_url, "--timeout", "2")
    assert done.code == Exit.USAGE, done.stderr
    assert "unknown trigger 'memory::kg::ad'" in done.stderr
    assert "memory::kg::add" in done.stderr and "memory::store" in done.stderr


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("memory::stroe", "memory::store"), ("memory.stroe", "memory::store"),
     ("memory::kg::ad", "memory::kg::add"), ("memory::recal", "memory::recall")],
)  # fmt: skip
def test_a_mistyped_trigger_is_refused_with_the_closest_one_suggested(
    typed: str, meant: str
) -> None:
    """A typo, in the trigger or the subject form, is a usage error (64) that names what was
    typed and suggests the closest trigger before listing them all; nothing is sent."""
    done = cli("fire", typed, "--nats-url", f"nats://127.0.0.1:{dead_port()}")
    assert done.code == Exit.USAGE, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"memory-worker fire: unknown trigger {typed!r}; did you mean {meant}?")
    assert "cannot connect" not in line


def test_a_name_close_to_no_trigger_gets_no_suggestion() -> None:
    """Nothing near it: no guess, only the list."""
    done = cli("fire", "backup", "--nats-url", f"nats://127.0.0.1:{dead_port()}")
    assert done.code == Exit.USAGE and "did you mean" not in done.stderr
    assert "unknown trigger 'backup'. The triggers: " in done.stderr


def test_the_version_is_the_installed_distributions() -> None:
    """`memory-worker --version` prints the version pip installed, and exits 0."""
    from importlib.metadata import version

    done = cli("--version")
    assert done.code == 0, done.stderr
    assert done.stdout == f"memory-worker {version('memory-worker')}\n"


def test_bench_help_points_at_nothing_outside_the_repository() -> None:
    """`bench --help` says what --locomo takes without naming a path a clone does not have."""
    done = cli("bench", "--help")
    assert done.code == 0, done.stderr
    assert "../shared" not in done.stdout and "shared/bench" not in done.stdout
    assert "--locomo" in done.stdout and "LoCoMo" in done.stdout


def test_a_request_over_the_servers_max_payload_has_its_own_exit_code(nats_url: str) -> None:
    """More than max_payload (1 MiB by default) exits 4 saying so, not "cannot reach NATS"."""
    big = '{"agentId": "a", "content": "' + "x" * (1024 * 1024 + 10) + '"}'
    done = cli("fire", "memory::store", "-", "--nats-url", nats_url, stdin=big)
    assert done.code == Exit.TOO_LARGE, done.stderr
    assert "max_payload 1048576 bytes" in done.stderr and "cannot" not in done.stderr


@pytest.mark.parametrize(
    "url",
    [
        "nats://127.0.0.1:",
        "127.0.0.1:4222",
        "http://127.0.0.1:4222",
        "nats://:4222",
        "NATS://127.0.0.1:4222",
        " nats://127.0.0.1:4222",
    ],
)
def test_a_nats_url_without_scheme_host_or_with_an_empty_port_is_refused(url: str) -> None:
    """nats-py would read these as some other server; the command refuses them (64)."""
    for command in (["fire", "memory::stats"], ["check"], ["stats"]):
        done = cli(*command, "--nats-url", url, "--timeout", "10")
        assert done.code == Exit.USAGE, (command, done.stderr)
        assert done.stderr.startswith(f"memory-worker: --nats-url: {url!r}"), done.stderr
    done = cli("check", env={"MEMORY_WORKER_NATS_URL": url})
    assert done.code == Exit.CONFIG and "MEMORY_WORKER_NATS_URL" in done.stderr


def test_usage_errors_exit_64_so_that_2_only_means_no_worker() -> None:
    """argparse's own errors and a payload that is not JSON exit 64, not 2."""
    assert cli("fire").code == Exit.USAGE
    assert cli("check", "--timeout", "0").code == Exit.USAGE
    assert cli("fire", "memory::store", "{oops").code == Exit.USAGE


def test_help_lists_every_command_with_a_one_line_help() -> None:
    """`memory-worker --help` names each command beside a one-line description."""
    done = cli("--help")
    assert done.code == 0
    [commands] = [a for a in _parser()._actions if a.dest == "command"]
    names = list(commands.choices or ())
    assert {"run", "fire", "stats", "check", "bench", "backup", "migrate", "export"} <= set(names)
    assert "import" in names
    for name in names:
        [line] = [line for line in done.stdout.splitlines() if line.split()[:1] == [name]]
        assert len(line.split()) > 2, f"{name} has no help line"


def test_the_client_commands_document_their_exit_codes() -> None:
    """fire, stats and check list every exit code in their --help."""
    for command in ("fire", "stats", "check"):
        text = cli(command, "--help").stdout
        for code in Exit:
            assert f"\n  {int(code):<3} " in text, (command, code)


async def test_a_worker_still_waiting_for_nats_stops_promptly_on_sigterm(tmp_path: Path) -> None:
    """`run` against a server that is not up waits for it, but SIGTERM ends the wait."""
    env = {**os.environ, "MEMORY_WORKER_EMBEDDER": "none"}
    url = f"nats://127.0.0.1:{dead_port()}"
    process = subprocess.Popen(
        [*WORKER, "run", "--nats-url", url, "--db", str(tmp_path / "memory.db")],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        assert process.stderr is not None
        lines = [await asyncio.to_thread(process.stderr.readline) for _ in range(1)]
        while b"nats.unreachable" not in lines[-1]:  # connecting and failing: the wait has begun
            assert lines[-1] and len(lines) < 50, lines
            lines.append(await asyncio.to_thread(process.stderr.readline))
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(process.wait, 10)
        assert time.monotonic() - started < 3
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
