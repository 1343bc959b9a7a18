"""Who is asking (contract section 15): the caller's tenant and user, and what they may name.

With MEMORY_WORKER_TENANCY=account a tenant is a NATS account. The server stamps every request
that crosses a service import with `Nats-Request-Info` (the caller's account, and with
`share: true` its user), replacing whatever header the client sent, so a tenant cannot claim
another account. A request without the header came from inside the worker's own account
(operators, the CLI) and is administrative, as is the scheduler, and a request stamped with the
worker's own account. An administrative request names the tenant it acts in; a tenant's request
acts in its own tenant and may not name one.

A user with grants (MEMORY_WORKER_GRANTS) may name only the agents they match, and a request
over many agents (schema.base.OverAgents: maintenance, stats, audit, the board's listing, usage
totals) carries the user's patterns to its handler, whose SQL keeps to them (handlers/grants.py);
it is 403 when they can match no agent at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import msgspec
from msgspec import UNSET

from handlers.grants import can_match
from schema.base import OverAgents, TriggerRequest
from schema.errors import Forbidden, InvalidRequest
from worker.config import Config, grant_patterns

REQUEST_INFO = "Nats-Request-Info"
GRANTS_NOT_ASKED = (
    "grants: set by the worker from MEMORY_WORKER_GRANTS, never by a request - at `$.grants`"
)


class RequestInfo(msgspec.Struct, frozen=True):
    """The part of the server's `Nats-Request-Info` header the worker reads."""

    acc: str = ""
    user: str = ""


_decode_info = msgspec.json.Decoder(RequestInfo).decode


@dataclass(frozen=True)
class Caller:
    """`tenant` None: an administrative caller (the worker's account, the scheduler, the CLI)."""

    tenant: str | None = None
    user: str | None = None

    @property
    def requester(self) -> str | None:
        """`account/user` as the audit names a caller (`account/` when the import does not
        share the user); None when the bus did not say (an administrative call)."""
        return None if self.tenant is None else f"{self.tenant}/{self.user or ''}"


ADMIN = Caller()


def caller_of(headers: Mapping[str, str] | None, own_account: str) -> Caller:
    """The caller a request's headers name. Only a request without the header is administrative
    (it came from inside the worker's own account); an empty or unreadable one is refused
    rather than read as administrative: only the server (or the worker's own account) writes
    it."""
    raw = (headers or {}).get(REQUEST_INFO)
    if raw is None:
        return ADMIN
    try:
        info = _decode_info(raw)
    except msgspec.DecodeError:
        raise Forbidden(f"unreadable {REQUEST_INFO} header") from None
    if not info.acc:
        raise Forbidden(f"{REQUEST_INFO} header names no account")
    if info.acc == own_account:
        return ADMIN
    return Caller(tenant=info.acc, user=info.user or None)


class Grants:
    """Per-user agent patterns inside a tenant (MEMORY_WORKER_GRANTS): a JSON object from
    `account/user` (or `account/*`, for that account's users without an entry of their own) to
    a list of fnmatch patterns over agent ids. A user matched by no entry may name any agent of
    its tenant."""

    def __init__(self, patterns: Mapping[str, list[str]] | None = None) -> None:
        self._patterns = dict(patterns or {})

    def patterns(self, caller: Caller) -> list[str] | None:
        """The caller's agent patterns; None when nothing limits it (an administrative caller,
        a user matched by no entry)."""
        if caller.tenant is None:
            return None
        patterns = self._patterns.get(f"{caller.tenant}/{caller.user or ''}")
        if patterns is None:
            patterns = self._patterns.get(f"{caller.tenant}/*")
        return patterns

    def allows(self, caller: Caller, agent_id: str) -> bool:
        patterns = self.patterns(caller)
        return patterns is None or any(fnmatchcase(agent_id, p) for p in patterns)


def load_grants(config: Config) -> Grants:
    return Grants(grant_patterns(config))


def scoped(
    request: TriggerRequest,
    caller: Caller,
    *,
    all_tenants: bool,
    grants: Grants,
    own_account: str,
) -> TriggerRequest:
    """The request as the handler gets it under tenancy: acting in the caller's tenant, or in
    the one an administrative caller named; refused when the caller may not ask it. The
    worker's own account is never a tenant (its requests are administrative), so no request
    acts in a tenant of that name, whether named or taken from an ingest subject."""
    if getattr(request, "grants", UNSET) is not UNSET:
        raise InvalidRequest(GRANTS_NOT_ASKED)
    if own_account in (caller.tenant, request.tenant):
        raise InvalidRequest(
            f"tenant: {own_account!r} is the worker's own account, not a tenant - at `$.tenant`"
        )
    if caller.tenant is None:
        if request.tenant is UNSET and not all_tenants:
            raise InvalidRequest(
                "tenant: required on an administrative request (one from the worker's own "
                "account) for this trigger - at `$.tenant`"
            )
        return request
    if request.tenant is not UNSET:
        raise Forbidden("tenant: only the worker's own account may name a tenant - at `$.tenant`")
    # The agent a request acts as: `agentId`, or the poster of a task (`createdBy`).
    for field, name in (("agent_id", "agentId"), ("created_by", "createdBy")):
        agent_id: Any = getattr(request, field, None)
        if isinstance(agent_id, str) and not grants.allows(caller, agent_id):
            raise Forbidden(f"{name}: {agent_id!r} is not granted to this user - at `$.{name}`")
    patterns = grants.patterns(caller)
    if patterns is not None and isinstance(request, OverAgents):
        if not can_match(patterns):
            raise Forbidden(
                "agentId: this user is granted no agent (MEMORY_WORKER_GRANTS) - at `$.agentId`"
            )
        return msgspec.structs.replace(request, tenant=caller.tenant, grants=list(patterns))
    return msgspec.structs.replace(request, tenant=caller.tenant)


def untenanted(request: TriggerRequest) -> TriggerRequest:
    """With tenancy off, every request acts in the default tenant and may not name another."""
    if getattr(request, "grants", UNSET) is not UNSET:
        raise InvalidRequest(GRANTS_NOT_ASKED)
    if request.tenant is not UNSET:
        raise InvalidRequest(
            "tenant: tenancy is off (MEMORY_WORKER_TENANCY=none); omit it - at `$.tenant`"
        )
    return request
