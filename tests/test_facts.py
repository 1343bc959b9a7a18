"""The fact store over the bus (contract section 19): assert, end, retract and query with valid
time and record time, the timeline of single-valued predicates, likes and dislikes ending each
other, out-of-order asserts, retraction reopening what it ended, refusals naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from schema.facts import FactAssertRequest, FactEndRequest, FactQueryRequest, FactRetractRequest
from tests.conftest import worker_config
from tests.support import Client
from worker.app import App
from worker.client import MemoryClient

DAY = 86_400_000
T0 = 1_600_000_000_000
A = {"agentId": "a"}


async def assert_fact(client: Client, subject: str, predicate: str, obj: str, **more: Any) -> Any:
    return await client.ok(
        "memory::fact::assert",
        {**A, "subject": subject, "predicate": predicate, "object": obj, **more},
    )


async def query(client: Client, **fields: Any) -> list[Any]:
    facts: list[Any] = (await client.ok("memory::fact::query", {**A, **fields}))["facts"]
    return facts


def values(facts: list[Any]) -> list[tuple[str, str, str]]:
    return [(f["predicate"], f["object"], f["status"]) for f in facts]


async def test_a_new_value_of_a_single_valued_predicate_supersedes_the_old_one_which_stays(
    client: Client,
) -> None:
    """Paris then Berlin: Paris is past until Berlin's validFrom, superseded by Berlin; the
    current answer is Berlin, `asOf` inside Paris's interval is Paris, history has both."""
    paris = await assert_fact(client, "Maria", "lives_in", "Paris", validFrom=T0)
    assert paris["created"] and paris["ended"] == []
    fact = paris["fact"]
    assert fact["statement"] == "Maria lives in Paris" and fact["status"] == "current"
    assert fact["validTo"] is None and fact["expiredAt"] is None and fact["confidence"] == 1
    assert fact["sources"] == [] and fact["supersededBy"] is None
    assert isinstance(fact["recordedAt"], int)
    berlin = await assert_fact(client, "maria", "lives_in", "Berlin", validFrom=T0 + 10 * DAY)
    assert berlin["created"] and berlin["ended"] == [fact["id"]]
    assert values(await query(client)) == [("lives_in", "Berlin", "current")]
    held = await query(client, asOf=T0 + DAY)
    assert values(held) == [("lives_in", "Paris", "past")]
    assert held[0]["validTo"] == T0 + 10 * DAY
    assert held[0]["supersededBy"] == berlin["fact"]["id"]
    assert await query(client, asOf=T0 - 1) == []
    history = await query(client, includeHistory=True)
    assert [f["object"] for f in history] == ["Paris", "Berlin"]


async def test_an_assert_that_arrives_late_takes_its_place_in_the_timeline(client: Client) -> None:
    """Berlin (day 10) arrives before Paris (day 0): Paris is created past, ending at day 10,
    superseded by Berlin, which stays current; a value between them cuts Paris short."""
    berlin = await assert_fact(client, "Maria", "lives_in", "Berlin", validFrom=T0 + 10 * DAY)
    paris = await assert_fact(client, "Maria", "lives_in", "Paris", validFrom=T0)
    assert paris["created"] and paris["ended"] == []
    assert paris["fact"]["status"] == "past" and paris["fact"]["validTo"] == T0 + 10 * DAY
    assert paris["fact"]["supersededBy"] == berlin["fact"]["id"]
    rome = await assert_fact(client, "Maria", "lives_in", "Rome", validFrom=T0 + 5 * DAY)
    assert rome["ended"] == [paris["fact"]["id"]] and rome["fact"]["validTo"] == T0 + 10 * DAY
    assert values(await query(client, asOf=T0 + 6 * DAY)) == [("lives_in", "Rome", "past")]
    assert values(await query(client)) == [("lives_in", "Berlin", "current")]


async def test_the_same_value_confirms_the_fact_compared_without_case_spaces_or_the(
    client: Client,
) -> None:
    """The same subject, predicate and object holding at validFrom, or current: no new fact;
    the higher confidence and the earlier validFrom win; shown as first written."""
    first = await assert_fact(
        client, "Maria", "lives_in", "The  Hague", validFrom=T0 + DAY, confidence=0.5
    )
    again = await assert_fact(client, " maria".strip(), "lives_in", "hague", validFrom=T0)
    assert not again["created"] and again["fact"]["id"] == first["fact"]["id"]
    assert again["fact"]["object"] == "The  Hague" and again["fact"]["subject"] == "Maria"
    assert again["fact"]["confidence"] == 1 and again["fact"]["validFrom"] == T0
    later = await assert_fact(client, "MARIA", "lives_in", "the hague", validFrom=T0 + 9 * DAY)
    assert not later["created"] and later["fact"]["validFrom"] == T0
    assert len(await query(client, includeHistory=True)) == 1


async def test_likes_and_dislikes_of_one_thing_end_each_other_other_things_stay(
    client: Client,
) -> None:
    await assert_fact(client, "user", "likes", "jazz", validFrom=T0)
    await assert_fact(client, "user", "likes", "tea", validFrom=T0)
    dislike = await assert_fact(client, "user", "dislikes", "Jazz", validFrom=T0 + DAY)
    assert len(dislike["ended"]) == 1
    assert values(await query(client)) == [
        ("dislikes", "Jazz", "current"),
        ("likes", "tea", "current"),
    ]
    assert values(await query(client, asOf=T0)) == [
        ("likes", "jazz", "past"),
        ("likes", "tea", "current"),
    ]
    # A multi-valued predicate keeps every value.
    await assert_fact(client, "user", "speaks", "French", validFrom=T0)
    await assert_fact(client, "user", "speaks", "German", validFrom=T0 + DAY)
    assert [f["object"] for f in await query(client, predicate="speaks")] == ["French", "German"]


async def test_retracting_a_value_reopens_what_it_ended_and_counts_twice_without_change(
    client: Client,
) -> None:
    paris = await assert_fact(client, "Maria", "lives_in", "Paris", validFrom=T0)
    berlin = await assert_fact(client, "Maria", "lives_in", "Berlin", validFrom=T0 + DAY)
    ids = [berlin["fact"]["id"], "no-such-fact"]
    reply = await client.ok("memory::fact::retract", {**A, "ids": ids})
    assert reply == {"retracted": 1, "missing": ["no-such-fact"]}
    [current] = await query(client)
    assert current["id"] == paris["fact"]["id"] and current["validTo"] is None
    assert current["supersededBy"] is None
    assert await query(client, asOf=T0 + 2 * DAY) == [current]
    history = await query(client, includeHistory=True)
    retracted = [f for f in history if f["status"] == "retracted"]
    assert [f["id"] for f in retracted] == [berlin["fact"]["id"]]
    expired = retracted[0]["expiredAt"]
    assert isinstance(expired, int)
    again = await client.ok("memory::fact::retract", {**A, "ids": [berlin["fact"]["id"]]})
    assert again == {"retracted": 1, "missing": []}
    history = await query(client, includeHistory=True)
    assert [f["expiredAt"] for f in history if f["status"] == "retracted"] == [expired]


async def test_end_closes_current_values_but_not_one_that_began_after_it(client: Client) -> None:
    """`end` without an object ends every current value begun by `at`; a value begun after `at`
    is untouched; a later assert of a new value starts afresh; `at` in the future is refused."""
    await assert_fact(client, "user", "speaks", "French", validFrom=T0)
    await assert_fact(client, "user", "speaks", "German", validFrom=T0 + 5 * DAY)
    ended = await client.ok(
        "memory::fact::end",
        {**A, "subject": "User", "predicate": "speaks", "at": T0 + 2 * DAY},
    )
    assert len(ended["ended"]) == 1
    assert values(await query(client)) == [("speaks", "German", "current")]
    assert (await query(client, asOf=T0 + DAY))[0]["object"] == "French"
    assert await query(client, asOf=T0 + 3 * DAY) == []
    none = await client.ok(
        "memory::fact::end", {**A, "subject": "user", "predicate": "speaks", "object": "Latin"}
    )
    assert none == {"ended": []}
    future = await client.call(
        "memory::fact::end", {**A, "subject": "user", "predicate": "speaks", "at": 2**52}
    )
    assert future.code == "400" and "`$.at`" in future.body["error"]["message"]


async def test_refusals_name_the_field_and_change_nothing(client: Client) -> None:
    memory = await client.store("a", "a note")
    fact = {"subject": "u", "predicate": "p", "object": "x"}
    assert_ = "memory::fact::assert"
    cases: list[tuple[str, dict[str, Any], str]] = [
        (assert_, {**fact, "predicate": "Lives In"}, "$.predicate"),
        (assert_, {**fact, "object": ""}, "$.object"),
        (assert_, {**fact, "sources": [memory["id"], "nope"]}, "$.sources[1]"),
        (assert_, {**fact, "confidence": 2}, "$.confidence"),
        ("memory::fact::query", {"asOf": T0, "includeHistory": True}, "$.includeHistory"),
        ("memory::fact::query", {"limit": 1001}, "$.limit"),
        ("memory::fact::retract", {"ids": []}, "$.ids"),
    ]
    for trigger, body, field in cases:
        reply = await client.call(trigger, {**A, **body})
        assert reply.code == "400", (trigger, body)
        assert f"`{field}`" in reply.body["error"]["message"], (field, reply.body)
    assert await query(client, includeHistory=True) == []


async def test_sources_are_the_agents_memories_and_queries_filter_and_order(
    client: Client,
) -> None:
    memory = await client.store("a", "Maria said she lives in Lisbon")
    fact = await assert_fact(
        client, "Maria", "lives_in", "Lisbon", validFrom=T0, sources=[memory["id"]]
    )
    assert fact["fact"]["sources"] == [memory["id"]]
    await assert_fact(client, "Bob", "job", "nurse", validFrom=T0)
    await assert_fact(client, "alice", "age", "30", validFrom=T0)
    assert [f["subject"] for f in await query(client)] == ["alice", "Bob", "Maria"]
    assert [f["object"] for f in await query(client, subject="bob")] == ["nurse"]
    assert [f["subject"] for f in await query(client, object="LISBON")] == ["Maria"]
    assert [f["subject"] for f in await query(client, predicate="age")] == ["alice"]
    assert len(await query(client, limit=2)) == 2
    other = await client.ok("memory::fact::query", {"agentId": "b"})
    assert other == {"facts": []}


async def test_fact_writes_are_audited_with_ids_and_counts_never_text(client: Client) -> None:
    paris = await assert_fact(client, "Maria", "lives_in", "Paris", validFrom=T0)
    berlin = await assert_fact(client, "Maria", "lives_in", "Berlin", validFrom=T0 + DAY)
    await client.ok("memory::fact::end", {**A, "subject": "Maria", "predicate": "lives_in"})
    await client.ok("memory::fact::retract", {**A, "ids": [paris["fact"]["id"]]})
    events = (await client.ok("memory::audit", {"agentId": "a"}))["events"]
    found = [(e["trigger"], e.get("ids"), e.get("detail")) for e in events]
    p, b = paris["fact"]["id"], berlin["fact"]["id"]
    assert found == [
        ("memory::fact::assert", [p], {"created": True, "ended": []}),
        ("memory::fact::assert", [b], {"created": True, "ended": [p]}),
        ("memory::fact::end", [b], None),
        ("memory::fact::retract", [p], None),
    ]
    encoded = msgspec.json.encode(events)
    assert b"Maria" not in encoded and b"Paris" not in encoded and b"lives" not in encoded


async def test_the_typed_client_asserts_ends_retracts_and_queries_facts(
    nats_url: str, worker: App
) -> None:
    config = worker_config("", Path("unused.db"))
    async with await MemoryClient.connect(nats_url, config=config) as memory:
        made = await memory.fact_assert(
            FactAssertRequest(agent_id="a", subject="Maria", predicate="job", object="nurse")
        )
        assert made.created and made.fact.statement == "Maria job nurse"
        found = await memory.fact_query(FactQueryRequest(agent_id="a", subject="maria"))
        assert found.facts == [made.fact]
        ended = await memory.fact_end(
            FactEndRequest(agent_id="a", subject="Maria", predicate="job")
        )
        assert ended.ended == [made.fact.id]
        gone = await memory.fact_retract(FactRetractRequest(agent_id="a", ids=[made.fact.id]))
        assert gone.retracted == 1
        history = await memory.fact_query(FactQueryRequest(agent_id="a", include_history=True))
        assert [fact.status for fact in history.facts] == ["retracted"]
