"""Durable ingestion under tenancy, on the shipped NATS config: JetStream keeps no
`Nats-Request-Info`, so the tenant is the subject token the server's import mapping puts there
(`memory.ingest.TEAM_A.store`), which no tenant can choose."""

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
from nats.js.errors import NotFoundError

from tests.shipped_nats import CONF, PASSWORDS, TenantBus, tenant_bus
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
    assert ack.stream == "MEMORY_INGEST"
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


async def test_an_ingest_subject_without_a_tenant_is_dead_lettered_saying_so(
    bus: TenantBus,
) -> None:
    operator = await bus.user("operator")  # the worker's own account: no import adds a tenant
    payload = msgspec.json.encode({"agentId": "a1", "content": "whose?"})
    await operator.nc.jetstream().publish("memory.ingest.store", payload)
    letter = await dead_letter(bus, "memory.deadletter.store")
    assert letter.headers["Nats-Service-Error-Code"] == "400"
    assert "no tenant" in letter.headers["Nats-Service-Error"]


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
