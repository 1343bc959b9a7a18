"""The task board over the bus (contract section 14): memory::task::post, claim, complete and
list; one claimer per task under concurrency across workers sharing one database; claims that
time out; refusals that change nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import nats

from tests.conftest import worker_config
from tests.support import Client, wait_until
from tests.test_life import sql
from worker.app import App


async def post(client: Client, title: str, **more: Any) -> str:
    body = await client.ok("memory::task::post", {"title": title, "createdBy": "boss", **more})
    task_id: str = body["taskId"]
    return task_id


async def claim(client: Client, agent: str) -> Any:
    return (await client.ok("memory::task::claim", {"agentId": agent}))["task"]


async def test_post_claim_complete_oldest_first_and_respecting_the_assignee(
    client: Client,
) -> None:
    first = await post(client, "write the report", description="weekly")
    for_b = await post(client, "review", assignee="b")
    third = await post(client, "file it")
    task = await claim(client, "a")
    assert task["taskId"] == first and task["status"] == "claimed" and task["claimedBy"] == "a"
    assert task["createdBy"] == "boss" and task["description"] == "weekly"
    assert task["result"] is None and task["completedAt"] is None
    assert (await claim(client, "a"))["taskId"] == third  # `review` is b's
    assert await claim(client, "a") is None
    assert (await claim(client, "b"))["taskId"] == for_b
    done = await client.ok(
        "memory::task::complete", {"agentId": "a", "taskId": first, "result": {"pages": 3}}
    )
    assert done["task"]["status"] == "completed" and done["task"]["result"] == {"pages": 3}
    assert isinstance(done["task"]["completedAt"], int)
    # Completing again is answered with the same task and changes nothing.
    again = await client.ok(
        "memory::task::complete", {"agentId": "a", "taskId": first, "result": "other"}
    )
    assert again == done
    completions = (await client.ok("memory::audit", {"agentId": "a"}))["events"]
    assert [e["trigger"] for e in completions].count("memory::task::complete") == 1


async def test_only_the_claimer_completes_and_unknown_tasks_are_404(
    client: Client, worker: App
) -> None:
    task_id = await post(client, "t")
    unclaimed = await client.call(
        "memory::task::complete", {"agentId": "a", "taskId": task_id, "result": 1}
    )
    assert unclaimed.code == "409" and "`$.taskId`" in unclaimed.body["error"]["message"]
    await claim(client, "a")
    for payload, code, field in (
        ({"agentId": "b", "taskId": task_id, "result": 1}, "409", "$.taskId"),
        ({"agentId": "a", "taskId": "nope", "result": 1}, "404", "$.taskId"),
        ({"agentId": "a", "taskId": task_id, "result": "x" * 70_000}, "413", "$.result"),
        ({"agentId": "a", "taskId": task_id, "result": None}, "400", "$.result"),
        ({"agentId": "a", "taskId": task_id}, "400", "`result`"),
    ):
        reply = await client.call("memory::task::complete", payload)
        assert reply.code == code, (payload, reply)
        assert field in reply.body["error"]["message"], (payload, reply.body)
    assert sql(worker, "SELECT status, claimed_by, result FROM tasks") == [("claimed", "a", None)]


async def test_bad_posts_and_claims_are_refused_and_write_nothing(
    client: Client, worker: App
) -> None:
    for trigger, payload, code, field in (
        ("memory::task::post", {"title": "t"}, "400", "`createdBy`"),
        ("memory::task::post", {"title": "", "createdBy": "a"}, "400", "$.title"),
        ("memory::task::post", {"title": "t", "createdBy": "a", "claimTimeout": -5}, "400",
         "$.claimTimeout"),
        ("memory::task::post", {"title": "t", "createdBy": "a", "description": "d" * 70_000},
         "413", "$.description"),
        ("memory::task::post", {"title": "t", "createdBy": "a", "assignee": None}, "400",
         "$.assignee"),
        ("memory::task::claim", {}, "400", "`agentId`"),
        ("memory::task::list", {"status": "lost"}, "400", "$.status"),
    ):  # fmt: skip
        reply = await client.call(trigger, payload)
        assert reply.code == code, (payload, reply)
        assert field in reply.body["error"]["message"], (payload, reply.body)
    assert (await client.raw("memory::task::post", b"[1]")).code == "400"
    assert sql(worker, "SELECT count(*) FROM tasks") == [(0,)]
    assert sql(worker, "SELECT count(*) FROM audit") == [(0,)]


async def test_a_claim_that_times_out_is_pending_again_and_its_claimer_cannot_complete(
    client: Client,
) -> None:
    task_id = await post(client, "slow", claimTimeout=1000)
    assert (await claim(client, "a"))["taskId"] == task_id
    assert await claim(client, "b") is None
    listed = await client.ok("memory::task::list", {"status": "claimed"})
    assert [t["taskId"] for t in listed["tasks"]] == [task_id]
    await asyncio.sleep(1.1)  # the claim's timeout passing is the behaviour tested
    pending = await client.ok("memory::task::list", {"status": "pending"})
    assert [(t["taskId"], t["claimedBy"]) for t in pending["tasks"]] == [(task_id, None)]
    assert (await client.ok("memory::task::list", {"status": "claimed"}))["tasks"] == []
    late = await client.call("memory::task::complete", {"agentId": "a", "taskId": task_id,
                                                        "result": 1})  # fmt: skip
    assert late.code == "409"
    retaken = await claim(client, "b")
    assert retaken["taskId"] == task_id and retaken["claimedBy"] == "b"


async def test_thirty_two_concurrent_claimers_over_three_workers_never_claim_a_task_twice(
    client: Client, worker: App, nats_url: str
) -> None:
    others = [App(worker_config(nats_url, Path(worker.config.db_path))) for _ in range(2)]
    for app in others:
        await app.start()
    try:
        posted = set(await asyncio.gather(*(post(client, f"task {n}") for n in range(200))))

        async def claimer(agent: str) -> list[str]:
            taken = []
            while (task := await claim(client, agent)) is not None:
                assert task["claimedBy"] == agent
                taken.append(task["taskId"])
            return taken

        claims = await asyncio.gather(*(claimer(f"agent-{n}") for n in range(32)))
    finally:
        for app in others:
            await app.stop()
    every = [task_id for taken in claims for task_id in taken]
    assert len(every) == len(set(every)) == 200
    assert set(every) == posted
    held = sql(worker, "SELECT claimed_by, count(*) FROM tasks GROUP BY 1")
    assert sum(count for _, count in held) == 200
    assert sql(worker, "SELECT count(*) FROM audit WHERE trigger = 'memory::task::claim'") == [
        (200,)
    ]


async def test_list_filters_by_status_and_assignee_and_pages_oldest_first(
    client: Client,
) -> None:
    ids = [await post(client, f"t{n}", **({"assignee": "b"} if n % 2 else {})) for n in range(7)]
    await claim(client, "a")  # t0
    seen, cursor = [], None
    while True:
        body = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = await client.ok("memory::task::list", body)
        seen += [t["taskId"] for t in page["tasks"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == ids
    for_b = await client.ok("memory::task::list", {"assignee": "b", "status": "pending"})
    assert [t["taskId"] for t in for_b["tasks"]] == ids[1::2]
    claimed = await client.ok("memory::task::list", {"status": "claimed"})
    assert [t["taskId"] for t in claimed["tasks"]] == ids[:1]
    wrong = await client.call("memory::task::list", {"status": "claimed", "cursor": cursor or "x"})
    assert wrong.code == "400"


async def test_task_writes_are_audited_with_task_ids_and_post_is_ingestible(
    nats_url: str, worker: App
) -> None:
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        await nc.jetstream().publish(
            "memory.ingest.task.post", msgspec.json.encode({"title": "queued", "createdBy": "c"})
        )
        await wait_until(
            lambda: sql(worker, "SELECT title FROM tasks") == [("queued",)], "the ingested task"
        )
        task = await claim(client, "a")
        await client.ok("memory::task::complete", {"agentId": "a", "taskId": task["taskId"],
                                                   "result": "ok"})  # fmt: skip
        events = (await client.ok("memory::audit", {}))["events"]
        assert [(e["trigger"], e["agentId"], e["source"], e["ids"]) for e in events] == [
            ("memory::task::post", "c", "ingest", [task["taskId"]]),
            ("memory::task::claim", "a", "bus", [task["taskId"]]),
            ("memory::task::complete", "a", "bus", [task["taskId"]]),
        ]
    finally:
        await nc.close()
