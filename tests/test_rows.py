"""A row of the trigger table (worker/route.py) is checked when it is made: one that carries a
part its kind ignores, or a scope its request cannot follow, does not import, and the error names
the trigger and the part. Each row says where its request goes in sharded mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw
import pytest
from msgspec import UNSET, UnsetType

from schema.agents import AgentsRequest
from schema.base import AgentId, OverAgents, Reply, TriggerRequest
from schema.kv import KvGetRequest
from schema.life import AuditRequest
from schema.memory import StoreRequest
from schema.tasks import TaskClaimRequest
from worker.registry import BY_TRIGGER, ROUTES
from worker.route import TENANT, Route, RowError, Scope, agent_or_every, table
from worker.shards.fanout import counts_added_up
from worker.writes import requested


class Named(TriggerRequest, frozen=True):
    agent_id: AgentId


class Maybe(OverAgents, frozen=True):
    agent_id: AgentId | UnsetType = UNSET


class Paged(TriggerRequest, frozen=True):
    agent_id: AgentId
    cursor: str | UnsetType = UNSET


class Plain(TriggerRequest, frozen=True):
    text: str = ""


class Done(Reply, frozen=True):
    ok: bool = True


def handler(conn: apsw.Connection, req: Any, *, now: int) -> Done:
    return Done()


async def flow(services: Any, req: Any) -> Done:
    return Done()


async def after(services: Any, req: Any, prepared: Any, reply: Any) -> None:
    return None


WRITE = requested(Named, handler)
T = "memory::toy::row"
CASES: list[tuple[Callable[[], Route[Any, Any]], str]] = [
    (lambda: Route(T, Named, reply_type=Done), "needs one of read=, write= and flow="),
    (lambda: Route(T, Named, reply_type=Done, read=handler, write=WRITE), "ignores write="),
    (lambda: Route(T, Named, reply_type=Done, read=handler, ingest=True), "ignores ingest=True"),
    (lambda: Route(T, Named, reply_type=Done, read=handler, after=after), "ignores after="),
    (lambda: Route(T, Named, reply_type=Done, flow=flow, write=WRITE, after=after), "after="),
    (lambda: Route(T, Named, reply_type=Done, write=WRITE, also_logs={"x": WRITE}), "also_logs"),
    (lambda: Route(T, Named, reply_type=Done, flow=flow, ingest=True), "needs the write"),
    (lambda: Route(T, Paged, reply_type=Done, write=WRITE), "must be a read row"),
    (lambda: Route(T, Named, reply_type=Done, read=handler, bounded_by="limit"), "bounded_by"),
    (lambda: Route(T, Named, reply_type=Done, read=handler, timed=True), "durationMs"),
    (lambda: Route(T, Plain, reply_type=Done, read=handler), "names no agent"),
    (lambda: Route(T, Maybe, reply_type=Done, read=handler), "may name no agent"),
    (
        lambda: Route(
            T, Named, reply_type=Done, read=handler, scope=agent_or_every(counts_added_up)
        ),
        "always names one",
    ),
    (
        lambda: Route(T, Named, reply_type=Done, read=handler, scope=Scope("agent", shared=True)),
        "namespace",
    ),
    (
        lambda: Route(T, Plain, reply_type=Done, read=handler, scope=Scope("tenant", shared=True)),
        "one partition",
    ),
]


@pytest.mark.parametrize(("make", "words"), CASES)
def test_a_row_with_a_part_its_kind_ignores_is_refused_naming_the_trigger_and_the_part(
    make: Callable[[], Route[Any, Any]], words: str
) -> None:
    """Each of these rows raises RowError when made: the message names the trigger and why."""
    with pytest.raises(RowError) as refused:
        make()
    assert str(refused.value).startswith(f"{T}: "), refused.value
    assert words in str(refused.value), refused.value


def test_a_table_that_makes_a_trigger_twice_is_refused() -> None:
    """Two rows of one trigger would leave one of them unserved: the table is refused."""
    row = Route(T, Named, reply_type=Done, read=handler)
    with pytest.raises(RowError, match=f"{T}: two rows make it"):
        table((row,), (Route(T, Named, reply_type=Done, write=WRITE),))


def test_every_row_says_where_its_request_goes_in_sharded_mode() -> None:
    """The task board is the tenant's, kv keys the agent's or the tenant's shared ones, and only
    maintenance, stats, audit, usage totals and the agents' listing run over every partition
    without an agent."""
    every = {route.trigger for route in ROUTES if route.scope.every is not None}
    assert every == {
        "memory::evict",
        "memory::consolidate",
        "memory::stats",
        "memory::audit",
        "memory::usage::query",
        "memory::agents",
    }
    tenant = {route.trigger for route in ROUTES if route.scope == TENANT}
    assert tenant == {f"memory::task::{verb}" for verb in ("post", "claim", "complete", "list")}
    assert {route.trigger for route in ROUTES if route.scope.shared} == {
        f"memory::kv::{verb}" for verb in ("set", "get", "delete", "list")
    }
    store, claim = BY_TRIGGER["memory::store"], BY_TRIGGER["memory::task::claim"]
    assert store.scope.home(StoreRequest(tenant="T", agent_id="a", content="x")) == ("T", "a")
    assert claim.scope.home(TaskClaimRequest(tenant="T", agent_id="a")) == ("T", "")
    kv_get = BY_TRIGGER["memory::kv::get"]
    assert kv_get.scope.home(KvGetRequest(namespace="shared", key="k")) == ("", "")
    assert kv_get.scope.home(KvGetRequest(agent_id="a", key="k")) == ("", "a")
    audit = BY_TRIGGER["memory::audit"]
    assert audit.scope.home(AuditRequest()) is None
    assert audit.scope.keeper(AuditRequest(tenant="T")) == ("T", "")
    assert BY_TRIGGER["memory::agents"].scope.home(AgentsRequest(tenant="T")) is None


def test_ingest_and_partition_subjects_are_named_apart_from_the_same_words() -> None:
    """`kg.add` ends the served, the ingest and the partition subject of memory::kg::add."""
    route = BY_TRIGGER["memory::kg::add"]
    assert route.verb == "kg.add"
    assert route.ingest_subject() == "memory.ingest.kg.add"
    assert route.ingest_subject("prod.") == "prod.memory.ingest.kg.add"
    assert route.partition_subject(3, "abc") == "memory.p.3.abc.kg.add"
