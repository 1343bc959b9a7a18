"""What tests share besides fixtures: a small client that speaks the wire contract."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec


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
