"""Topics follow messages that leave a session or are forgotten (contract section 21), over
the bus: delete, eviction, compaction and repair take messages out of (or rewrite) a session's
list, and each topic's messageCount and memory::topic::get listing follow, a topic with no
message left removed; forget takes a message's text out of its topic's title, summary and open
loops; compaction and repair keep each remaining message's topic."""

from __future__ import annotations

from typing import Any

from tests.support import Client
from tests.test_topics_bus import BUG, TRIP, say

QUESTION = "Which hotel in Alfama would you pick for a quiet trip?"


async def topics(client: Client) -> dict[str, Any]:
    listed = await client.ok("memory::topic::list", {"agentId": "a", "sessionId": "s"})
    return {topic["id"]: topic for topic in listed["topics"]}


async def listing(client: Client, topic_id: str) -> list[str]:
    got = await client.ok("memory::topic::get", {"agentId": "a", "topicId": topic_id})
    assert got["topic"]["messageCount"] == len(got["messages"])
    return [message["id"] for message in got["messages"]]


async def test_deleting_messages_lowers_their_topics_count_and_removes_an_emptied_topic(
    client: Client,
) -> None:
    trip = await say(client, "a", "s", TRIP)
    bug = await say(client, "a", "s", BUG)
    trip_id, bug_id = trip[0]["topicId"], bug[0]["topicId"]
    await client.ok("memory::delete", {"agentId": "a", "ids": [trip[0]["id"]]})
    assert (await topics(client))[trip_id]["messageCount"] == 2
    assert await listing(client, trip_id) == [trip[1]["id"], trip[2]["id"]]
    await client.ok("memory::delete", {"agentId": "a", "ids": [r["id"] for r in bug]})
    assert set(await topics(client)) == {trip_id}
    gone = await client.call("memory::topic::get", {"agentId": "a", "topicId": bug_id})
    assert not gone.ok and "topicId" in str(gone.body)


async def test_forgetting_a_message_takes_its_text_out_of_its_topic_and_unforget_returns_it(
    client: Client,
) -> None:
    """The forgotten question leaves the topic's open loops, title and summary (its place in
    the list stays, as in memory::session::get); unforgetting brings its open loop back."""
    trip = await say(client, "a", "s", TRIP)
    trip_id = trip[0]["topicId"]
    before = (await topics(client))[trip_id]
    assert [loop["text"] for loop in before["openLoops"]] == [QUESTION]
    await client.ok("memory::forget", {"agentId": "a", "ids": [trip[2]["id"]]})
    after = (await topics(client))[trip_id]
    assert after["openLoops"] == [] and after["messageCount"] == 3
    assert "Alfama would you pick" not in str(after)
    await client.ok("memory::unforget", {"agentId": "a", "ids": [trip[2]["id"]]})
    again = (await topics(client))[trip_id]
    assert [loop["text"] for loop in again["openLoops"]] == [QUESTION]


async def test_eviction_of_forgotten_messages_lowers_their_topics_count(client: Client) -> None:
    trip = await say(client, "a", "s", TRIP)
    trip_id = trip[0]["topicId"]
    await client.ok("memory::forget", {"agentId": "a", "ids": [trip[0]["id"]]})
    evicted = await client.ok("memory::evict", {"agentId": "a", "forgottenRetention": 0})
    assert evicted["purged"] == 1
    assert (await topics(client))[trip_id]["messageCount"] == 2
    assert await listing(client, trip_id) == [trip[1]["id"], trip[2]["id"]]


async def test_compaction_keeps_each_remaining_messages_topic_and_drops_an_emptied_topic(
    client: Client,
) -> None:
    """The trip's three messages are summarised away: its topic goes; the bug's two kept
    messages stay in the bug's topic, which becomes the only (and active) one."""
    trip = await say(client, "a", "s", TRIP)
    bug = await say(client, "a", "s", BUG)
    done = await client.ok(
        "memory::session::compact",
        {"agentId": "a", "sessionId": "s", "threshold": 4, "keepRecent": 2},
    )
    assert done["compacted"] is True
    bug_id = bug[0]["topicId"]
    left = await topics(client)
    assert set(left) == {bug_id} and trip[0]["topicId"] not in left
    assert left[bug_id]["messageCount"] == 2 and left[bug_id]["active"] is True
    assert await listing(client, bug_id) == [r["id"] for r in bug]


async def test_repair_keeps_topics_and_a_merged_run_stays_in_its_topic(client: Client) -> None:
    """Two user messages in a row in the trip are merged by repair into one new message: it is
    in the trip's topic, whose count follows (5 -> 4); the bug's topic is untouched."""
    trip = await say(client, "a", "s", TRIP)
    more = await client.store("a", "Also, is it near the Lisbon tram line?", sessionId="s")
    answer = await client.store(
        "a", "The Alfama hotel is two minutes from the tram.", sessionId="s", role="assistant"
    )
    trip_id = trip[0]["topicId"]
    assert more["topicId"] == trip_id == answer["topicId"]
    bug = await say(client, "a", "s", BUG)
    repaired = await client.ok("memory::session::repair", {"agentId": "a", "sessionId": "s"})
    assert repaired["stats"]["consecutiveMerged"] == 1
    left = await topics(client)
    assert left[trip_id]["messageCount"] == 4 and left[bug[0]["topicId"]]["messageCount"] == 2
    ids = await listing(client, trip_id)
    assert ids[:2] == [trip[0]["id"], trip[1]["id"]] and ids[3] == answer["id"]
    assert ids[2] not in (trip[2]["id"], more["id"])
    assert await listing(client, bug[0]["topicId"]) == [r["id"] for r in bug]


async def test_a_topics_text_follows_its_latest_message_though_no_store_remakes_it(
    client: Client,
) -> None:
    """The third message's words are in the topic's labels and summary as list and get show
    them, though the stores wrote the text of the first message only."""
    trip = await say(client, "a", "s", TRIP)
    trip_id = trip[0]["topicId"]
    listed = (await topics(client))[trip_id]
    got = (await client.ok("memory::topic::get", {"agentId": "a", "topicId": trip_id}))["topic"]
    assert listed == got
    assert got["labels"][0] == "hotel"  # the only word of all three messages
    assert "Which hotel in Alfama would you pick" in got["summary"]
    assert got["summary"].startswith("3 messages (1 assistant, 2 user).")


async def test_a_store_after_a_forget_never_brings_the_forgotten_text_back(
    client: Client,
) -> None:
    """The forgotten question stays out of the topic's title, labels and summary when later
    messages join the topic."""
    trip = await say(client, "a", "s", TRIP)
    trip_id = trip[0]["topicId"]
    await client.ok("memory::forget", {"agentId": "a", "ids": [trip[2]["id"]]})
    more = [("assistant", "For Lisbon in May, book the flights soon; hotels fill up.")]
    assert (await say(client, "a", "s", more))[0]["topicId"] == trip_id
    after = (await topics(client))[trip_id]
    assert after["messageCount"] == 4 and "book the flights" in after["summary"]
    assert "Alfama would you pick" not in str(after) and "quiet" not in str(after)
