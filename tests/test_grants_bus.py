"""Grants bound every trigger over many agents (contract section 15), on the shipped NATS config
with real accounts: alice and bob of TEAM_A are granted `alice-*` and `bob-*`, carol of TEAM_B
is granted nothing. Maintenance, audit, stats, the task board's listing and usage totals from
a user with grants act on, and show, only the agents its grants match; 403 when they can match
none. And stats tell a tenant only about itself: the sanitiser's counts and by-hand runs."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.shipped_nats import TenantBus, tenant_bus
from tests.support import Client
from tests.test_tenancy_bus import with_request_info

GRANTS = {"TEAM_A/alice": ["alice-*"], "TEAM_A/bob": ["bob-*"], "TEAM_B/carol": []}
FACT = "the deploy key rotates on Fridays"
PARAPHRASE = "on Fridays the deploy key rotates"  # the same words: cosine 1 with `hash`


@asynccontextmanager
async def granted_bus(tmp_path: Path, **overrides: Any) -> AsyncIterator[TenantBus]:
    path = tmp_path / "grants.json"
    path.write_text(json.dumps(GRANTS), encoding="utf-8")
    async with tenant_bus(tmp_path, grants=str(path), **overrides) as bus:
        yield bus


async def listed(operator: Client, agent: str, tenant: str = "TEAM_A") -> list[str]:
    body = {"agentId": agent, "tenant": tenant}
    return sorted(m["content"] for m in (await operator.ok("memory::list", body))["memories"])


async def all_events(client: Client, **asked: Any) -> list[Any]:
    """Every page of the client's audit, two events a page."""
    events, cursor = [], None
    while True:
        page = await client.ok(
            "memory::audit", {"limit": 2, **asked} | ({"cursor": cursor} if cursor else {})
        )
        events += page["events"]
        cursor = page["nextCursor"]
        if cursor is None:
            return events


async def test_bob_evicting_with_cap_0_removes_only_the_memories_of_agents_granted_to_him(
    tmp_path: Path,
) -> None:
    async with granted_bus(tmp_path) as bus:
        alice, bob, operator = [await bus.user(n) for n in ("alice", "bob", "operator")]
        for agent in ("alice-1", "alice-2"):
            await alice.store(agent, f"{agent} keeps the launch plan")
        for agent in ("bob-1", "bob-2"):
            await bob.store(agent, f"{agent} keeps the rota")
        dry = await bob.ok("memory::evict", {"cap": 0, "dryRun": True})
        assert dry["overCap"] == 2, dry
        evicted = await bob.ok("memory::evict", {"cap": 0})
        assert evicted["evicted"] == evicted["overCap"] == 2, evicted
        assert await listed(operator, "alice-1") == ["alice-1 keeps the launch plan"]
        assert await listed(operator, "alice-2") == ["alice-2 keeps the launch plan"]
        assert await listed(operator, "bob-1") == await listed(operator, "bob-2") == []


async def test_bob_consolidating_merges_paraphrases_of_his_agents_only(tmp_path: Path) -> None:
    async with granted_bus(tmp_path, embedder="builtin", builtin_model="hash") as bus:
        alice, bob, operator = [await bus.user(n) for n in ("alice", "bob", "operator")]
        at = int(time.time() * 1000) - 60_000
        for client, agent in ((alice, "alice-1"), (bob, "bob-1")):
            await client.store(agent, PARAPHRASE, timestamp=at)
            await client.store(agent, FACT, timestamp=at + 1)
        reply = await bob.ok("memory::consolidate", {"mergeThreshold": 0.95})
        assert reply["memoriesMerged"] == 1, reply
        assert await listed(operator, "bob-1") == [FACT]
        assert await listed(operator, "alice-1") == sorted([FACT, PARAPHRASE])


async def test_an_audit_without_an_agent_lists_only_the_events_of_granted_agents(
    tmp_path: Path,
) -> None:
    async with granted_bus(tmp_path) as bus:
        alice, bob, operator = [await bus.user(n) for n in ("alice", "bob", "operator")]
        for n in range(3):
            await alice.store(f"alice-{n}", f"alice note {n}")
            await bob.store(f"bob-{n}", f"bob note {n}")
        await bob.ok("memory::kv::set", {"agentId": "bob-0", "key": "k", "value": 1})
        seen = await all_events(bob)
        assert sorted(e["agentId"] for e in seen) == ["bob-0", "bob-0", "bob-1", "bob-2"]
        assert {e["agentId"] for e in await all_events(alice)} == {f"alice-{n}" for n in range(3)}
        # An operator still sees every agent of the tenant.
        assert len(await all_events(operator, tenant="TEAM_A")) == 7


async def test_a_user_whose_grants_match_no_agent_gets_403_on_every_trigger_over_many_agents(
    tmp_path: Path,
) -> None:
    async with granted_bus(tmp_path) as bus:
        carol, operator = await bus.user("carol"), await bus.user("operator")
        await operator.store("c-1", "kept for TEAM_B", tenant="TEAM_B")
        for trigger, body in (
            ("memory::evict", {"cap": 0}),
            ("memory::consolidate", {"decayRate": 1.0}),
            ("memory::stats", {}),
            ("memory::audit", {}),
            ("memory::task::list", {}),
            ("memory::usage::query", {"groupBy": "agent"}),
        ):
            reply = await carol.call(trigger, body)
            assert reply.code == "403", (trigger, reply)
            assert "granted no agent" in (reply.description or ""), (trigger, reply)
        assert await listed(operator, "c-1", "TEAM_B") == ["kept for TEAM_B"]


async def test_the_board_and_usage_totals_show_a_user_with_grants_its_agents_only(
    tmp_path: Path,
) -> None:
    """The board shows a user the tasks its agents posted, are assigned or hold, and the
    unassigned ones its agents may claim."""
    async with granted_bus(tmp_path) as bus:
        alice, bob = await bus.user("alice"), await bus.user("bob")
        post = {"title": "for alice-2", "createdBy": "alice-1", "assignee": "alice-2"}
        await alice.ok("memory::task::post", post)
        await alice.ok("memory::task::post", {"title": "anyone's", "createdBy": "alice-1"})
        post = {"title": "for bob-2", "createdBy": "bob-1", "assignee": "bob-2"}
        await bob.ok("memory::task::post", post)
        for client, agent in ((alice, "alice-1"), (alice, "alice-2"), (bob, "bob-1")):
            record = {"agentId": agent, "model": "m", "promptTokens": 5, "completionTokens": 1}
            await client.ok("memory::usage::record", record)

        tasks = (await bob.ok("memory::task::list", {}))["tasks"]
        assert sorted(task["title"] for task in tasks) == ["anyone's", "for bob-2"]
        tasks = (await alice.ok("memory::task::list", {}))["tasks"]
        assert sorted(task["title"] for task in tasks) == ["anyone's", "for alice-2"]
        claimed = await bob.ok("memory::task::claim", {"agentId": "bob-3"})
        assert claimed["task"]["title"] == "anyone's"  # bob's agents may claim it: listed
        tasks = (await alice.ok("memory::task::list", {}))["tasks"]
        assert sorted(task["title"] for task in tasks) == ["anyone's", "for alice-2"]  # posted
        usage = await bob.ok("memory::usage::query", {"groupBy": "agent"})
        assert [group["key"] for group in usage["groups"]] == ["bob-1"]
        assert usage["total"]["events"] == 1


async def test_stats_of_a_user_with_grants_count_its_agents_only(tmp_path: Path) -> None:
    async with granted_bus(tmp_path) as bus:
        alice, bob = await bus.user("alice"), await bus.user("bob")
        await alice.store("alice-1", "alice's first")
        await alice.store("alice-2", "alice's second")
        await bob.store("bob-1", "bob's only")
        await alice.ok("memory::task::post", {"title": "t", "createdBy": "alice-1",
                                              "assignee": "alice-2"})  # fmt: skip
        await bob.ok("memory::task::post", {"title": "t", "createdBy": "bob-1"})
        for client, agent in ((alice, "alice-1"), (bob, "bob-1")):
            record = {"agentId": agent, "model": "m", "promptTokens": 5, "completionTokens": 1}
            await client.ok("memory::usage::record", record)
        stats = await bob.ok("memory::stats", {})
        names = ("agents", "memories", "usageRecords", "tasksPending", "auditEvents")
        # bob-1's store, post and usage record.
        assert {n: stats[n] for n in names} == dict(zip(names, (1, 1, 1, 1, 3), strict=True))
        stats = await alice.ok("memory::stats", {})
        # alice's own task, and bob's: unassigned, her agents may claim it.
        assert {n: stats[n] for n in names} == dict(zip(names, (2, 2, 1, 2, 4), strict=True))


async def test_no_request_may_name_grants_itself(tmp_path: Path) -> None:
    async with granted_bus(tmp_path) as bus:
        for name in ("alice", "operator"):
            reply = await (await bus.user(name)).call("memory::evict", {"grants": ["*"]})
            assert reply.code == "400" and "grants" in (reply.description or ""), reply


async def test_a_tenants_stats_show_none_of_another_tenants_sanitiser_counts(
    tmp_path: Path,
) -> None:
    async with tenant_bus(tmp_path) as bus:
        alice, carol, operator = [await bus.user(n) for n in ("alice", "carol", "operator")]
        stored = await alice.store("a1", "write to alice@example.com, key sk-ant-a8Kd93LmQz7Rt2Xv")
        assert stored["redactions"] == {"email": 1, "secret": 1}, stored
        await carol.store("a1", "call carol on +44 20 7946 0958")
        carols = (await carol.ok("memory::stats", {}))["sanitizer"]
        assert carols == {"redactions": {"phone": 1}, "flags": {}}, carols
        alices = (await alice.ok("memory::stats", {}))["sanitizer"]
        assert alices["redactions"] == stored["redactions"]
        # Operators in the worker's own account still see every tenant's.
        everything = (await operator.ok("memory::stats", {}))["sanitizer"]
        assert everything["redactions"] == {"email": 1, "phone": 1, "secret": 1}
        # Nor another tenant's agents in the recall index.
        for client in (alice, carol):
            assert await client.recall("a1", "call write")
        assert (await operator.ok("memory::stats", {}))["indexAgents"] == 2
        assert (await carol.ok("memory::stats", {}))["indexAgents"] == 1


async def test_a_tenants_stats_show_none_of_another_tenants_maintenance_runs(
    tmp_path: Path,
) -> None:
    async with tenant_bus(tmp_path) as bus:
        alice, carol, operator = [await bus.user(n) for n in ("alice", "carol", "operator")]
        await alice.ok("memory::evict", {"cap": 5})
        assert (await carol.ok("memory::stats", {}))["schedule"] == {}
        await carol.ok("memory::consolidate", {})
        carols = (await carol.ok("memory::stats", {}))["schedule"]
        assert list(carols) == ["consolidate"], carols
        assert carols["consolidate"]["lastRun"]["source"] == "bus"
        alices = (await alice.ok("memory::stats", {}))["schedule"]
        assert list(alices) == ["evict"], alices
        assert alices["evict"]["lastRun"]["counts"]["evicted"] == 0
        # Operators see the last run of each job, whoever ran it.
        everything = (await operator.ok("memory::stats", {}))["schedule"]
        assert {name: job["lastRun"] is not None for name, job in everything.items()} == {
            "evict": True,
            "consolidate": True,
        }


async def test_an_empty_request_info_header_in_the_workers_own_account_is_refused(
    tmp_path: Path,
) -> None:
    """Only an absent header is administrative: an empty one is not read as the operator."""
    async with tenant_bus(tmp_path) as bus:
        operator = await bus.user("operator")
        reply = await with_request_info(operator, "memory::stats", {}, None)  # header "null"
        assert reply.code == "403", reply
        subject = "memory.stats"
        msg = await operator.nc.request(subject, b"{}", headers={"Nats-Request-Info": ""})
        assert (msg.headers or {}).get("Nats-Service-Error-Code") == "403", msg.headers
        assert (await operator.call("memory::stats", {}, 5)).ok
