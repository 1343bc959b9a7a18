"""What a request over every agent gets from the partitions that hold them, added up into one
reply: counts summed, usage groups merged by key, and the audit as one listing, oldest first,
whose cursor says how far each partition has been read. Each is a row's way of adding up
(`Scope.every`, worker/route.py): `(request, partitions, ask, budget) -> reply`. Each partition
gets the request as dispatch scoped it, its caller's grants included (schema.base.OverAgents),
so every partition keeps to them in its own SQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar, cast

import apsw
import msgspec
from msgspec import UNSET

from handlers.agents import cursor_scope
from handlers.audit import audit_reply
from handlers.cursors import decode_cursor, encode_cursor
from handlers.paging import fitting_page
from schema.agents import AgentsReply, AgentsRequest, AgentSummary
from schema.life import AuditEvent, AuditReply, AuditRequest
from schema.usage import UsageGroup, UsageQueryReply, UsageTotals
from worker.readers import Readers
from worker.route import Ask

DONE = -1  # a partition whose audit has been read to its end
T = TypeVar("T")


async def counts_added_up(request: Any, partitions: int, ask: Ask, budget: int) -> Any:
    """Every partition asked the same request; their counts added up (`added_up`)."""
    replies = await ask(dict.fromkeys(range(partitions), request))
    return added_up([replies[k] for k in range(partitions)])


async def usage_merged(request: Any, partitions: int, ask: Ask, budget: int) -> UsageQueryReply:
    """Every partition asked the same usage query; their groups merged (`usage_added_up`)."""
    replies = await ask(dict.fromkeys(range(partitions), request))
    return usage_added_up([replies[k] for k in range(partitions)])


def added_up(replies: list[Any]) -> Any:
    """One reply from a partition each: counts summed (a null count stays null only if every
    partition's is), durations the longest, everything else the first partition's (request
    figures and the schedule are the answering shard's)."""
    first = replies[0]
    values: dict[str, Any] = {}
    for name in first.__struct_fields__:
        found = [getattr(reply, name) for reply in replies]
        if any(isinstance(value, bool) for value in found):
            continue
        numbers = [value for value in found if isinstance(value, int | float)]
        if not numbers or len(numbers) + found.count(None) != len(found):
            continue
        if all(isinstance(value, int) for value in numbers):
            values[name] = sum(numbers)
        else:
            values[name] = max(numbers)
    return msgspec.structs.replace(first, **values)


def usage_added_up(replies: list[UsageQueryReply]) -> UsageQueryReply:
    """Usage groups of every partition merged by key (an agent's records are all in one
    partition; a model's or a day's are spread), totals summed."""
    groups: dict[str, list[UsageGroup]] = {}
    for reply in replies:
        for group in reply.groups:
            groups.setdefault(group.key, []).append(group)

    def summed(parts: list[Any]) -> dict[str, Any]:
        return {
            "prompt_tokens": sum(p.prompt_tokens for p in parts),
            "completion_tokens": sum(p.completion_tokens for p in parts),
            "cost_usd": sum(p.cost_usd for p in parts),
            "events": sum(p.events for p in parts),
        }

    return UsageQueryReply(
        groups=[UsageGroup(key=key, **summed(parts)) for key, parts in sorted(groups.items())],
        total=UsageTotals(**summed([reply.total for reply in replies])),
    )


class OwnedReads:
    """The metrics' database counts on a shard: the same read on every partition it owns,
    numbers added up key by key (worker/metrics.py reads dictionaries of counts)."""

    def __init__(self, owned: Callable[[], list[Readers]]) -> None:
        self._owned = owned

    async def run(self, fn: Callable[[apsw.Connection], T]) -> T:
        found = await asyncio.gather(*(readers.run(fn) for readers in self._owned()))
        total: dict[Any, Any] = {}
        for counts in found:
            assert isinstance(counts, dict), "only counts add up"
            for key, value in counts.items():
                total[key] = total.get(key, 0) + value
        return cast(T, total)


def _scopes(req: AuditRequest) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The scope of one partition's audit cursor (handlers/audit.py) and of the whole one."""
    tenant = None if req.tenant is UNSET else req.tenant
    since = None if req.since is UNSET else req.since
    grants = None if req.grants is UNSET else req.grants
    return ("audit", tenant, None, since, grants), ("audit-all", tenant, since, grants)


async def audit_pages(req: AuditRequest, partitions: int, ask: Ask, budget: int) -> AuditReply:
    """One page of every partition's audit, oldest first: each partition is asked for a page
    after what earlier pages took of it; the oldest `limit` events of them all, as many as fit
    in `budget` bytes, are this page (handlers/paging.py)."""
    one, whole = _scopes(req)
    after = [0] * partitions
    if req.cursor is not UNSET:
        after = list(decode_cursor(req.cursor, whole, partitions))
    asked = {
        k: msgspec.structs.replace(
            req, cursor=encode_cursor(one, (after[k],)) if after[k] else UNSET
        )
        for k in range(partitions)
        if after[k] != DONE
    }
    replies = await ask(asked)

    def key(event: AuditEvent, k: int) -> tuple[int, int, int]:
        return (event.at, k, event.seq)

    events = sorted(
        ((event, k) for k, reply in replies.items() for event in reply.events),
        key=lambda pair: key(*pair),
    )
    # A partition that has more than it sent (its page ended at `limit` or at the budget) may
    # hold events older than another's later ones: none past its last may be taken yet.
    unread = [key(r.events[-1], k) for k, r in replies.items() if r.next_cursor and r.events]
    if unread:
        events = [pair for pair in events if key(*pair) <= min(unread)]
    # Where each partition stands after the page's first n + 1 events: read to its end once
    # the page holds all it replied and it said there is no more.
    positions: list[list[int]] = []
    taken = dict.fromkeys(replies, 0)
    for event, k in events[: req.limit]:
        after[k] = event.seq
        taken[k] += 1
        positions.append(
            [
                DONE if p in replies and _read_out(replies[p], taken[p]) else position
                for p, position in enumerate(after)
            ]
        )

    def cursor_after(n: int) -> str | None:
        if all(position == DONE for position in positions[n]):
            return None
        return encode_cursor(whole, tuple(positions[n]))

    return fitting_page(
        [event for event, _ in events], req.limit, budget, audit_reply, cursor_after, "event"
    )


def _read_out(reply: AuditReply, taken: int) -> bool:
    return reply.next_cursor is None and taken == len(reply.events)


async def agents_merged(req: AgentsRequest, partitions: int, ask: Ask, budget: int) -> AgentsReply:
    """One page of a tenant's agents from every partition: an agent lives in one partition, and
    an agents cursor holds the last agent id, so each partition is asked from the same cursor
    and the least `limit` ids of their pages are this page. A partition whose page ended early
    (at `limit` or its budget) may hold ids past its last: none past the least such last is
    taken yet."""
    replies = await ask(dict.fromkeys(range(partitions), req))
    found = sorted(
        (agent for reply in replies.values() for agent in reply.agents),
        key=lambda agent: agent.agent_id,
    )
    unread = [r.agents[-1].agent_id for r in replies.values() if r.next_cursor and r.agents]
    if unread:
        found = [agent for agent in found if agent.agent_id <= min(unread)]
    more = bool(unread) or len(found) > req.limit

    def cursor_after(n: int) -> str | None:
        if n == min(req.limit, len(found)) - 1 and not more:
            return None
        return encode_cursor(cursor_scope(req), (found[n].agent_id,))

    def reply(agents: list[AgentSummary], cursor: str | None) -> AgentsReply:
        return AgentsReply(agents=agents, next_cursor=cursor)

    return fitting_page(found, req.limit, budget, reply, cursor_after, "agent")
