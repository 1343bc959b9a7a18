"""The shipped deploy/nats/nats-server.conf, started as written but for its port and JetStream
directory, for tests that check what its accounts and permissions allow."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats
import nats.errors

from tests.conftest import stop_nats, worker_config
from tests.support import Client, wait_until
from tests.test_cli import free_port
from worker.app import App
from worker.embedded import server_binary

CONF = Path(__file__).resolve().parent.parent / "deploy" / "nats" / "nats-server.conf"
# user -> (its password's environment variable, the password the tests give it)
USERS = {
    "worker": "WORKER_PASSWORD",
    "operator": "OPERATOR_PASSWORD",
    "alice": "ALICE_PASSWORD",
    "bob": "BOB_PASSWORD",
    "carol": "CAROL_PASSWORD",
}
PASSWORDS = {variable: f"{user}-secret" for user, variable in USERS.items()}


def password(user: str) -> str:
    return PASSWORDS[USERS[user]]


def rewritten(store: Path, port: int) -> str:
    """The shipped config with the port given, no HTTP port and JetStream under store."""
    text = CONF.read_text(encoding="utf-8")
    for old, new in (
        ("port: 4222", f"port: {port}"),
        ("http_port: 8222", ""),
        ('"/data"', f'"{store}"'),
    ):
        assert old in text, old  # the shipped config changed: the test would test another one
        text = text.replace(old, new)
    return text


@asynccontextmanager
async def shipped_nats(tmp_path: Path) -> AsyncIterator[str]:
    """A server from the shipped config; yields its URL once the worker user can connect."""
    port = free_port()
    conf = tmp_path / "nats.conf"
    conf.write_text(rewritten(tmp_path / "js", port), encoding="utf-8")
    process = subprocess.Popen(
        [server_binary(), "-c", str(conf)],
        env={**os.environ, **PASSWORDS},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"nats://127.0.0.1:{port}"
    try:

        async def worker_connects() -> bool:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) != 0:
                    return False  # not listening yet (nats-py would retry in 2 s itself)
            try:
                probe = await nats.connect(
                    url, user="worker", password=password("worker"), allow_reconnect=False
                )
            except (OSError, nats.errors.Error, TimeoutError):
                return False  # not listening yet
            await probe.close()
            return True

        await wait_until(worker_connects, "the shipped config's server letting the worker in")
        yield url
    finally:
        stop_nats(process)


async def connect_as(url: str, user: str, errors: list[str] | None = None, **options: Any) -> Any:
    """A client of the shipped config as user, with its private inbox prefix (tenant users);
    asynchronous errors (permission violations) are appended to errors."""

    async def note(error: Exception) -> None:
        if errors is not None:
            errors.append(str(error).lower())

    if user not in ("worker", "operator"):
        options.setdefault("inbox_prefix", f"_INBOX_{user}".encode())
    return await nats.connect(
        url, user=user, password=password(user), error_cb=note, allow_reconnect=False, **options
    )


class TenantBus:
    """A worker with MEMORY_WORKER_TENANCY=account on the shipped config, and its users."""

    def __init__(self, url: str, app: App) -> None:
        self.url = url
        self.app = app
        self.errors: dict[str, list[str]] = {}
        self._clients: dict[str, Client] = {}

    async def user(self, name: str) -> Client:
        """The user's client, connected once; its asynchronous errors go to errors[name]."""
        if name not in self._clients:
            errors = self.errors.setdefault(name, [])
            self._clients[name] = Client(await connect_as(self.url, name, errors))
        return self._clients[name]

    async def close(self) -> None:
        for client in self._clients.values():
            await client.nc.close()


@asynccontextmanager
async def tenant_bus(tmp_path: Path, **overrides: Any) -> AsyncIterator[TenantBus]:
    async with shipped_nats(tmp_path) as url:
        config = worker_config(
            url,
            tmp_path / "memory.db",
            nats_user="worker",
            nats_password=password("worker"),
            tenancy="account",
            **overrides,
        )
        app = App(config)
        await app.start()
        bus = TenantBus(url, app)
        try:
            yield bus
        finally:
            await bus.close()
            await app.stop()
