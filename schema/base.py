"""Field types and struct bases shared by every trigger's request and reply.

Requests are frozen, keyword-only, camelCase on the wire and refuse unknown keys; `null` is the
wrong type for every key, so optional keys are `UNSET` when omitted rather than `None`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

# An id (agent, session, entity, relation type) is a key that other systems compare, log and
# show: no control characters (Unicode Cc), no line or paragraph separators, none of the
# invisible zero-width and bidirectional marks that make two ids look alike or reorder text
# (ZWJ and ZWNJ stay allowed: emoji and several scripts need them), and no whitespace at either
# end (so never whitespace only). `\Z`, not `$`, which would let a trailing newline through.
ID_PATTERN = (
    r"\A(?!\s)[^\x00-\x1f\x7f-\x9f\u2028\u2029\u200b\u200e\u200f\u202a-\u202e\u2060"
    r"\u2066-\u2069\ufeff]*(?<!\s)\Z"
)
ID_RULE = (
    "an id: 1-256 characters, no control or invisible formatting characters, "
    "no whitespace at either end"
)
# How msgspec words a refused id, and the words dispatch puts in their place.
ID_REFUSAL = f"`str` matching regex {ID_PATTERN!r}"
Id = Annotated[str, msgspec.Meta(min_length=1, max_length=256, pattern=ID_PATTERN)]
AgentId = Id
SessionId = Id
EntityId = Id
# What databases written before ids were checked may hold: export and import move it as is.
StoredId = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
# Milliseconds since the epoch, up to the end of year 9999.
Millis = Annotated[int, msgspec.Meta(ge=0, le=253_402_300_799_999)]
Role = Literal["user", "assistant", "system"]
# A tenant is a NATS account name as the server stamps it in `Nats-Request-Info` (`acc`): no
# whitespace and none of `.`, `*`, `>`, which NATS forbids there, nor the control and invisible
# characters an id may not hold. '' is the default tenant: what
# was written with tenancy off, or before tenants existed.
TENANT_PATTERN = (
    r"\A[^\s.*>\x00-\x1f\x7f-\x9f\u2028\u2029\u200b\u200e\u200f\u202a-\u202e\u2060"
    r"\u2066-\u2069\ufeff]*\Z"
)
Tenant = Annotated[str, msgspec.Meta(max_length=256, pattern=TENANT_PATTERN)]
DEFAULT_TENANT = ""


class Request(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"
):
    pass


class Reply(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pass


class TriggerRequest(Request, frozen=True, kw_only=True):
    """A trigger's request. `tenant` is named by administrative callers only (section 15);
    dispatch sets it to a tenant caller's account before the handler runs."""

    tenant: Tenant | UnsetType = UNSET


class OverAgents(TriggerRequest, frozen=True, kw_only=True):
    """A request that may act on many agents of its tenant at once (maintenance, stats, audit,
    the task board's listing, usage totals). `grants` is set by the worker, never by a caller:
    the agent patterns of the caller's MEMORY_WORKER_GRANTS entry, which the handler's SQL
    keeps to (handlers/grants.py); unset, every agent of the tenant."""

    grants: list[str] | UnsetType = UNSET


def tenant_of(request: TriggerRequest) -> str:
    """The tenant a request acts in: the default tenant when none was set."""
    return request.tenant if isinstance(request.tenant, str) else DEFAULT_TENANT


# Who a row belongs to: (tenant, agentId), the first two columns of every agent table's keys,
# so SQL reads `WHERE tenant = ? AND agent_id = ?` with `(*agent, ...)`.
Agent = tuple[str, str]


def agent_of(request: TriggerRequest) -> Agent:
    """The agent a request names, in the tenant it acts in."""
    agent_id = getattr(request, "agent_id", None)
    if not isinstance(agent_id, str):
        raise TypeError(f"{type(request).__name__} names no agent")
    return (tenant_of(request), agent_id)
