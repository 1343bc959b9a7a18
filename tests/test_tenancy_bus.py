"""Tenants on the shipped NATS config (contract section 15): a real nats-server started from
deploy/nats/nats-server.conf and a worker with MEMORY_WORKER_TENANCY=account. alice and bob are
users of TEAM_A, carol of TEAM_B; `operator` is in the worker's own account."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.shipped_nats import TenantBus, password, tenant_bus
from tests.support import Client, Reply, wait_until


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[TenantBus]:
    async with tenant_bus(tmp_path) as running:
        yield running


async def with_request_info(client: Client, trigger: str, payload: Any, info: Any) -> Reply:
    """A request carrying a `Nats-Request-Info` header the client wrote itself."""
    subject = trigger.replace("::", ".")
    headers = {"Nats-Request-Info": json.dumps(info)}
    msg = await client.nc.request(subject, msgspec.json.encode(payload), headers=headers)
    found = msg.headers or {}
    return Reply(
        body=msgspec.json.decode(msg.data) if msg.data else None,
        code=found.get("Nats-Service-Error-Code"),
        description=found.get("Nats-Service-Error"),
    )


def contents(memories: list[Any]) -> list[str]:
    return sorted(memory["content"] for memory in memories)


async def test_two_tenants_with_one_agent_id_see_only_their_own_memories_sessions_entities_counts(
    bus: TenantBus,
) -> None:
    alice, carol = await bus.user("alice"), await bus.user("carol")
    await alice.store("a1", "alpha plans the launch", sessionId="s-alice")
    await alice.store("a1", "alpha keeps the budget", sessionId="s-alice")
    await carol.store("a1", "beta plans the audit", sessionId="s-carol")
    entity = {"id": "e1", "type": "project", "properties": {"owner": "alice"}}
    await alice.ok("memory::kg::add", {"agentId": "a1", "entity": entity})

    assert contents(await alice.recall("a1", "plans")) == [
        "alpha keeps the budget",
        "alpha plans the launch",
    ]
    assert contents(await carol.recall("a1", "plans")) == ["beta plans the audit"]
    listed = await carol.ok("memory::session::list", {"agentId": "a1"})
    assert [session["id"] for session in listed["sessions"]] == ["s-carol"]
    found = await carol.ok("memory::kg::query", {"agentId": "a1", "entityId": "e1"})
    assert found["entities"] == []
    assert (await alice.ok("memory::stats"))["memories"] == 2
    assert (await carol.ok("memory::stats"))["memories"] == 1


async def test_no_other_user_or_tenant_can_read_a_users_replies_from_any_inbox(
    bus: TenantBus,
) -> None:
    alice, bob, carol = [await bus.user(name) for name in ("alice", "bob", "carol")]
    overheard: list[str] = []

    async def note(msg: Any) -> None:
        overheard.append(msg.subject)

    spies = []
    for spy in (bob, carol):
        for subject in ("_INBOX.>", "_INBOX_alice.>", ">"):
            spies.append(await spy.nc.subscribe(subject, cb=note))
        await spy.nc.flush()

    def refused(name: str) -> list[str]:
        return [e for e in bus.errors[name] if "permissions violation for subscription" in e]

    # The server's -ERR for each subscription arrives after the flush.
    await wait_until(
        lambda: len(refused("bob")) >= 3 and len(refused("carol")) >= 3,
        "the server refused bob's and carol's three subscriptions each",
    )
    for name in ("bob", "carol"):
        assert len(refused(name)) == 3, bus.errors[name]

    await alice.store("a1", "a reply only alice may read")
    assert contents(await alice.recall("a1", "reply")) == ["a reply only alice may read"]
    await bob.store("b1", "bob still gets his own replies")
    for spy in (bob, carol):  # what the server sent a spy before this round trip has arrived
        await spy.nc.flush()
    assert overheard == [] and sum(sub.pending_msgs for sub in spies) == 0


async def test_evict_and_consolidate_from_one_tenant_leave_another_tenants_memories(
    bus: TenantBus,
) -> None:
    alice, carol = await bus.user("alice"), await bus.user("carol")
    await alice.store("a1", "alpha survives", importance=0.9)
    await carol.store("a1", "beta is evicted")
    before = await alice.recall("a1", "alpha")

    evicted = await carol.ok("memory::evict", {"cap": 0})
    assert evicted["evicted"] == 1
    await carol.ok("memory::consolidate", {"decayRate": 1.0})
    await carol.ok("memory::consolidate", {"decayRate": 1.0, "agentId": "a1"})

    after = await alice.recall("a1", "alpha")
    assert contents(after) == ["alpha survives"]
    assert after[0]["importance"] == before[0]["importance"]
    assert await carol.recall("a1", "beta") == []


async def test_a_tenant_naming_a_tenant_is_refused_with_403_naming_the_field(
    bus: TenantBus,
) -> None:
    carol = await bus.user("carol")
    reply = await carol.call("memory::store", {"agentId": "a1", "content": "x", "tenant": "TEAM_A"})
    assert reply.code == "403", reply
    assert "tenant" in (reply.description or "")
    assert await (await bus.user("alice")).recall("a1") == []


async def test_a_tenant_can_neither_publish_dead_letters_nor_subscribe_to_memory_subjects(
    bus: TenantBus,
) -> None:
    assert bus.app.nc is not None
    js = bus.app.nc.jetstream()
    alice = await bus.user("alice")
    await alice.nc.publish("memory.deadletter.TEAM_A.store", b'{"agentId": "a1"}')
    await alice.nc.publish("memory.deadletter.store", b'{"agentId": "a1"}')
    await alice.nc.subscribe("memory.>")
    await alice.nc.flush()
    errors = bus.errors["alice"]
    await wait_until(  # the server's -ERRs arrive after the flush
        lambda: sum("permissions violation" in e for e in errors) >= 3,
        "the server refused alice's two publishes and her subscription",
    )
    assert sum("permissions violation for publish" in e for e in errors) == 2, errors
    assert any("permissions violation for subscription" in e for e in errors), errors
    assert (await js.stream_info("MEMORY_DEADLETTER")).state.messages == 0


async def test_a_request_info_header_forged_by_a_tenant_client_is_replaced_by_the_servers(
    bus: TenantBus,
) -> None:
    alice, carol = await bus.user("alice"), await bus.user("carol")
    as_worker = {"acc": "MEMORY", "user": "worker"}
    payload = {"agentId": "a1", "content": "into TEAM_B?", "tenant": "TEAM_B"}
    reply = await with_request_info(alice, "memory::store", payload, as_worker)
    assert reply.code == "403", reply  # believed, it would be administrative and succeed

    as_carol = {"acc": "TEAM_B", "user": "carol"}
    payload = {"agentId": "a1", "content": "written as alice after all"}
    reply = await with_request_info(alice, "memory::store", payload, as_carol)
    assert reply.ok, reply
    assert await carol.recall("a1") == []
    assert contents(await alice.recall("a1", "alice")) == ["written as alice after all"]


async def test_a_user_granted_planner_agents_gets_403_for_another_agent_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    grants = tmp_path / "grants.json"
    grants.write_text(json.dumps({"TEAM_A/alice": ["planner-*"]}), encoding="utf-8")
    async with tenant_bus(tmp_path, grants=str(grants)) as bus:
        alice = await bus.user("alice")
        reply = await alice.call("memory::store", {"agentId": "critic-1", "content": "no"})
        assert reply.code == "403", reply
        assert "critic-1" in (reply.description or "")
        await alice.store("planner-1", "granted")
        operator = await bus.user("operator")
        recalled = await operator.ok(
            "memory::recall", {"agentId": "critic-1", "query": "", "tenant": "TEAM_A"}
        )
        assert recalled["memories"] == []
        # bob has no entry of his own nor TEAM_A/*: any agent of his tenant.
        await (await bus.user("bob")).store("critic-1", "bob may")


async def test_an_administrative_store_needs_a_tenant_and_acts_in_the_one_it_names(
    bus: TenantBus,
) -> None:
    operator = await bus.user("operator")
    reply = await operator.call("memory::store", {"agentId": "a1", "content": "whose?"})
    assert reply.code == "400", reply
    assert "tenant" in (reply.description or "")

    await operator.store("a1", "put here by an operator", tenant="TEAM_A")
    assert contents(await (await bus.user("alice")).recall("a1")) == ["put here by an operator"]
    assert await (await bus.user("carol")).recall("a1") == []


async def test_a_tenants_user_fires_and_reads_stats_through_the_cli_on_its_private_inbox(
    bus: TenantBus,
) -> None:
    """`memory-worker fire` and `stats` as alice with `--inbox-prefix _INBOX_alice`: the replies
    come back on her private inbox, and what she stored is her tenant's. Without it the client
    waits on `_INBOX.>`, which the shipped config lets no tenant subscribe to: no reply (exit 2),
    and the message says the server refused the inbox and names the flag."""
    from tests.test_cli import cli

    url = bus.url.replace("nats://", f"nats://alice:{password('alice')}@")
    own = ("--nats-url", url, "--inbox-prefix", "_INBOX_alice")
    body = '{"agentId": "a1", "content": "fired by alice"}'
    stored = await asyncio.to_thread(cli, "fire", *own, "memory::store", body)
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout)["stored"] is True
    assert contents(await (await bus.user("alice")).recall("a1", "fired")) == ["fired by alice"]
    assert await (await bus.user("carol")).recall("a1", "fired") == []
    stats = await asyncio.to_thread(cli, "stats", "--json", *own)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["memories"] == 1
    shared = await asyncio.to_thread(
        cli, "fire", "--nats-url", url, "--timeout", "2", "memory::stats"
    )
    assert shared.returncode == 2, shared.stderr
    assert "refused this client's reply inbox" in shared.stderr
    assert "--inbox-prefix" in shared.stderr and "alice-secret" not in shared.stderr
