"""Evict and consolidate as bounded chunks on the writer, so maintenance never stalls traffic.

Each decides on a reader (one snapshot, off the writer thread) and applies its decision in chunks
of CHUNK memories, one writer job each. The next chunk is queued only once the previous one has
committed, so a store or recall that arrives meanwhile waits for at most one chunk.

Neither is all-or-nothing (the contract does not ask it): a crash part-way leaves the chunks
already committed applied. Evicting again finishes the job (what remains still matches); the
rest of an interrupted decay waits for the next consolidation.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TypeVar

from handlers.consolidate import apply_decay, plan_decay
from handlers.evict import Reason, apply_eviction, evict_reply, plan_eviction
from schema.memory import ConsolidateReply, ConsolidateRequest, EvictReply, EvictRequest
from worker.services import Services

# Memories per writer transaction: about 20 ms of deletes with their session references.
CHUNK = 500
T = TypeVar("T")


def chunks(items: Sequence[T], size: int = CHUNK) -> list[Sequence[T]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


async def evict(s: Services, req: EvictRequest) -> EvictReply:
    now = s.clock()
    plan = await s.readers.run(lambda conn: plan_eviction(conn, req, now=now))
    if req.dry_run:
        return evict_reply(plan.counts(), dry_run=True)
    totals: dict[Reason, int] = {"stale": 0, "low_confidence": 0, "over_cap": 0}
    for part in chunks(plan.doomed):
        counts = await s.writer.run(partial(apply_eviction, doomed=part))
        for reason, count in counts.items():
            totals[reason] += count
    return evict_reply(totals, dry_run=False)


async def consolidate(s: Services, req: ConsolidateRequest) -> ConsolidateReply:
    now = s.clock()
    plan = await s.readers.run(lambda conn: plan_decay(conn, req, now=now, chunk=CHUNK))
    decayed = 0
    for lo, hi in plan.ranges:
        decayed += await s.writer.run(partial(apply_decay, plan=plan, lo=lo, hi=hi))
    return ConsolidateReply(memories_decayed=decayed, memories_merged=0, duration_ms=0.0)
