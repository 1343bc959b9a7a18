"""Topics over the bus (contract section 21): every message stored with a sessionId joins a topic
of its session, the store's reply names it, `topicId` on store decides it, and
memory::topic::list and memory::topic::get read topics and their messages, per tenant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.shipped_nats import tenant_bus
from tests.support import Client

TRIP = [
    ("user", "I'm planning a trip to Lisbon in May with my partner, flights and a hotel."),
    ("assistant", "Lisbon in May is lovely. Alfama hotels are central; flights from London."),
    ("user", "Which hotel in Alfama would you pick for a quiet trip?"),
]
BUG = [
    ("user", "Our Python service crashes with a KeyError when the config file lacks a port."),
    ("assistant", "The crash comes from reading config['port'] directly. I'll check the loader."),
]


async def say(client: Client, agent: str, session: str, turns: Any, **more: Any) -> list[Any]:
    return [
        await client.store(agent, text, role=role, sessionId=session, **more)
        for role, text in turns
    ]


async def test_a_message_stored_in_a_session_joins_a_topic_and_the_reply_names_it(
    client: Client,
) -> None:
    """The first message starts a topic; its follow-ups join it; a user's message about another
    subject starts a new one; returning by naming the old subject joins the old topic; a store
    without a sessionId gets no topic."""
    trip = await say(client, "a", "s", TRIP)
    ids = {reply["topicId"] for reply in trip}
    assert len(ids) == 1 and all(isinstance(i, str) and i for i in ids)
    bug = await say(client, "a", "s", BUG)
    assert {reply["topicId"] for reply in bug} != ids and len({r["topicId"] for r in bug}) == 1
    back = await client.store(
        "a", "Back to Lisbon: is the Alfama hotel near the tram?", sessionId="s"
    )
    assert back["topicId"] in ids
    ack = await client.store("a", "ok thanks", sessionId="s")
    assert ack["topicId"] == back["topicId"]
    plain = await client.store("a", "a note with no session")
    assert "topicId" not in plain


async def test_topic_list_gives_each_topic_most_recently_active_first_with_its_text(
    client: Client,
) -> None:
    """Each topic with its title, labels, summary, open loops, count, times and `active`;
    the topic of the latest message first and active."""
    trip = (await say(client, "a", "s", TRIP, timestamp=1000))[0]["topicId"]
    bug = (await say(client, "a", "s", BUG, timestamp=2000))[0]["topicId"]
    topics = (await client.ok("memory::topic::list", {"agentId": "a", "sessionId": "s"}))["topics"]
    assert [t["id"] for t in topics] == [bug, trip]
    assert [t["active"] for t in topics] == [True, False]
    first, second = topics
    assert first["messageCount"] == 2 and second["messageCount"] == 3
    assert second["firstAt"] == 1000 and second["lastActiveAt"] == 1000
    assert first["sessionId"] == "s"
    assert "Lisbon" in second["title"] and "lisbon" in [x.lower() for x in second["labels"]]
    assert second["summary"].startswith("3 messages (1 assistant, 2 user).")
    loops = second["openLoops"]
    assert [(loop["kind"], loop["role"]) for loop in loops] == [("question", "user")]
    assert loops[0]["text"].startswith("Which hotel in Alfama")
    promise = first["openLoops"]
    assert [(loop["kind"], loop["role"]) for loop in promise] == [("promise", "assistant")]


async def test_a_question_answered_by_the_other_role_closes_its_loop(client: Client) -> None:
    """The trip's open question is closed by the assistant's answer in that topic."""
    replies = await say(client, "a", "s", TRIP)
    await client.store(
        "a", "I'd pick the Memmo Alfama hotel for a quiet Lisbon trip.", role="assistant",
        sessionId="s",
    )  # fmt: skip
    got = await client.ok("memory::topic::get", {"agentId": "a", "topicId": replies[0]["topicId"]})
    assert got["topic"]["openLoops"] == []


async def test_a_store_naming_topic_id_decides_the_topic(client: Client) -> None:
    """A new id starts that topic; an existing topic of the session is joined whatever the
    words say; a topic of another session, an empty id, or a topicId without a sessionId is
    refused with 400 naming topicId, and nothing is stored."""
    named = await client.store(
        "a", "Totally about cooking risotto today", sessionId="s", topicId="t1"
    )
    assert named["topicId"] == "t1"
    other = await client.store(
        "a", "Python KeyError in the config loader", sessionId="s", topicId="t1"
    )
    assert other["topicId"] == "t1"
    for payload, where in [
        ({"sessionId": "s2", "topicId": "t1"}, "another session"),
        ({"sessionId": "s", "topicId": ""}, "length"),
        ({"topicId": "t9"}, "sessionId"),
        ({"sessionId": "s", "topicId": "x" * 257}, "length"),
    ]:
        reply = await client.call(
            "memory::store", {"agentId": "a", "content": "refused text", **payload}
        )
        assert reply.code == "400" and "topicId" in str(reply.description), (payload, reply)
        assert where in str(reply.description)
    assert "refused text" not in [m["content"] for m in await client.recall("a", "refused text")]


async def test_topic_get_gives_its_messages_in_session_order_in_pages(client: Client) -> None:
    """Positions are the session's (as memory::session::get counts them); `limit` and
    `nextCursor` page through; an unknown topic is 404 naming topicId; a bad limit is 400."""
    trip = await say(client, "a", "s", TRIP)
    await say(client, "a", "s", BUG)
    await client.store("a", "Back to Lisbon: is the Alfama hotel near the tram?", sessionId="s")
    ask = {"agentId": "a", "topicId": trip[0]["topicId"], "limit": 3}
    page = await client.ok("memory::topic::get", ask)
    assert [m["position"] for m in page["messages"]] == [1, 2, 3]
    assert [m["id"] for m in page["messages"]] == [r["id"] for r in trip]
    assert (
        page["messages"][0]["content"] == TRIP[0][1] and page["messages"][1]["role"] == "assistant"
    )
    assert page["topic"]["messageCount"] == 4 and page["topic"]["active"] is True
    rest = await client.ok("memory::topic::get", {**ask, "cursor": page["nextCursor"]})
    assert [m["position"] for m in rest["messages"]] == [6] and rest["nextCursor"] is None
    missing = await client.call("memory::topic::get", {"agentId": "a", "topicId": "nope"})
    assert missing.code == "404" and "topicId" in str(missing.description)
    bad = await client.call("memory::topic::get", {**ask, "limit": 0})
    assert bad.code == "400" and "$.limit" in str(bad.description)
    unknown = await client.call("memory::topic::list", {"agentId": "a", "sessionId": "zz"})
    assert unknown.code == "404" and "sessionId" in str(unknown.description)


async def test_two_tenants_with_one_agent_and_session_see_only_their_own_topics(
    tmp_path: Path,
) -> None:
    async with tenant_bus(tmp_path) as bus:
        alice, carol = await bus.user("alice"), await bus.user("carol")
        mine = await alice.store("a1", TRIP[0][1], sessionId="s")
        await carol.store("a1", BUG[0][1], sessionId="s")
        listed = await alice.ok("memory::topic::list", {"agentId": "a1", "sessionId": "s"})
        assert [t["id"] for t in listed["topics"]] == [mine["topicId"]]
        seen = await carol.call("memory::topic::get", {"agentId": "a1", "topicId": mine["topicId"]})
        assert seen.code == "404"
        theirs = await carol.ok("memory::topic::list", {"agentId": "a1", "sessionId": "s"})
        assert "Lisbon" not in str(theirs)


async def test_a_stores_audit_event_names_the_topic_it_wrote_and_its_count_never_its_text(
    client: Client,
) -> None:
    """Each store into a session is audited with its topic's id and message count after it
    (1: the store started the topic); a store without a session names no topic; the topic's
    title and the message's words appear nowhere in the audit."""
    trip = await say(client, "a", "s", TRIP)
    bug = await say(client, "a", "s", BUG)
    plain = await client.store("a", "a note with no session")
    events = (await client.ok("memory::audit", {"agentId": "a"}))["events"]
    stores = [e for e in events if e["trigger"] == "memory::store"]
    assert [e["ids"] for e in stores] == [[r["id"]] for r in [*trip, *bug, plain]]
    topics = [e.get("detail", {}).get("topic") for e in stores]
    trip_id, bug_id = trip[0]["topicId"], bug[0]["topicId"]
    assert topics == [
        {"id": trip_id, "messageCount": 1},
        {"id": trip_id, "messageCount": 2},
        {"id": trip_id, "messageCount": 3},
        {"id": bug_id, "messageCount": 1},
        {"id": bug_id, "messageCount": 2},
        None,
    ]
    audited = str(events)
    assert "Lisbon" not in audited and "KeyError" not in audited


async def test_a_duplicate_stored_into_a_new_session_is_audited_with_the_topic_it_joined(
    client: Client,
) -> None:
    """The same content stored into another session joins that session's list and a topic of
    it: its audit row is a store's, naming the memory and the topic (with `deduplicated`), as a
    first store's is; storing it again into the same session changes nothing and adds no row."""
    first = await client.store("a", TRIP[0][1], role="user", sessionId="s1")
    again = await client.store("a", TRIP[0][1], role="user", sessionId="s2")
    assert again["deduplicated"] is True and again["id"] == first["id"]
    assert again["topicId"] != first["topicId"]
    await client.store("a", TRIP[0][1], role="user", sessionId="s2")  # nothing new
    events = (await client.ok("memory::audit", {"agentId": "a"}))["events"]
    stores = [e for e in events if e["trigger"] == "memory::store"]
    assert [(e["ids"], e.get("detail")) for e in stores] == [
        ([first["id"]], {"topic": {"id": first["topicId"], "messageCount": 1}}),
        (
            [first["id"]],
            {"deduplicated": True, "topic": {"id": again["topicId"], "messageCount": 1}},
        ),
    ]
    listed = await client.ok("memory::topic::list", {"agentId": "a", "sessionId": "s2"})
    assert [t["id"] for t in listed["topics"]] == [again["topicId"]]
