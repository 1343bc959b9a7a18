"""Evict and consolidate as bounded chunks on the writer, so maintenance never stalls traffic.

Each decides on a reader (one snapshot, off the writer thread) and applies its decision in chunks
of CHUNK memories, one writer job each. The next chunk is queued only once the previous one has
committed, so a store or recall that arrives meanwhile waits for at most one chunk.

Consolidation's merging (handlers/merge.py) comes after its decay, agent by agent: each agent's
groups are decided on a reader, then applied a chunk of groups per writer job.

Neither is all-or-nothing (the contract does not ask it): a crash part-way leaves the chunks
already committed applied. Evicting again finishes the job (what remains still matches); the
rest of an interrupted decay waits for the next consolidation.

Their rows, and what operators are told of them, are in worker/triggers/maintenance.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial
from typing import TypeVar

import apsw
import msgspec
from msgspec import UNSET

from handlers.audit import purge as purge_audit
from handlers.consolidate import DecayPlan, decay_range, decayed_changes, plan_decay
from handlers.evict import (
    Doomed,
    Reason,
    count_reasons,
    delete_doomed,
    evict_reply,
    evicted_changes,
    plan_eviction,
    scope_of,
)
from handlers.ingested import purge_keys
from handlers.merge import (
    Group,
    Merged,
    apply_merges,
    count_removed,
    find_groups,
    merge_agents,
    merged_changes,
    read_candidates,
)
from schema.base import Agent
from schema.memory import DAY_MS, ConsolidateReply, ConsolidateRequest, EvictReply, EvictRequest
from worker.services import Services
from worker.writes import Write, commit

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
    totals: dict[Reason, int] = {"purged": 0, "stale": 0, "low_confidence": 0, "over_cap": 0}
    for part in chunks(plan.doomed):
        deleted = await commit(s, "memory::evict", EVICT_CHUNK, Chunk(list(part)))
        for reason, count in count_reasons(deleted).items():
            totals[reason] += count
    scope, params = scope_of(req)
    retention = AuditRetention(now - s.config.audit_retention * DAY_MS, scope, list(params))
    await commit(s, AUDIT_RETENTION, PURGE_AUDIT, retention)
    return evict_reply(totals, dry_run=False)


async def consolidate(s: Services, req: ConsolidateRequest) -> ConsolidateReply:
    now = s.clock()
    plan = await s.readers.run(lambda conn: plan_decay(conn, req, now=now, chunk=CHUNK))
    decayed = 0
    for lo, hi in plan.ranges:
        per_agent = await commit(s, "memory::consolidate", DECAY, Decay(plan, lo, hi))
        decayed += sum(per_agent.values())
    merged = 0 if req.merge_threshold is UNSET else await merge(s, req, req.merge_threshold)
    return ConsolidateReply(memories_decayed=decayed, memories_merged=merged, duration_ms=0.0)


async def merge(s: Services, req: ConsolidateRequest, threshold: float) -> int:
    """After decay, agent by agent: read its candidates on a reader and group them on a thread
    of their own (seconds of numpy for 100k memories, which should not hold a reader), then
    apply the groups in chunks of about CHUNK memories; how many memories were removed."""
    removed = 0
    for agent in await s.readers.run(lambda conn: merge_agents(conn, req)):
        kinds = await s.readers.run(partial(read_candidates, agent=agent))
        groups = await asyncio.to_thread(find_groups, agent, kinds, threshold)
        for part in group_chunks(groups):
            removed += count_removed(await commit(s, MERGE, MERGE_CHUNK, Merges(part)))
    return removed


def group_chunks(groups: Sequence[Group], size: int = CHUNK) -> list[list[Group]]:
    """Whole groups, about `size` memories per chunk (a larger group makes a chunk alone)."""
    parts: list[list[Group]] = [[]]
    filled = 0
    for group in groups:
        if parts[-1] and filled + len(group.merged) + 1 > size:
            parts.append([])
            filled = 0
        parts[-1].append(group)
        filled += len(group.merged) + 1
    return [part for part in parts if part]


class Chunk(msgspec.Struct, frozen=True):
    """Memories an eviction decided to remove, applied in one transaction (the chunk's
    decision: a shard logs it and replays it with the same apply)."""

    doomed: list[Doomed]


class AuditRetention(msgspec.Struct, frozen=True):
    before: int
    scope: str
    params: list[str]


class Merges(msgspec.Struct, frozen=True):
    """Groups of near-duplicates a consolidation decided to merge, applied in one transaction."""

    groups: list[Group]


class Decay(msgspec.Struct, frozen=True):
    plan: DecayPlan
    lo: int
    hi: int


EVICT_CHUNK: Write[Chunk, list[Doomed]] = Write(
    decision=Chunk,
    decide=lambda conn, chunk, now, _: chunk,
    apply=lambda conn, chunk: delete_doomed(conn, chunk.doomed),
    reply=lambda chunk, deleted: deleted,
    changes=lambda chunk, deleted: evicted_changes(deleted),
)


# Not a trigger of its own: the audit's retention, applied by every eviction.
def purge_retained(conn: apsw.Connection, before: int, scope: str, params: tuple[str, ...]) -> int:
    """The audit's rows past the retention, and the keys of ingested messages as old (those
    of a stream deleted before its ack floor passed them: handlers/ingested.py); how many
    audit rows."""
    purge_keys(conn, before, scope, params)
    return purge_audit(conn, before, scope, params)


AUDIT_RETENTION = "memory::evict:audit-retention"
PURGE_AUDIT: Write[AuditRetention, int] = Write(
    decision=AuditRetention,
    decide=lambda conn, retention, now, _: retention,
    apply=lambda conn, r: purge_retained(conn, r.before, r.scope, tuple(r.params)),
    reply=lambda retention, purged: purged,
    changes=lambda retention, purged: (),
)
DECAY: Write[Decay, dict[Agent, int]] = Write(
    decision=Decay,
    decide=lambda conn, decay, now, _: decay,
    apply=lambda conn, d: decay_range(conn, d.plan, d.lo, d.hi),
    reply=lambda decay, per_agent: per_agent,
    changes=lambda decay, per_agent: decayed_changes(per_agent),
)
# Not a trigger of its own: consolidation's merging (audited under memory::consolidate).
MERGE = "memory::consolidate:merge"
MERGE_CHUNK: Write[Merges, list[Merged]] = Write(
    decision=Merges,
    decide=lambda conn, merges, now, _: merges,
    apply=lambda conn, merges: apply_merges(conn, merges.groups),
    reply=lambda merges, done: done,
    changes=lambda merges, done: merged_changes(done),
)
