"""Adding a trigger is one row, its structs and one pure handler: dispatch supplies the time,
runs the handler on the writer, fills `durationMs`, and maps its errors to the NATS service error
headers; nats.micro groups make its subject and endpoint name (the rest of a toy trigger's
reach: tests/test_toy_trigger.py)."""

from __future__ import annotations

import inspect

import apsw
import msgspec
import nats

from schema.base import AgentId, Reply, TriggerRequest
from schema.errors import InvalidRequest
from worker.app import App
from worker.bus import MemoryService
from worker.dispatch import Dispatcher
from worker.registry import BY_TRIGGER
from worker.route import Route
from worker.telemetry import Telemetry
from worker.writes import requested


class EchoRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    text: str


class EchoReply(Reply, frozen=True):
    text: str
    at: int
    agents: int
    duration_ms: float


def echo(conn: apsw.Connection, req: EchoRequest, *, now: int) -> EchoReply:
    if req.text == "refuse":
        raise InvalidRequest("invalid request: `text` may not be `refuse` - at `$.text`")
    [(agents,)] = conn.execute("SELECT count(DISTINCT agent_id) FROM memories").fetchall()
    return EchoReply(text=req.text, at=now, agents=int(str(agents)), duration_ms=0.0)


ECHO = Route(
    "memory::toy::echo",
    EchoRequest,
    reply_type=EchoReply,
    write=requested(EchoRequest, echo),
    timed=True,
)


async def test_a_toy_trigger_is_a_row_structs_and_a_pure_handler(
    nats_url: str, worker: App
) -> None:
    """A route built here from a struct and a pure handler is served at the subject its groups
    make, answers with the time and durationMs filled, and refuses with the service error
    headers."""
    assert worker.services is not None
    services = worker.services
    dispatcher = Dispatcher(services, [ECHO], Telemetry())  # counters of its own
    service = MemoryService(worker.nc, dispatcher, "toy.")
    await service.start((ECHO,), {})
    nc = await nats.connect(nats_url)
    try:
        assert ECHO.subject("toy.") == "toy.memory.toy.echo"
        before = services.clock()
        msg = await nc.request(ECHO.subject("toy."), b'{"agentId":"a","text":"hi"}', timeout=5)
        assert not (msg.headers or {}).get("Nats-Service-Error-Code")
        reply = msgspec.json.decode(msg.data)
        assert reply["text"] == "hi" and reply["agents"] == 0
        assert before <= reply["at"] <= services.clock()
        assert reply["durationMs"] > 0

        refused = await nc.request(
            ECHO.subject("toy."), b'{"agentId":"a","text":"refuse"}', timeout=5
        )
        assert (refused.headers or {})["Nats-Service-Error-Code"] == "400"
        assert msgspec.json.decode(refused.data)["error"]["code"] == "invalid_request"

        malformed = await nc.request(ECHO.subject("toy."), b'{"agentId":"a"}', timeout=5)
        assert (malformed.headers or {})["Nats-Service-Error-Code"] == "400"

    finally:
        await nc.close()
        await service.stop(timeout=5)


def test_the_registry_names_endpoints_and_subjects_from_the_trigger_parts() -> None:
    """`memory::kg::add` is the endpoint `add` in the groups memory -> kg, at memory.kg.add."""
    route = BY_TRIGGER["memory::kg::add"]
    assert (route.groups, route.endpoint) == (("memory", "kg"), "add")
    assert route.subject() == "memory.kg.add"
    assert route.subject("prod.") == "prod.memory.kg.add"
    assert BY_TRIGGER["memory::store"].subject("a.b.") == "a.b.memory.store"


async def test_endpoints_are_named_in_their_groups_in_srv_info(nats_url: str, worker: App) -> None:
    """$SRV.INFO lists `memory::kg::add` as the endpoint `add` at memory.kg.add, with its
    trigger in the metadata."""
    nc = await nats.connect(nats_url)
    try:
        msg = await nc.request("$SRV.INFO.memory", b"", timeout=5)
    finally:
        await nc.close()
    endpoints = {e["metadata"]["trigger"]: e for e in msgspec.json.decode(msg.data)["endpoints"]}
    assert set(endpoints) == set(BY_TRIGGER)
    assert (endpoints["memory::kg::add"]["name"], endpoints["memory::kg::add"]["subject"]) == (
        "add",
        "memory.kg.add",
    )
    assert endpoints["memory::store"]["subject"] == "memory.store"


def test_every_listing_with_a_cursor_pages_within_a_budget_and_a_413_names_a_request_key() -> None:
    """A trigger whose request has a cursor is a paged read whose handler takes the reply's
    byte budget; the key a 413 names for a reply too large is one its request has."""
    paged = {route.trigger for route in BY_TRIGGER.values() if route.paged}
    assert {"memory::list", "memory::session::get", "memory::kv::list"} <= paged
    assert {"memory::task::list", "memory::audit"} <= paged
    for route in BY_TRIGGER.values():
        if route.paged:
            assert route.read is not None, route.trigger
            assert "budget" in inspect.signature(route.read).parameters, route.trigger
        if route.bounded_by is not None:
            keys = {field.encode_name for field in msgspec.structs.fields(route.request_type)}
            assert route.bounded_by in keys, route.trigger
