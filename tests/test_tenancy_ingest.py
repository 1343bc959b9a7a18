"""Durable ingestion under tenancy, on the shipped NATS config: JetStream keeps no
`Nats-Request-Info`, so the tenant is the subject token the server's import mapping puts there
(`memory.ingest.TEAM_A.store`), which no tenant can choose; and each tenant's messages go to a
stream of its own, so that no tenant can drop or count another's."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.js.api import RetentionPolicy, StreamConfig
from nats.js.errors import APIError, NotFoundError

from tests.conftest import worker_config
from tests.shipped_nats import (
    CONF,
    PASSWORDS,
    TenantBus,
    connect_as,
    password,
    shipped_nats,
    tenant_bus,
)
from tests.support import Client
from worker.app import App
from worker.embedded import server_binary


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[TenantBus]:
    async with tenant_bus(tmp_path) as running:
        yield running


async def dead_letter(bus: TenantBus, subject: str, timeout: float = 20.0) -> Any:
    """The last dead letter on subject, waited for, read in the worker's own account."""
    assert bus.app.nc is not None
    js = bus.app.nc.jetstream()
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await js.get_last_msg("MEMORY_DEADLETTER", subject)
        except NotFoundError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_a_memory_ingested_by_a_tenant_lands_in_that_tenants_agent_only(
    bus: TenantBus,
) -> None:
    alice, carol = await bus.user("alice"), await bus.user("carol")
    payload = msgspec.json.encode({"agentId": "a1", "content": "ingested for TEAM_A"})
    ack = await alice.nc.jetstream().publish("memory.ingest.store", payload)
    assert ack.stream == "MEMORY_INGEST_TEAM_A"
    deadline = time.monotonic() + 20
    while not await alice.recall("a1", "ingested"):
        assert time.monotonic() < deadline, "the ingested memory never appeared"
        await asyncio.sleep(0.1)
    assert await carol.recall("a1", "ingested") == []
    operator = await bus.user("operator")
    recalled = await operator.ok("memory::recall", {"agentId": "a1", "tenant": "TEAM_B"})
    assert recalled["memories"] == []


async def test_a_dead_letter_keeps_the_tenant_of_the_message(bus: TenantBus) -> None:
    alice = await bus.user("alice")
    await alice.nc.jetstream().publish("memory.ingest.store", b'{"agentId": "a1"}')
    letter = await dead_letter(bus, "memory.deadletter.TEAM_A.store")
    assert letter.headers["Nats-Service-Error-Code"] == "400"
    assert letter.data == b'{"agentId": "a1"}'


async def test_a_tenant_publishing_on_another_tenants_ingest_subject_stays_in_its_own(
    bus: TenantBus,
) -> None:
    alice, carol = await bus.user("alice"), await bus.user("carol")
    payload = msgspec.json.encode({"agentId": "a1", "content": "smuggled into TEAM_B"})
    await alice.nc.jetstream().publish("memory.ingest.TEAM_B.store", payload)
    # The import puts TEAM_A first: `TEAM_B.store` is no ingestible trigger.
    letter = await dead_letter(bus, "memory.deadletter.TEAM_A.TEAM_B.store")
    assert letter.headers["Nats-Service-Error-Code"] == "400"
    assert await carol.recall("a1") == []


async def test_an_ingest_subject_without_a_tenant_is_refused_and_dead_lettered_saying_so(
    bus: TenantBus,
) -> None:
    operator = await bus.user("operator")  # the worker's own account: no import adds a tenant
    payload = msgspec.json.encode({"agentId": "a1", "content": "whose?"})
    with pytest.raises(APIError) as refused:
        await operator.nc.jetstream().publish("memory.ingest.store", payload)
    assert refused.value.code == 400 and "no tenant" in str(refused.value.description)
    letter = await dead_letter(bus, "memory.deadletter.store")
    assert letter.headers["Nats-Service-Error-Code"] == "400"
    assert "no tenant" in letter.headers["Nats-Service-Error"]


async def stored(client: Client, agent: str, query: str, timeout: float = 20.0) -> list[Any]:
    """The agent's memories found by query, waited for until there is one."""
    deadline = time.monotonic() + timeout
    while not (found := await client.recall(agent, query)):
        assert time.monotonic() < deadline, f"nothing for {query!r} ever appeared"
        await asyncio.sleep(0.05)
    return found


async def test_another_tenants_message_id_neither_drops_nor_reveals_a_tenants_publish(
    bus: TenantBus,
) -> None:
    """carol publishing with `Nats-Msg-Id: order-X` first does not make alice's publish with
    that id a duplicate: alice's is stored, and neither learns the other used the id."""
    alice, carol = await bus.user("alice"), await bus.user("carol")
    order = {"Nats-Msg-Id": "order-X"}
    body = {"agentId": "a1", "content": "carol's order X"}
    first = await carol.nc.jetstream().publish(
        "memory.ingest.store", msgspec.json.encode(body), headers=order
    )
    assert not first.duplicate
    await stored(carol, "a1", "carol")
    body = {"agentId": "a1", "content": "alice's order X"}
    ack = await alice.nc.jetstream().publish(
        "memory.ingest.store", msgspec.json.encode(body), headers=order
    )
    assert not ack.duplicate
    [memory] = await stored(alice, "a1", "alice")
    assert memory["content"] == "alice's order X"
    again = await alice.nc.jetstream().publish(
        "memory.ingest.store", msgspec.json.encode(body), headers=order
    )
    assert again.duplicate  # within the tenant, the id still means the same message


async def test_a_tenants_acknowledgements_count_its_own_messages_only(bus: TenantBus) -> None:
    """The sequence in an ingest acknowledgement counts the tenant's own messages: alice's
    first three are 1, 2, 3 in her stream, however many carol published before them."""
    alice, carol = await bus.user("alice"), await bus.user("carol")
    for n in range(5):
        body = msgspec.json.encode({"agentId": "c", "content": f"carol's traffic {n}"})
        await carol.nc.jetstream().publish("memory.ingest.store", body)
    acks = []
    for n in range(3):
        body = msgspec.json.encode({"agentId": "a", "content": f"alice's note {n}"})
        acks.append(await alice.nc.jetstream().publish("memory.ingest.store", body))
    assert [(ack.stream, ack.seq) for ack in acks] == [
        ("MEMORY_INGEST_TEAM_A", 1),
        ("MEMORY_INGEST_TEAM_A", 2),
        ("MEMORY_INGEST_TEAM_A", 3),
    ]


async def test_a_tenants_stream_outlives_the_worker_and_keeps_what_was_published_meanwhile(
    tmp_path: Path,
) -> None:
    """Made at the tenant's first publish, the stream takes what the tenant publishes while no
    worker runs; a worker started later finds it and applies it."""
    async with tenant_bus(tmp_path) as bus:
        alice = await bus.user("alice")
        first = msgspec.json.encode({"agentId": "a1", "content": "before the restart"})
        await alice.nc.jetstream().publish("memory.ingest.store", first)
        await stored(alice, "a1", "before")
        await bus.app.stop()
        later = msgspec.json.encode({"agentId": "a1", "content": "while no worker ran"})
        ack = await alice.nc.jetstream().publish("memory.ingest.store", later)
        assert (ack.stream, ack.seq) == ("MEMORY_INGEST_TEAM_A", 2)
        again = App(bus.app.config)
        await again.start()
        try:
            await stored(alice, "a1", "while")
        finally:
            await again.stop()


async def test_the_shared_stream_of_earlier_versions_is_applied_then_retired(
    tmp_path: Path,
) -> None:
    """A MEMORY_INGEST on `memory.ingest.>` (what versions before kept every tenant's messages
    in) overlaps the tenants' streams: under tenancy it stops taking messages, what it holds is
    applied in its tenant, and it is deleted."""
    async with shipped_nats(tmp_path) as url:
        worker = await connect_as(url, "worker")
        js = worker.jetstream()
        await js.add_stream(
            StreamConfig(
                name="MEMORY_INGEST",
                subjects=["memory.ingest.>"],
                retention=RetentionPolicy.WORK_QUEUE,
            )
        )
        body = msgspec.json.encode({"agentId": "a1", "content": "left in the old stream"})
        alice = Client(await connect_as(url, "alice"))
        await alice.nc.jetstream().publish("memory.ingest.store", body)
        config = worker_config(
            url,
            tmp_path / "memory.db",
            nats_user="worker",
            nats_password=password("worker"),
            tenancy="account",
        )
        app = App(config)
        await app.start()
        try:
            await stored(alice, "a1", "old stream")
            deadline = time.monotonic() + 20
            while "MEMORY_INGEST" in {i.config.name for i in await js.streams_info()}:
                assert time.monotonic() < deadline, "the old stream was never deleted"
                await asyncio.sleep(0.1)
            fresh = msgspec.json.encode({"agentId": "a1", "content": "after the retirement"})
            ack = await alice.nc.jetstream().publish("memory.ingest.store", fresh)
            assert ack.stream == "MEMORY_INGEST_TEAM_A"
            await stored(alice, "a1", "retirement")
        finally:
            await app.stop()
            await alice.nc.close()
            await worker.close()


def test_the_shipped_export_refuses_a_tenant_importing_another_tenants_ingest_subjects(
    tmp_path: Path,
) -> None:
    own = '{ service: { account: MEMORY, subject: "memory.ingest.TEAM_A.>" }'
    text = CONF.read_text(encoding="utf-8")
    assert own in text
    conf = tmp_path / "nats.conf"
    conf.write_text(text.replace(own, own.replace("TEAM_A", "TEAM_B")), encoding="utf-8")
    done = subprocess.run(
        [server_binary(), "-c", str(conf), "-t"],
        capture_output=True,
        text=True,
        env={**os.environ, **PASSWORDS},
    )
    assert done.returncode != 0
    assert "service import not authorized" in done.stderr
