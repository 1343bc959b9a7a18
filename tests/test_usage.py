"""Usage accounting over the bus (contract section 14): memory::usage::record and query, totals
by model, agent and day over a range, refusals that change nothing."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import msgspec
import nats

from tests.support import Client, wait_until
from tests.test_life import sql
from worker.app import App

DAY = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


async def record(client: Client, agent: str, model: str, p: int, c: int, **more: Any) -> None:
    body = {"agentId": agent, "model": model, "promptTokens": p, "completionTokens": c, **more}
    assert await client.ok("memory::usage::record", body) == {"recorded": True}


async def query(client: Client, group_by: str, **more: Any) -> Any:
    return await client.ok("memory::usage::query", {"groupBy": group_by, **more})


async def test_totals_by_model_agent_and_day(client: Client) -> None:
    await record(client, "a", "gpt", 100, 10, costUsd=0.5, timestamp=T0 + 1)
    await record(client, "a", "claude", 200, 20, costUsd=0.25, timestamp=T0 + DAY + 5)
    await record(client, "b", "gpt", 1, 2, timestamp=T0 + 2 * DAY)
    by_model = await query(client, "model")
    assert by_model == {
        "groups": [
            {"key": "claude", "promptTokens": 200, "completionTokens": 20, "costUsd": 0.25,
             "events": 1},
            {"key": "gpt", "promptTokens": 101, "completionTokens": 12, "costUsd": 0.5,
             "events": 2},
        ],
        "total": {"promptTokens": 301, "completionTokens": 32, "costUsd": 0.75, "events": 3},
    }  # fmt: skip
    by_day = await query(client, "day", agentId="a")
    assert [(g["key"], g["promptTokens"]) for g in by_day["groups"]] == [
        ("2026-01-01", 100),
        ("2026-01-02", 200),
    ]
    by_agent = await query(client, "agent", since=T0 + 2, until=T0 + 2 * DAY + 1)
    assert [(g["key"], g["events"]) for g in by_agent["groups"]] == [("a", 1), ("b", 1)]
    assert (await query(client, "model", since=T0 + 3 * DAY))["groups"] == []


async def test_any_range_agrees_with_summing_the_records_one_by_one(client: Client) -> None:
    """Whole days come from the day totals and the edges from the records: the sums must be
    those of the records in [since, until) whatever the range."""
    rng = random.Random(7)
    rows = [
        (rng.choice("ab"), rng.choice(["m1", "m2", "m3"]), rng.randrange(1000), rng.randrange(99),
         T0 + rng.randrange(6 * DAY))
        for _ in range(300)
    ]  # fmt: skip
    for who, model, p, c, ts in rows:
        await record(client, who, model, p, c, timestamp=ts)
    for _ in range(12):
        since, until = sorted(T0 - DAY + rng.randrange(8 * DAY) for _ in range(2))
        agent: str | None = rng.choice([None, "a"])
        expected: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for a, model, p, c, ts in rows:
            if since <= ts < until and agent in (None, a):
                expected[model][0] += p
                expected[model][1] += c
                expected[model][2] += 1
        scope = {} if agent is None else {"agentId": agent}
        body = await query(client, "model", since=since, until=until, **scope)
        got = {g["key"]: [g["promptTokens"], g["completionTokens"], g["events"]]
               for g in body["groups"]}  # fmt: skip
        assert got == dict(expected), (since, until, agent)


async def test_bad_records_are_refused_and_write_nothing(client: Client, worker: App) -> None:
    base = {"agentId": "a", "model": "m", "promptTokens": 1, "completionTokens": 1}
    for payload, field in (
        ({**base, "promptTokens": -1}, "$.promptTokens"),
        ({**base, "completionTokens": -5}, "$.completionTokens"),
        ({**base, "costUsd": -0.01}, "$.costUsd"),
        ({**base, "promptTokens": 1.5}, "$.promptTokens"),
        ({**base, "timestamp": -1}, "$.timestamp"),
        ({**base, "model": ""}, "$.model"),
        ({"model": "m", "promptTokens": 1, "completionTokens": 1}, "`agentId`"),
    ):
        reply = await client.call("memory::usage::record", payload)
        assert reply.code == "400", (payload, reply)
        assert field in reply.body["error"]["message"], (payload, reply.body)
    assert (await client.raw("memory::usage::record", b'"a"')).code == "400"
    bad_query = await client.call("memory::usage::query", {"groupBy": "week"})
    assert bad_query.code == "400" and "$.groupBy" in bad_query.body["error"]["message"]
    assert sql(worker, "SELECT count(*) FROM usage") == [(0,)]
    assert sql(worker, "SELECT count(*) FROM usage_days") == [(0,)]
    assert sql(worker, "SELECT count(*) FROM audit") == [(0,)]


async def test_records_are_audited_by_count_and_ingestible(nats_url: str, worker: App) -> None:
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        await record(client, "a", "m", 5, 5)
        await nc.jetstream().publish(
            "memory.ingest.usage.record",
            msgspec.json.encode(
                {"agentId": "a", "model": "m", "promptTokens": 7, "completionTokens": 0}
            ),
        )
        await wait_until(
            lambda: sql(worker, "SELECT count(*) FROM usage") == [(2,)], "both usage records"
        )
        total = (await query(client, "agent"))["total"]
        assert total["promptTokens"] == 12 and total["events"] == 2
        events = (await client.ok("memory::audit", {"agentId": "a"}))["events"]
        assert [(e["trigger"], e["source"], e["count"]) for e in events] == [
            ("memory::usage::record", "bus", 1),
            ("memory::usage::record", "ingest", 1),
        ]
    finally:
        await nc.close()
