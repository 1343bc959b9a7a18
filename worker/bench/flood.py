"""One tenant's flood, in a process of its own: `lanes` recalls with long queries kept in
flight until SIGTERM, then one line of JSON on stdout (answers, refusals, timeouts).

A lane refused with 503 waits `backoff` before its next request, as a client that retries
would; it does not turn a refusal into a tight loop. Run by `bench --fairness`
(worker/bench/fairness.py) so that its encoding and its replies do not share an event loop with
the requests being timed.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import msgspec
import nats
from nats.errors import TimeoutError as NatsTimeout

from worker.bench.corpus import Corpus
from worker.outgoing import error_reply


def long_query(kib: int, seed: int) -> str:
    """English words up to `kib` KiB: a query at the size limit (MEMORY_WORKER_MAX_QUERY_BYTES)."""
    corpus = Corpus(seed=seed)
    words: list[str] = []
    size = 0
    while size < kib * 1024:
        text = corpus.text(8, 40)
        words.append(text)
        size += len(text) + 1
    return " ".join(words)[: kib * 1024].rstrip()


async def flood(url: str, agent: str, lanes: int, kib: int, backoff: float) -> dict[str, int]:
    nc = await nats.connect(url, allow_reconnect=False)
    counts = {"answered": 0, "refused": 0, "failed": 0, "timeouts": 0}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    bodies = [
        msgspec.json.encode({"agentId": agent, "query": long_query(kib, seed)})
        for seed in range(16)
    ]

    async def lane(number: int) -> None:
        sent = number
        while not stop.is_set():
            sent += 1
            try:
                reply: Any = await nc.request("memory.recall", bodies[sent % 16], timeout=60)
            except NatsTimeout:
                counts["timeouts"] += 1
                continue
            error = error_reply(reply)
            if error is None:
                counts["answered"] += 1
            elif error.startswith("503"):
                counts["refused"] += 1
                await asyncio.sleep(backoff)
            else:
                counts["failed"] += 1

    tasks = [asyncio.create_task(lane(n)) for n in range(lanes)]
    print("flooding", flush=True)  # the bench's flooded phase starts on this line (stdout)
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await nc.close()
    return counts


if __name__ == "__main__":
    url, agent, lanes, kib, backoff = sys.argv[1:6]
    found = asyncio.run(flood(url, agent, int(lanes), int(kib), float(backoff)))
    print(json.dumps(found), flush=True)
