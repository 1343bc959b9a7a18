"""The Python client (worker/client.py): a typed method for every trigger of the table, each
one answered by a live worker; refusals raised as the worker's error classes, and failures on
the way as the client's own, within the timeout."""

from __future__ import annotations

import asyncio
import socket
import time
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

from schema.agents import AgentsRequest
from schema.context import ContextRequest
from schema.errors import Conflict, InvalidRequest, NotFound, WorkerError
from schema.kg import Entity, KgAddRequest, KgQueryRequest, Relation
from schema.life import (
    AuditRequest,
    DeleteRequest,
    EraseRequest,
    ForgetRequest,
    GetRequest,
    KgDeleteRequest,
    ListRequest,
    SessionGetRequest,
    UnforgetRequest,
    UpdateRequest,
)
from schema.memory import ConsolidateRequest, EvictRequest, RecallRequest, StoreRequest
from schema.session import CompactRequest, RepairRequest, SessionListRequest
from schema.stats import StatsRequest
from schema.switch import ToggleRequest
from tests.conftest import worker_config
from worker.app import App
from worker.client import MemoryClient, Sends
from worker.client_errors import NoWorker, RequestTooLarge, Unreachable, refusal
from worker.registry import ROUTES

CONFIG = worker_config("", Path("unused.db"))  # no credentials, no prefix


def test_each_named_method_is_made_from_its_row_and_named_after_its_trigger() -> None:
    """Each named method of the client is made from a row of the table (its types are the row's)
    and is named after the row's trigger (`memory::kv::set` -> kv_set; memory::list is
    list_memories); any other row is sent with `send` (tests/test_registry.py); and each row's
    reply_type is what its read or flow returns."""
    named = {
        name: sends.route for name, sends in vars(MemoryClient).items() if isinstance(sends, Sends)
    }
    assert set(named.values()) <= set(ROUTES)
    for name, route in named.items():
        made = "_".join(route.trigger.split("::")[1:])
        assert name == ("list_memories" if made == "list" else made), (name, route.trigger)
    for route in ROUTES:
        function = route.read or route.flow
        if function is not None:
            returned = typing.get_type_hints(function)["return"]
            assert returned is route.reply_type, route.trigger


async def test_every_method_is_answered_by_a_live_worker(nats_url: str, worker: App) -> None:
    """Each typed method sends its trigger and decodes the worker's reply as its struct."""
    async with await MemoryClient.connect(nats_url, config=CONFIG) as memory:
        assert (await memory.ping()).name == "memory"
        stored = await memory.store(
            StoreRequest(agent_id="a", content="The deploy key rotates on Fridays", session_id="s")
        )
        assert stored.stored
        other = await memory.store(StoreRequest(agent_id="a", content="Lunch is at noon"))
        assert stored.id is not None and other.id is not None
        found = await memory.recall(RecallRequest(agent_id="a", query="deploy key"))
        assert found.memories[0].id == stored.id
        shown = await memory.context(ContextRequest(agent_id="a", query="deploy key"))
        assert shown.memories[0] == stored.id and "deploy key" in shown.text
        got = await memory.get(GetRequest(agent_id="a", ids=[stored.id, "nope"]))
        assert [m.id for m in got.memories] == [stored.id] and got.missing == ["nope"]
        listed = await memory.list_memories(ListRequest(agent_id="a"))
        assert {m.id for m in listed.memories} == {stored.id, other.id}
        updated = await memory.update(UpdateRequest(agent_id="a", id=stored.id, pinned=True))
        assert updated.memory.pinned
        assert (await memory.forget(ForgetRequest(agent_id="a", ids=[other.id]))).forgotten == 1
        assert (await memory.unforget(UnforgetRequest(agent_id="a", ids=[other.id]))).restored == 1
        assert (await memory.delete(DeleteRequest(agent_id="a", ids=[other.id]))).deleted == 1
        sessions = await memory.session_list(SessionListRequest(agent_id="a"))
        assert [s.id for s in sessions.sessions] == ["s"]
        messages = await memory.session_get(SessionGetRequest(agent_id="a", session_id="s"))
        assert [m.id for m in messages.messages] == [stored.id]
        repaired = await memory.session_repair(RepairRequest(agent_id="a", session_id="s"))
        assert not repaired.repaired
        compacted = await memory.session_compact(CompactRequest(agent_id="a", session_id="s"))
        assert not compacted.compacted
        entity = Entity(id="deploy", type="task", relations=[Relation(target="ops", type="by")])
        assert (await memory.kg_add(KgAddRequest(agent_id="a", entity=entity))).stored
        graph = await memory.kg_query(KgQueryRequest(agent_id="a", entity_id="deploy"))
        assert {e.id for e in graph.entities} == {"deploy", "ops"}
        removed = await memory.kg_delete(KgDeleteRequest(agent_id="a", entity_id="deploy"))
        assert removed.entities == 1
        assert (await memory.evict(EvictRequest(dry_run=True))).dry_run
        consolidated = await memory.consolidate(ConsolidateRequest())
        # The one memory left is pinned and was recalled a moment ago: nothing decays or merges.
        assert (consolidated.memories_decayed, consolidated.memories_merged) == (0, 0)
        assert (await memory.stats(StatsRequest())).memories == 1
        events = await memory.audit(AuditRequest(agent_id="a"))
        assert "memory::forget" in {e.trigger for e in events.events}
        listed_agents = await memory.agents(AgentsRequest(prefix="a"))
        assert [(a.agent_id, a.memories) for a in listed_agents.agents] == [("a", 1)]
        assert (await memory.toggle(ToggleRequest(agent_id="a", enabled=False))).enabled is False
        switched_off = await memory.store(StoreRequest(agent_id="a", content="not kept"))
        assert switched_off.disabled and switched_off.id is None
        assert (await memory.toggle(ToggleRequest(agent_id="a", enabled=True))).enabled
        erased = await memory.erase(EraseRequest(agent_id="a", confirm="a"))
        assert erased.memories == 1
        assert b'"memories":[]' in await memory.request("memory::list", b'{"agentId": "a"}')


async def test_a_refusal_is_raised_as_the_workers_error_class_naming_the_field(
    nats_url: str, worker: App
) -> None:
    """A 400 is InvalidRequest with status, code and a message naming `$.limit`; an unknown
    memory is NotFound; a clash is Conflict; none of them stores anything."""
    async with await MemoryClient.connect(nats_url, config=CONFIG) as memory:
        with pytest.raises(InvalidRequest) as refused:
            await memory.recall(RecallRequest(agent_id="a", limit=0))  # no check on this side
        assert refused.value.status == "400" and refused.value.code == "invalid_request"
        assert "`$.limit`" in refused.value.message
        with pytest.raises(NotFound) as missing:
            await memory.update(UpdateRequest(agent_id="a", id="nope", pinned=True))
        assert missing.value.status == "404" and "nope" in missing.value.message
        first = await memory.store(StoreRequest(agent_id="a", content="one"))
        second = await memory.store(StoreRequest(agent_id="a", content="two"))
        assert second.id is not None
        with pytest.raises(Conflict):
            await memory.update(UpdateRequest(agent_id="a", id=second.id, content="one"))
        with pytest.raises(InvalidRequest):
            await memory.request("memory::store", b'{"agentId": "a"}')
        listed = await memory.list_memories(ListRequest(agent_id="a"))
        assert sorted(m.content for m in listed.memories) == ["one", "two"]
        assert first.id in {m.id for m in listed.memories}


def test_an_error_reply_of_an_unknown_status_keeps_its_status_code_and_message() -> None:
    """A status this client does not know (a newer worker) is a WorkerError all the same."""
    body = b'{"error": {"code": "teapot", "message": "short and stout"}}'
    error = refusal({"Nats-Service-Error-Code": "418", "Nats-Service-Error": "x"}, body)
    assert isinstance(error, WorkerError)
    assert (error.status, error.code, error.message) == ("418", "teapot", "short and stout")
    assert refusal({}, b"{}") is None
    header_only = refusal({"Nats-Service-Error-Code": "404", "Nats-Service-Error": "gone"}, b"")
    assert isinstance(header_only, NotFound) and header_only.message == "gone"


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and never says anything (no NATS INFO)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


async def test_a_dead_port_or_a_silent_server_fails_as_unreachable_within_the_timeout(
    silent_server: int,
) -> None:
    """nats-py alone would retry a closed port forever; the client gives up at once there, and
    after `timeout` on a server that never greets, naming it."""
    for port, timeout, bound in ((dead_port(), 10.0, 3.0), (silent_server, 1.0, 4.0)):
        started = time.monotonic()
        with pytest.raises(Unreachable) as failed:
            await MemoryClient.connect(f"nats://127.0.0.1:{port}", config=CONFIG, timeout=timeout)
        assert time.monotonic() - started < bound
        assert f"127.0.0.1:{port}" in str(failed.value)


async def test_no_worker_and_a_request_over_max_payload_have_their_own_errors(
    nats_url: str,
) -> None:
    """NATS up without a worker is NoWorker (not a hang); a request larger than the server's
    max_payload is RequestTooLarge and the connection stays usable."""
    async with await MemoryClient.connect(nats_url, config=CONFIG, timeout=2.0) as memory:
        started = time.monotonic()
        with pytest.raises(NoWorker, match="no memory worker answers"):
            await memory.stats(StatsRequest())
        assert time.monotonic() - started < 2.0
        with pytest.raises(RequestTooLarge, match="max_payload 1048576 bytes"):
            await memory.store(StoreRequest(agent_id="a", content="x" * (1024 * 1024 + 10)))
        with pytest.raises(NoWorker):
            await memory.ping(timeout=0.5)


def test_a_url_that_is_not_one_nats_server_is_refused_before_connecting() -> None:
    with pytest.raises(ValueError, match="empty port"):
        asyncio.run(MemoryClient.connect("nats://127.0.0.1:", config=CONFIG))


async def test_the_config_gives_the_url_and_the_subject_prefix(
    nats_url: str, tmp_path: Path
) -> None:
    """Without a URL the client takes the config's, and its subject prefix, as the CLI does."""
    config = worker_config(nats_url, tmp_path / "memory.db", subject_prefix="prod.")
    app = App(config)
    await app.start()
    try:
        async with await MemoryClient.connect(config=config) as memory:
            assert memory.subjects["memory::store"] == "prod.memory.store"
            assert (await memory.store(StoreRequest(agent_id="a", content="prefixed"))).stored
    finally:
        await app.stop()
