"""`memory-worker run` as processes: a second start in the same data directory leaves the first
alone, a killed worker's embedded server is stopped by the next start, and a worker that cannot
reach NATS says so calmly, creates nothing and exits once its reconnect budget is spent."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.embedded import server_binary

WORKER = [sys.executable, "-m", "worker"]
README = Path(__file__).resolve().parent.parent / "README.md"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def environment(**settings: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    defaults = {"embedder": "none", "log_format": "json", "consolidate_cron": "", "evict_cron": ""}
    merged = {**defaults, **settings}
    return {**clean, **{"MEMORY_WORKER_" + k.upper(): v for k, v in merged.items()}}


class Worker:
    """`memory-worker run` in cwd, its stderr read on a thread."""

    command: tuple[str, ...] = (*WORKER, "run")

    def __init__(self, cwd: Path, *args: str, **settings: str) -> None:
        self.process = subprocess.Popen(
            [*self.command, *args],
            cwd=cwd,
            env=environment(**settings),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, event: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(f'"event": "{event}"' in line for line in self.lines):
                return
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no {event} from the worker:\n" + "\n".join(self.lines))

    def exit(self, timeout: float) -> tuple[int, list[str]]:
        """Its exit code and every stderr line, once it exits by itself within timeout."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running after {timeout}s:\n" + "\n".join(self.lines)
            ) from None
        self._reader.join(10)
        return code, self.lines

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[Worker]]:
    """The workers a test starts, stopped after it; and any embedded server still running in
    its directories (one a failing start left behind) killed."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()
    for pid_file in tmp_path.rglob("nats-server.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text())
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            ours = os.fsencode(tmp_path) in command + os.fsencode(os.readlink(f"/proc/{pid}/cwd"))
            if b"nats-server" in command and ours:
                os.kill(pid, signal.SIGKILL)


def check(port: int) -> int:
    url = f"nats://127.0.0.1:{port}"
    done = subprocess.run(
        [*WORKER, "check", "--nats-url", url, "--timeout", "3"],
        capture_output=True,
        timeout=30,
        env=environment(),
    )
    return done.returncode


def refuse(cwd: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """A start expected to stop by itself (today's code kept running: a timeout fails it)."""
    return subprocess.run(
        [*WORKER, "run", *args],
        cwd=cwd,
        env=environment(**settings),
        capture_output=True,
        text=True,
        timeout=30,
    )


def documented_refusal() -> str:
    """The refusal docs/operating.md "Starting and stopping" shows."""
    page = (README.parent / "docs" / "operating.md").read_text()
    starting = page.split("## Starting and stopping\n", 1)[1].split("\n## ", 1)[0]
    [line] = [line for line in starting.splitlines() if " is in use by " in line]
    return line


def readme_ready_word() -> str:
    """The word README "Start it" tells a script to wait for."""
    start_it = README.read_text().split("## Start it\n", 1)[1].split("\n## ", 1)[0]
    [word] = re.findall(r"a script waits for `([^`]+)`", start_it)
    return str(word)


class Started(Worker):
    """`scripts/start` itself, as a reader runs it."""

    command = (str(README.parent / "scripts" / "start"),)


def test_scripts_start_prints_the_ready_word_only_once_the_worker_serves(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """scripts/start's own banner does not contain the word README tells a script to wait for,
    so the first stderr line holding it is the worker's own, logged once it serves: `check`
    answers then."""
    word = readme_ready_word()
    port = free_port()
    started = Started(tmp_path, embedded_port=str(port))
    workers.append(started)
    deadline = time.monotonic() + 60
    while not any(word in line for line in started.lines):
        assert started.process.poll() is None, started.lines
        assert time.monotonic() < deadline, started.lines
        time.sleep(0.05)  # polls the reader thread's lines; the event is the line itself
    line = next(line for line in started.lines if word in line)
    assert line.startswith("{") and json.loads(line)["event"] == word, (
        f"the first line holding {word!r} is not the worker's own: {line!r}"
    )
    assert check(port) == 0


def test_a_second_start_in_the_same_data_directory_is_refused_in_one_line_leaving_the_first(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """With the first worker's embedded server up, a start on the same database (another port,
    then the same port) exits 1 with one line naming the holder and the --nats-url to add a
    worker instead, as docs/operating.md shows; the first still answers `check`, and a worker
    started with that --nats-url serves beside it."""
    first_port, other_port = free_port(), free_port()
    first = Worker(tmp_path, "--db", "data/memory.db", embedded_port=str(first_port))
    workers.append(first)
    first.wait_for("worker.started")
    url = f"nats://127.0.0.1:{first_port}"
    expected = (
        f"memory-worker: data/nats is in use by the worker with pid {first.process.pid}, "
        f"serving on {url}; to add a worker beside it, start this one with --nats-url {url}"
    )
    for port in (other_port, first_port):
        second = refuse(tmp_path, "--db", "data/memory.db", embedded_port=str(port))
        assert (second.returncode, second.stderr.splitlines()) == (1, [expected])
    assert not accepts(other_port)
    shown = re.sub(r"pid \d+", f"pid {first.process.pid}", documented_refusal())
    assert shown == expected.replace(str(first_port), "4222")
    assert first.process.poll() is None and check(first_port) == 0
    added = Worker(tmp_path, "--db", "data/memory.db", "--nats-url", url)
    workers.append(added)
    added.wait_for("worker.started")


def test_the_next_start_stops_the_embedded_server_a_killed_worker_left_behind(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """After SIGKILL of a worker its nats-server runs on; the next start in that directory (on
    another port) is not refused, stops it, and serves."""
    orphan_port, next_port = free_port(), free_port()
    killed = Worker(tmp_path, "--db", "data/memory.db", embedded_port=str(orphan_port))
    workers.append(killed)
    killed.wait_for("worker.started")
    killed.process.kill()
    killed.process.wait()
    orphan = int((tmp_path / "data" / "nats" / "nats-server.pid").read_text())
    try:
        assert accepts(orphan_port), "the killed worker's server should still be running"
        following = Worker(tmp_path, "--db", "data/memory.db", embedded_port=str(next_port))
        workers.append(following)
        following.wait_for("worker.started")
        assert not accepts(orphan_port)
    finally:
        with contextlib.suppress(ProcessLookupError):  # stopped by the start, as it should be
            os.kill(orphan, signal.SIGKILL)
    assert any('"nats.embedded_orphan_stopped"' in line for line in following.lines)
    assert check(next_port) == 0


def test_workers_with_their_data_in_different_directories_run_side_by_side(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """Each directory has its own lock: two embedded workers, one per directory and port. A
    third directory on a port already taken is refused in one line naming both ways out."""
    ports = [free_port(), free_port()]
    for name, port in zip(("one", "two", "three"), ports, strict=False):
        (tmp_path / name).mkdir()
        workers.append(Worker(tmp_path / name, "--db", "data/memory.db", embedded_port=str(port)))
    for worker in workers:
        worker.wait_for("worker.started")
    assert [check(port) for port in ports] == [0, 0]
    (tmp_path / "three").mkdir()
    taken = refuse(tmp_path / "three", "--db", "data/memory.db", embedded_port=str(ports[0]))
    [line] = taken.stderr.splitlines()
    assert taken.returncode == 1 and line.startswith(f"memory-worker: port {ports[0]} ")
    assert f"--nats-url nats://127.0.0.1:{ports[0]}" in line and "EMBEDDED_PORT" in line
    assert check(ports[0]) == 0


def test_run_against_an_unreachable_nats_says_so_calmly_creates_nothing_and_exits_1(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """A dead --nats-url: one `nats.unreachable` warning naming the server, the failure and what
    to do (not one per attempt, every half second), no database file or folder, and after the
    reconnect budget exit 1 with one line naming the server and the budget's variable."""
    url = f"nats://127.0.0.1:{free_port()}"
    worker = Worker(
        tmp_path, "--nats-url", url, "--db", "data/memory.db", nats_reconnect_budget="4"
    )
    workers.append(worker)
    started = time.monotonic()
    code, lines = worker.exit(timeout=30)
    assert code == 1 and 4 <= time.monotonic() - started < 20, lines
    assert len(lines) == 2, lines
    warning = json.loads(lines[0])
    assert warning["event"] == "nats.unreachable" and warning["level"] == "warning"
    assert warning["url"] == url and warning["error"] == "connection refused"
    assert "--nats-url" in warning["hint"]
    assert lines[1].startswith(f"memory-worker: cannot reach NATS at {url} (connection refused)")
    assert "MEMORY_WORKER_NATS_RECONNECT_BUDGET" in lines[1]
    assert list(tmp_path.iterdir()) == []


def test_a_worker_whose_nats_stays_gone_past_its_budget_exits_1(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """The server stops under a running worker: a warning that the connection is lost, at most
    one `nats.unreachable`, and exit 1 once the budget is spent, saying why in its last line."""
    port = free_port()
    server = subprocess.Popen(
        [server_binary(), "-a", "127.0.0.1", "-p", str(port)], stderr=subprocess.DEVNULL
    )
    try:
        url = f"nats://127.0.0.1:{port}"
        budget = {"nats_reconnect_budget": "3", "ingest": "false"}
        worker = Worker(tmp_path, "--nats-url", url, "--db", "memory.db", **budget)
        workers.append(worker)
        worker.wait_for("worker.started")
        server.terminate()
        server.wait(10)
        stopped = time.monotonic()
        code, lines = worker.exit(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert code == 1 and 3 <= time.monotonic() - stopped < 20, lines
    events = [json.loads(line)["event"] for line in lines[:-1]]
    assert events.count("nats.unreachable") <= 1 and "nats.disconnected" in events, lines
    assert events[-1] == "worker.stopped"
    assert lines[-1].startswith(f"memory-worker: cannot reach NATS at {url}")
    assert "MEMORY_WORKER_NATS_RECONNECT_BUDGET" in lines[-1]
