"""A trivial NATS responder in its own process: the round-trip floor the bench compares to."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import nats


async def serve(url: str) -> None:
    nc = await nats.connect(url)

    async def echo(msg: Any) -> None:
        await msg.respond(msg.data)

    await nc.subscribe("bench.echo", cb=echo)
    await nc.flush()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
