"""Who may ask what under MEMORY_WORKER_TENANCY=account, as dispatch decides it from the
`Nats-Request-Info` header (the bus-level tests with real accounts are in test_tenancy_bus)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.conftest import worker_config
from tests.test_cli import cli
from worker.app import App
from worker.config import ConfigError, load_config
from worker.tenancy import ADMIN, Caller, caller_of


def info(account: str, user: str = "") -> dict[str, str]:
    return {"Nats-Request-Info": json.dumps({"acc": account, "user": user, "rtt": 1000})}


@pytest.fixture
async def tenanted(nats_url: str, tmp_path: Path) -> AsyncIterator[App]:
    grants = tmp_path / "grants.json"
    grants.write_text(json.dumps({"TEAM_A/alice": ["planner-*"]}))
    app = App(
        worker_config(nats_url, tmp_path / "memory.db", tenancy="account", grants=str(grants))
    )
    await app.start()
    yield app
    await app.stop()


async def ask(app: App, trigger: str, body: Any, headers: dict[str, str] | None) -> Any:
    assert app.dispatcher is not None
    outcome = await app.dispatcher.handle(trigger, msgspec.json.encode(body), headers=headers)
    reply = msgspec.json.decode(outcome.body)
    return reply if outcome.error is None else (outcome.error.status, reply["error"]["message"])


def test_the_caller_is_the_account_the_server_stamped_or_the_worker_itself() -> None:
    assert caller_of(None, "MEMORY") is ADMIN
    assert caller_of({}, "MEMORY") is ADMIN
    assert caller_of(info("MEMORY", "operator"), "MEMORY") is ADMIN
    assert caller_of(info("TEAM_A", "alice"), "MEMORY") == Caller("TEAM_A", "alice")
    assert caller_of(info("TEAM_A"), "MEMORY") == Caller("TEAM_A", None)


async def test_an_unreadable_request_info_header_is_refused_not_taken_for_an_operator(
    tenanted: App,
) -> None:
    for header in ("not json", '{"user": "alice"}'):
        status, message = await ask(
            tenanted, "memory::recall", {"agentId": "a"}, {"Nats-Request-Info": header}
        )
        assert status == "403" and "Nats-Request-Info" in message


async def test_two_tenants_with_the_same_agent_never_see_each_other(tenanted: App) -> None:
    store = {"agentId": "planner-1", "content": "the launch code is 0000"}
    assert (await ask(tenanted, "memory::store", store, info("TEAM_A", "alice")))["stored"]
    mine = await ask(tenanted, "memory::recall", {"agentId": "planner-1"}, info("TEAM_A", "bob"))
    theirs = await ask(tenanted, "memory::recall", {"agentId": "planner-1"}, info("TEAM_B", "c"))
    assert [m["content"] for m in mine["memories"]] == [store["content"]]
    assert theirs["memories"] == []
    stats = await ask(tenanted, "memory::stats", {}, info("TEAM_B", "c"))
    assert stats["memories"] == 0 and stats["agents"] == 0
    # Its own request figures: the one recall (this stats call is counted once answered).
    assert {t: f["requests"] for t, f in stats["triggers"].items()} == {"memory::recall": 1}


async def test_a_tenant_may_not_name_a_tenant(tenanted: App) -> None:
    body = {"agentId": "planner-1", "content": "x", "tenant": "TEAM_B"}
    status, message = await ask(tenanted, "memory::store", body, info("TEAM_A", "alice"))
    assert status == "403" and "tenant" in message
    for trigger in ("memory::evict", "memory::consolidate", "memory::stats"):
        status, _ = await ask(tenanted, trigger, {"tenant": "TEAM_B"}, info("TEAM_A", "bob"))
        assert status == "403", trigger
    assert (await ask(tenanted, "memory::stats", {}, None))["memories"] == 0


async def test_an_administrative_request_names_its_tenant_except_for_maintenance(
    tenanted: App,
) -> None:
    status, message = await ask(tenanted, "memory::store", {"agentId": "a", "content": "x"}, None)
    assert status == "400" and "tenant" in message
    named = {"agentId": "a", "content": "x", "tenant": "TEAM_A"}
    assert (await ask(tenanted, "memory::store", named, None))["stored"]
    seen = await ask(tenanted, "memory::recall", {"agentId": "a"}, info("TEAM_A", "bob"))
    assert [m["content"] for m in seen["memories"]] == ["x"]
    assert (await ask(tenanted, "memory::stats", {}, None))["memories"] == 1
    evicted = await ask(tenanted, "memory::evict", {"cap": 0, "dryRun": True}, None)
    assert evicted["overCap"] == 1


async def test_evict_from_a_tenant_touches_that_tenant_only(tenanted: App) -> None:
    for account in ("TEAM_A", "TEAM_B"):
        body = {"agentId": "a", "content": f"{account} memory"}
        await ask(tenanted, "memory::store", body, info(account, "someone"))
    evicted = await ask(tenanted, "memory::evict", {"cap": 0}, info("TEAM_B", "carol"))
    assert evicted["overCap"] == 1
    left = await ask(tenanted, "memory::recall", {"agentId": "a"}, info("TEAM_A", "bob"))
    assert [m["content"] for m in left["memories"]] == ["TEAM_A memory"]


async def test_a_user_limited_by_grants_is_refused_other_agents_and_nothing_is_written(
    tenanted: App,
) -> None:
    body = {"agentId": "critic-1", "content": "not mine to write"}
    status, message = await ask(tenanted, "memory::store", body, info("TEAM_A", "alice"))
    assert status == "403" and "critic-1" in message and "planner" not in message
    assert (await ask(tenanted, "memory::stats", {}, None))["memories"] == 0
    granted = {"agentId": "planner-7", "content": "mine"}
    assert (await ask(tenanted, "memory::store", granted, info("TEAM_A", "alice")))["stored"]
    # bob has no entry: every agent of his tenant.
    assert (await ask(tenanted, "memory::store", body, info("TEAM_A", "bob")))["stored"]


async def test_with_tenancy_off_a_named_tenant_is_refused_and_the_header_ignored(
    worker: App,
) -> None:
    body = {"agentId": "a", "content": "x", "tenant": "TEAM_A"}
    status, message = await ask(worker, "memory::store", body, None)
    assert status == "400" and "MEMORY_WORKER_TENANCY" in message
    stored = await ask(worker, "memory::store", {"agentId": "a", "content": "x"}, info("TEAM_A"))
    assert stored["stored"]
    assert (await ask(worker, "memory::stats", {}, None))["memories"] == 1


def test_a_grants_file_is_checked_at_start_up(tmp_path: Path) -> None:
    path = tmp_path / "grants.json"
    for text, words in (
        ('["planner-*"]', "JSON object"),
        ('{"alice": ["planner-*"]}', "account/user"),
    ):
        path.write_text(text)
        with pytest.raises(ConfigError, match=words):
            load_config({"MEMORY_WORKER_TENANCY": "account", "MEMORY_WORKER_GRANTS": str(path)})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(
            {"MEMORY_WORKER_TENANCY": "account", "MEMORY_WORKER_GRANTS": str(tmp_path / "no")}
        )
    path.write_text('{"TEAM_A/alice": ["planner-*"]}')
    with pytest.raises(ConfigError, match="TENANCY=account"):
        load_config({"MEMORY_WORKER_GRANTS": str(path)})


async def test_the_stats_command_counts_one_tenant_when_asked(nats_url: str, tenanted: App) -> None:
    named = {"agentId": "a", "content": "x", "tenant": "TEAM_A"}
    assert (await ask(tenanted, "memory::store", named, None))["stored"]
    counted = {}
    for tenant in ("TEAM_A", "TEAM_B"):
        done = await asyncio.to_thread(
            cli, "stats", "--json", "--tenant", tenant, "--nats-url", nats_url
        )
        assert done.returncode == 0, done.stderr
        counted[tenant] = json.loads(done.stdout)["memories"]
    assert counted == {"TEAM_A": 1, "TEAM_B": 0}


async def test_the_audit_names_the_requester_and_a_tenant_reads_only_its_own(
    tenanted: App,
) -> None:
    for account, user in (("TEAM_A", "alice"), ("TEAM_B", "carol")):
        body = {"agentId": "planner-1", "content": f"{account} note"}
        assert (await ask(tenanted, "memory::store", body, info(account, user)))["stored"]
    own = (await ask(tenanted, "memory::audit", {}, info("TEAM_A", "bob")))["events"]
    assert [(e["agentId"], e["requester"]) for e in own] == [("planner-1", "TEAM_A/alice")]
    everything = (await ask(tenanted, "memory::audit", {}, None))["events"]
    assert [e["requester"] for e in everything] == ["TEAM_A/alice", "TEAM_B/carol"]


async def test_no_request_acts_in_a_tenant_named_like_the_workers_own_account(
    tenanted: App,
) -> None:
    named = {"agentId": "a", "content": "x", "tenant": "MEMORY"}
    status, message = await ask(tenanted, "memory::store", named, None)
    assert status == "400" and "own account" in message
    assert tenanted.dispatcher is not None
    outcome = await tenanted.dispatcher.handle(
        "memory::store", b'{"agentId": "a", "content": "x"}', source="ingest",
        caller=Caller("MEMORY"),
    )  # fmt: skip
    assert outcome.error is not None and outcome.error.status == "400"
    assert (await ask(tenanted, "memory::stats", {}, None))["memories"] == 0
