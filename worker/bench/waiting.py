"""Waiting for what the bench starts: a free port for its NATS server, and the worker processes
and the echo responder answering."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import nats


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_for_responder(nc: Any, subject: str, timeout: float = 60.0) -> None:
    """Until something answers on subject: the worker's service, and the echo process, which
    may subscribe after a worker given by --nats-url already answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await nc.request(subject, b"{}", timeout=1.0)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing answered on {subject} in time") from None
            await asyncio.sleep(0.2)


async def wait_for_workers(url: str, count: int, timeout: float = 60.0) -> None:
    """Until `count` workers answer `$SRV.PING.memory` (each instance answers it)."""
    nc = await nats.connect(url)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            inbox = nc.new_inbox()
            replies = await nc.subscribe(inbox)
            await nc.publish("$SRV.PING.memory", b"", reply=inbox)
            await asyncio.sleep(0.5)
            await replies.unsubscribe()
            if replies.pending_msgs >= count:
                return
        raise RuntimeError(f"{count} workers did not answer in time")
    finally:
        await nc.close()
