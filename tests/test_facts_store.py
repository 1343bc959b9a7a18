"""Facts from what is stored (contract section 19): memory::store reads a user or assistant
text's first-person statements and asserts them from the memory's timestamp with the memory as
their source, in the store's own transaction; its reply names them (`facts`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats

from tests.conftest import worker_config
from tests.support import Client
from worker.app import App

DAY = 86_400_000
T0 = 1_600_000_000_000


async def facts(client: Client, agent: str = "a", **fields: Any) -> list[Any]:
    found: list[Any] = (await client.ok("memory::fact::query", {"agentId": agent, **fields}))[
        "facts"
    ]
    return found


async def test_a_stored_statement_becomes_a_fact_from_the_memorys_time_a_later_one_supersedes(
    client: Client,
) -> None:
    paris = await client.store("a", "Hello! I live in Paris, near the river.", timestamp=T0)
    assert len(paris["facts"]) == 1
    [fact] = await facts(client)
    assert fact["id"] == paris["facts"][0] and fact["statement"] == "user lives in Paris"
    assert fact["validFrom"] == T0 and fact["sources"] == [paris["id"]]
    berlin = await client.store("a", "Big news: I moved to Berlin.", timestamp=T0 + 9 * DAY)
    [current] = await facts(client)
    assert current["object"] == "Berlin" and current["id"] == berlin["facts"][0]
    [then] = await facts(client, asOf=T0 + DAY)
    assert then["object"] == "Paris" and then["validTo"] == T0 + 9 * DAY
    gone = await client.store("a", "I no longer live in Berlin.", timestamp=T0 + 20 * DAY)
    assert gone["facts"] == [] and await facts(client) == []
    [ended] = await facts(client, asOf=T0 + 10 * DAY)
    assert ended["validTo"] == T0 + 20 * DAY
    events = (await client.ok("memory::audit", {"agentId": "a"}))["events"]
    assert [(e["trigger"], e.get("ids")) for e in events] == [
        ("memory::store", [paris["id"]]),
        ("memory::fact::assert", paris["facts"]),
        ("memory::store", [berlin["id"]]),
        ("memory::fact::assert", berlin["facts"]),
        ("memory::store", [gone["id"]]),
        ("memory::fact::end", berlin["facts"]),
    ]


async def test_the_subject_is_the_speaker_else_the_role_and_system_texts_are_not_read(
    client: Client,
) -> None:
    maria = await client.store("a", "I live in Lisbon", metadata={"speaker": " Maria "})
    bot = await client.store("a", "I live in the cloud", role="assistant")
    system = await client.store("a", "I live in a container", role="system")
    blank = await client.store("a", "I live in Oslo", metadata={"speaker": ""})
    assert [len(maria["facts"]), len(bot["facts"]), len(blank["facts"])] == [1, 1, 1]
    assert system["facts"] == []
    subjects = sorted((f["subject"], f["object"]) for f in await facts(client))
    assert subjects == [("Maria", "Lisbon"), ("assistant", "the cloud"), ("user", "Oslo")]


async def test_a_deduplicated_store_names_no_facts_and_a_repeat_confirms_the_fact(
    client: Client,
) -> None:
    first = await client.store("a", "I live in Paris.", timestamp=T0)
    again = await client.store("a", "I live in Paris.", timestamp=T0 + DAY)
    assert again["deduplicated"] and again["facts"] == []
    other = await client.store("a", "As I said, I live in paris.", timestamp=T0 + DAY)
    assert other["facts"] == first["facts"]
    [fact] = await facts(client, includeHistory=True)
    assert sorted(fact["sources"]) == sorted([first["id"], other["id"]])
    assert (await client.store("a", "Nothing stated here."))["facts"] == []


async def test_with_facts_off_a_store_asserts_nothing(nats_url: str, tmp_path: Path) -> None:
    app = App(worker_config(nats_url, tmp_path / "memory.db", facts="off"))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        reply = await client.store("a", "I live in Paris.")
        assert reply["facts"] == [] and reply["stored"]
        assert await facts(client) == []
    finally:
        await nc.close()
        await app.stop()
