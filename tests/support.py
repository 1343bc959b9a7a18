"""What tests share besides fixtures: a small client that speaks the wire contract, and a wait
for an event with a deadline."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats.errors

# Malformed requests test_hostile sent and saw refused ("tried", "refused"), in this process;
# the run's summary adds up every xdist worker's (conftest.py).
HOSTILE_TALLY: Counter[str] = Counter()


async def wait_until(
    condition: Callable[[], Any], what: str, timeout: float = 20.0, interval: float = 0.02
) -> Any:
    """Poll condition (a function, or a coroutine function) until it returns something true,
    and return that; fail naming `what` (the event waited for) once `timeout` seconds passed.

    What a test would otherwise sleep for: the wait ends as soon as the event happened, and a
    slow machine gets the whole deadline rather than a guess."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if inspect.isawaitable(found):
            found = await found
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what} (last seen: {found!r})")
        await asyncio.sleep(interval)


async def wait_for_service(nc: Any, timeout: float = 20.0) -> None:
    """Until a worker's service answers a ping on nc (a worker process starting up)."""

    async def answers() -> bool:
        try:
            await nc.request("$SRV.PING.memory", b"", timeout=0.5)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            return False
        return True

    await wait_until(answers, "the worker's service answering a ping", timeout)


@dataclass
class Reply:
    body: Any
    code: str | None
    description: str | None

    @property
    def ok(self) -> bool:
        return self.code is None


class Client:
    def __init__(self, nc: Any, prefix: str = "") -> None:
        self.nc = nc
        self.prefix = prefix

    async def raw(self, trigger: str, data: bytes, timeout: float = 10.0) -> Reply:
        subject = self.prefix + trigger.replace("::", ".")
        msg = await self.nc.request(subject, data, timeout=timeout)
        headers = msg.headers or {}
        return Reply(
            body=msgspec.json.decode(msg.data) if msg.data else None,
            code=headers.get("Nats-Service-Error-Code"),
            description=headers.get("Nats-Service-Error"),
        )

    async def call(self, trigger: str, payload: Any = None, timeout: float = 10.0) -> Reply:
        data = msgspec.json.encode({} if payload is None else payload)
        return await self.raw(trigger, data, timeout)

    async def ok(self, trigger: str, payload: Any = None) -> Any:
        reply = await self.call(trigger, payload)
        assert reply.ok, reply
        return reply.body

    async def store(self, agent: str, content: str, **fields: Any) -> Any:
        return await self.ok("memory::store", {"agentId": agent, "content": content, **fields})

    async def recall(self, agent: str, query: str = "", **fields: Any) -> list[Any]:
        body = await self.ok("memory::recall", {"agentId": agent, "query": query, **fields})
        memories: list[Any] = body["memories"]
        return memories


def damage_table(db_path: str | Path, table: str) -> None:
    """Overwrite the root page of table with garbage, as a failing disk would.

    The WAL is checkpointed into the file first, so that the page read next comes from the
    damaged file and not from the log; connections that have not cached the page see the damage.
    """
    import apsw

    conn = apsw.Connection(str(db_path))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    [(root,)] = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,))
    page_size = int(conn.pragma("page_size"))
    conn.close()
    with open(db_path, "r+b") as file:
        file.seek((int(root) - 1) * page_size)
        file.write(b"\xa5" * page_size)
