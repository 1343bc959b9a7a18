"""The one table of triggers: name, request struct, and how it executes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from schema.base import Request
from schema.kg import KgAddRequest, KgQueryRequest
from schema.memory import ConsolidateRequest, EvictRequest, RecallRequest, StoreRequest
from schema.session import CompactRequest, RepairRequest, SessionListRequest
from schema.stats import StatsRequest
from worker import maintenance, routes
from worker.services import Services


@dataclass(frozen=True)
class Route:
    trigger: str
    request_type: type[Request]
    execute: Callable[[Services, Any], Awaitable[Any]]
    # After a success, what operators are told beyond `trigger.handled` (maintenance counts).
    report: Callable[[Services, str, str, Any], None] | None = None

    @property
    def endpoint(self) -> str:
        """The nats.micro endpoint name: `memory::kg::add` -> `kg_add`."""
        return "_".join(self.trigger.split("::")[1:])

    def subject(self, prefix: str = "") -> str:
        return prefix + self.trigger.replace("::", ".")


ROUTES: tuple[Route, ...] = (
    Route("memory::store", StoreRequest, routes.store),
    Route("memory::recall", RecallRequest, routes.recall),
    Route("memory::evict", EvictRequest, maintenance.evict, maintenance.report),
    Route("memory::consolidate", ConsolidateRequest, maintenance.consolidate, maintenance.report),
    Route("memory::kg::add", KgAddRequest, routes.kg_add),
    Route("memory::kg::query", KgQueryRequest, routes.kg_query),
    Route("memory::session::list", SessionListRequest, routes.session_list),
    Route("memory::session::compact", CompactRequest, routes.session_compact),
    Route("memory::session::repair", RepairRequest, routes.session_repair),
    Route("memory::stats", StatsRequest, routes.stats),
)
BY_TRIGGER = {route.trigger: route for route in ROUTES}
