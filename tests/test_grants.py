"""Grants as SQL (handlers/grants.py) and across shards: a user's fnmatch patterns, written as
SQLite GLOB, match exactly the agent ids fnmatch does, and a sharded worker keeps to them on
every partition it fans a request out to. The same rules on the shipped config's accounts are
in tests/test_grants_bus.py."""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import apsw
import msgspec
import nats
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.grants import glob_of
from schema.errors import Forbidden
from tests.test_shards import PARTITIONS, settled, shard_config
from tests.test_tenancy import info
from worker.shards.app import ShardApp
from worker.shards.partition import partition_of
from worker.tenancy import ADMIN, caller_of

# Characters that mean something to fnmatch or GLOB, and a few that do not (one beyond the
# Basic Multilingual Plane).
SPECIAL = "*?[]!^-\\"
PLAIN = "ab-z_é\u4e00\U0001f600"
PATTERN = st.text(alphabet=SPECIAL + PLAIN, max_size=8)
NAME = st.text(alphabet="ab[]!^-\\z_é\u4e00\U0001f600c", max_size=6)


@pytest.fixture(scope="module")
def sqlite() -> apsw.Connection:
    return apsw.Connection(":memory:")


@settings(max_examples=3000, deadline=None)
@given(pattern=PATTERN, names=st.lists(NAME, min_size=1, max_size=8))
def test_a_grant_pattern_written_as_glob_matches_exactly_the_names_fnmatch_does(
    sqlite: apsw.Connection, pattern: str, names: list[str]
) -> None:
    glob = glob_of(pattern)
    for name in names:
        [(found,)] = sqlite.execute("SELECT ? GLOB ?", (name, glob or "")).fetchall()
        found = glob is not None and bool(found)  # None: matches nothing
        assert found == fnmatchcase(name, pattern), (pattern, glob, name)


def test_sets_glob_reads_otherwise_are_rewritten_and_a_set_of_nothing_matches_nothing() -> None:
    assert glob_of("planner-*") == "planner-*"
    assert glob_of("[^a]") == "[a^]"  # fnmatch reads `^` here as itself, GLOB as "not"
    assert glob_of("a[b") == "a[[]b"  # no closing `]`: a literal `[`
    assert glob_of("[z-a]") is None  # fnmatch drops a reversed range: nothing is left
    assert glob_of("a\x00*") is None  # no id holds a NUL (GLOB would end the pattern there)


def test_only_an_absent_request_info_header_is_administrative() -> None:
    assert caller_of({}, "MEMORY") is ADMIN
    for empty in ("", " "):
        with pytest.raises(Forbidden, match="Nats-Request-Info"):
            caller_of({"Nats-Request-Info": empty}, "MEMORY")


async def ask(nc: Any, trigger: str, body: Any, headers: dict[str, str]) -> Any:
    """A request with a `Nats-Request-Info` the client wrote: believed here, where the test's
    server has no accounts (the worker's own account, for the worker)."""
    subject, data = trigger.replace("::", "."), msgspec.json.encode(body)
    # As tests/support.py's Client waits: nats-py's own 0.5 s was passed once by a store
    # while the whole suite ran (the shards' log appends on a loaded machine).
    msg = await nc.request(subject, data, headers=headers, timeout=10)
    assert not (msg.headers or {}).get("Nats-Service-Error-Code"), (trigger, msg.headers)
    return msgspec.json.decode(msg.data)


async def test_sharded_evict_stats_and_audit_keep_to_the_grants_on_every_partition(
    nats_url: str, tmp_path: Path
) -> None:
    grants = tmp_path / "grants.json"
    grants.write_text(json.dumps({"TEAM_A/bob": ["bob-*"]}), encoding="utf-8")
    settings = {"tenancy": "account", "grants": str(grants)}
    apps = [ShardApp(shard_config(nats_url, tmp_path, n, **settings)) for n in ("s1", "s2")]
    nc = await nats.connect(nats_url)
    try:
        for app in apps:
            await app.start()
        await settled(apps)
        bob, alice = info("TEAM_A", "bob"), info("TEAM_A", "alice")
        agents = [f"{who}-{n}" for who in ("bob", "alice") for n in range(6)]
        for agent in agents:
            store = {"agentId": agent, "content": f"a note of {agent}"}
            await ask(nc, "memory::store", store, bob if agent.startswith("bob") else alice)
        partitions = {partition_of("TEAM_A", agent, PARTITIONS) for agent in agents[:6]}
        assert {app.name for app in apps for k in partitions if app.owned(k)} == {"s1", "s2"}

        evicted = await ask(nc, "memory::evict", {"cap": 0}, bob)
        assert evicted["evicted"] == 6, evicted
        assert (await ask(nc, "memory::stats", {}, bob))["memories"] == 0
        assert (await ask(nc, "memory::stats", {}, alice))["memories"] == 6
        events, cursor = [], None
        while True:
            asked: dict[str, Any] = {"limit": 4} | ({"cursor": cursor} if cursor else {})
            page = await ask(nc, "memory::audit", asked, bob)
            events += page["events"]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert sorted(e["agentId"] for e in events) == sorted(agents[:6] * 2)  # store, evict
    finally:
        await nc.close()
        for app in apps:
            await app.stop()
