"""Topic assignment over the interleaved test set (tests/fixtures/topic_sessions.jsonl): each
topic mostly one thread, each thread mostly one topic, a resume query finds its thread, and
acknowledgements stay where they are (contract section 21; handlers/topics/assign.py)."""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import msgspec
import pytest

from handlers.topics.assign import Incoming, assign, place, resume_topic
from handlers.topics.profile import WINDOW, TopicProfile, profile_of, updated
from handlers.topics.words import keyword_stems
from tests.fixtures.topic_threads import ACKNOWLEDGEMENTS
from worker.embedders.minilm import MiniLM

SESSIONS = Path(__file__).resolve().parents[1] / "fixtures" / "topic_sessions.jsonl"
HELD_OUT = SESSIONS.with_name("topic_sessions_heldout.jsonl")
Vectors = dict[str, tuple[float, ...]]


def sessions(path: Path = SESSIONS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def replay(
    session: dict[str, Any], vectors: Vectors | None
) -> tuple[list[str], dict[str, TopicProfile]]:
    """Each message placed in turn, as the store does: its topic, and the topics at the end."""
    topics: dict[str, TopicProfile] = {}
    active: str | None = None
    placed = []
    for message in session["messages"]:
        vector = None if vectors is None else vectors[message["text"]]
        incoming = Incoming(role=message["role"], text=message["text"], vector=vector)
        topic_id, topics[topic_id], _ = place(topics, active, incoming, f"t{len(topics) + 1}")
        active = topic_id
        placed.append(topic_id)
    return placed, topics


def purity_completeness_resume(
    vectors: Vectors | None, path: Path = SESSIONS
) -> tuple[float, float, float]:
    """Purity: per message, the share of its topic's messages that are from the topic's
    majority thread. Completeness: per message, the share of its thread's messages that are
    in the thread's majority topic. Both averaged over all messages. Resume: the share of
    queries naming a thread whose picked topic's majority thread is that thread."""
    purity: list[float] = []
    completeness: list[float] = []
    hits = queries = 0
    for session in sessions(path):
        placed, topics = replay(session, vectors)
        truth = [message["thread"] for message in session["messages"]]
        by_topic: dict[str, Counter[str]] = {}
        by_thread: dict[str, Counter[str]] = {}
        for topic, thread in zip(placed, truth, strict=True):
            by_topic.setdefault(topic, Counter())[thread] += 1
            by_thread.setdefault(thread, Counter())[topic] += 1
        for topic, thread in zip(placed, truth, strict=True):
            purity.append(by_topic[topic].most_common(1)[0][1] / by_topic[topic].total())
            completeness.append(by_thread[thread].most_common(1)[0][1] / by_thread[thread].total())
        for query in session["queries"]:
            picked = resume_topic(query["query"], list(topics.values()))
            queries += 1
            hits += picked is not None and by_topic[picked].most_common(1)[0][0] == query["thread"]
    return (
        sum(purity) / len(purity),
        sum(completeness) / len(completeness),
        hits / queries,
    )


@pytest.fixture(scope="module")
def minilm_vectors() -> Vectors:
    texts = sorted({m["text"] for session in sessions() for m in session["messages"]})
    model = MiniLM()
    vectors = model.embed_passages(texts)
    return {
        text: tuple(float(x) for x in vector) for text, vector in zip(texts, vectors, strict=True)
    }


@pytest.mark.parametrize(
    ("path", "returning"), [(SESSIONS, 1.0), (HELD_OUT, 0.85)], ids=["tuned", "held-out"]
)
def test_the_test_set_has_40_sessions_of_2_to_4_threads_of_different_subjects(
    path: Path, returning: float
) -> None:
    """The sets the figures below are measured on are what issue 36 asks for: every session
    switches threads, and (all of the tuned set's, 39 of the held-out set's 44) come back to
    a thread they left."""
    found = sessions(path)
    assert len(found) >= 40
    returns = 0
    for session in found:
        threads = {m["thread"] for m in session["messages"]}
        assert 2 <= len(threads) <= 4
        assert {q["thread"] for q in session["queries"]} == threads
        switches = sum(a["thread"] != b["thread"] for a, b in pairwise(session["messages"]))
        assert switches >= 1
        returns += switches >= len(threads)  # at least one return to a thread already left
    assert returns >= returning * len(found), returns


def test_the_held_out_sets_threads_are_not_the_tuned_sets() -> None:
    """Written after the rules were tuned on the first set: no thread of it is in the other."""
    tuned = {m["thread"] for session in sessions() for m in session["messages"]}
    held = {m["thread"] for session in sessions(HELD_OUT) for m in session["messages"]}
    assert len(held) >= 12 and not tuned & held


def test_topics_by_keywords_alone_stay_near_the_bar() -> None:
    """Without vectors (embedder `none`, or before the vector is made), words alone keep
    purity at 0.9 and completeness at 0.895 or more on the tuned set (0.908 and 0.8995
    measured), and resume selection at 0.9 or more."""
    purity, completeness, resume = purity_completeness_resume(None)
    assert purity >= 0.9 and completeness >= 0.895, (purity, completeness)
    assert resume >= 0.9, resume


def test_topics_by_keywords_alone_on_the_held_out_set() -> None:
    """On the held-out set (other threads, other phrasings), words alone keep purity and
    completeness at 0.86 or more (0.868 and 0.880 measured; 0.794 and 0.866 before the rules
    for returns, words pointing back and words of any subject), resume selection at 0.85."""
    purity, completeness, resume = purity_completeness_resume(None, HELD_OUT)
    assert purity >= 0.86 and completeness >= 0.86, (purity, completeness)
    assert resume >= 0.85, resume


def test_a_message_saying_it_comes_back_joins_the_topic_it_shares_most_with() -> None:
    """ "One more Lisbon question: ..." shares one word of six with the trip, under the
    threshold: it joins the trip, not a new topic."""
    trip = updated(TopicProfile(topic_id="trip"), keyword_stems("Hotel in Lisbon for May"))
    bug = updated(TopicProfile(topic_id="bug"), keyword_stems("CI test fails near midnight UTC"))
    text = "One more Lisbon question: can we rent bikes, tandems, scooters or kayaks there?"
    found = assign(Incoming(role="user", text=text), [trip, bug], "bug")
    assert (found.topic_id, found.reason) == ("trip", "matched")


def test_a_message_opening_on_a_word_pointing_back_never_starts_a_topic() -> None:
    """ "It rounds the discount ..." says enough to open a topic but continues the active one."""
    bug = updated(TopicProfile(topic_id="bug"), keyword_stems("CI test fails near midnight UTC"))
    text = "It rounds the discount down whenever the basket holds vouchers"
    found = assign(Incoming(role="user", text=text), [bug], "bug")
    assert (found.topic_id, found.reason) == ("bug", "unmatched")


def test_a_short_opening_that_shares_nothing_starts_a_topic() -> None:
    """Four keywords that no topic has ("learn front crawl, breaststroke") are a new line of
    work, not a follow-up of the active one."""
    bug = updated(TopicProfile(topic_id="bug"), keyword_stems("CI test fails near midnight UTC"))
    text = "I'm 40 and want to learn front crawl properly. I can only do breaststroke."
    found = assign(Incoming(role="user", text=text), [bug], "bug")
    assert (found.topic_id, found.reason) == (None, "new")


@pytest.mark.parametrize(
    "text", ["Where do I start next month?", "Take three minutes, most of the time"]
)
def test_words_of_any_subject_are_not_keywords(text: str) -> None:
    """Time, counts and plain verbs join no two lines of work ("start", "month")."""
    assert keyword_stems(text) == ()


@pytest.mark.parametrize("ack", [*ACKNOWLEDGEMENTS, "Thanks, that helps!", "ok, will do"])
def test_a_short_acknowledgement_stays_in_the_active_topic(ack: str) -> None:
    """ "ok thanks" is too short to judge: it goes to the active topic even when another topic
    was talked of before, and even when the session has topics it matches no better."""
    trip = updated(TopicProfile(topic_id="trip"), keyword_stems("Flights to Lisbon in May"))
    bug = updated(TopicProfile(topic_id="bug"), keyword_stems("The CI test fails at midnight"))
    for active in ("trip", "bug"):
        found = assign(Incoming(role="user", text=ack), [trip, bug], active)
        assert (found.topic_id, found.reason) == (active, "short")


def test_a_message_goes_to_the_topic_it_shares_words_with_not_the_active_one() -> None:
    """A return to an earlier line of work joins that topic; an unmatched short follow-up stays
    in the active one; an unmatched message that says what it is about starts a new topic."""
    trip = updated(TopicProfile(topic_id="trip"), keyword_stems("Hotel in Lisbon for May"))
    bug = updated(TopicProfile(topic_id="bug"), keyword_stems("CI test fails near midnight UTC"))
    back = assign(
        Incoming(role="user", text="Back to Lisbon: is the hotel central?"), [trip, bug], "bug"
    )
    assert (back.topic_id, back.reason) == ("trip", "matched")
    follow = assign(Incoming(role="user", text="What about the second one?"), [trip, bug], "bug")
    assert follow.topic_id == "bug"
    new = assign(
        Incoming(role="user", text="My sourdough loaf comes out dense and flat every single bake"),
        [trip, bug],
        "bug",
    )
    assert (new.topic_id, new.reason) == (None, "new")
    first = assign(Incoming(role="user", text="hi"), [], None)
    assert first.topic_id is None


def test_a_profile_keeps_the_last_window_of_messages_and_all_its_words() -> None:
    """The window drops the oldest message's words; the vocabulary (for resume) keeps them;
    a message without keywords does not push words out."""
    profile = TopicProfile(topic_id="t")
    profile = updated(profile, ("lisbon",))
    for number in range(WINDOW):
        profile = updated(profile, (f"word{number}",))
    profile = updated(profile, ())
    assert "lisbon" not in profile.recent_stems() and "word0" in profile.recent_stems()
    assert profile.vocabulary["lisbon"] == 1
    assert resume_topic("the Lisbon trip", [profile, TopicProfile(topic_id="u")]) == "t"
    assert resume_topic("nothing shared", [profile]) is None


def test_place_mints_nothing_itself_and_adds_the_message_to_its_topic() -> None:
    """The new topic's id is the caller's; the returned profile holds the message's words
    and its vector as the topic's meaning."""
    topic_id, profile, found = place(
        {}, None, Incoming(role="user", text="Lisbon hotel", vector=(3.0, 4.0)), "new-1"
    )
    assert (topic_id, found.reason) == ("new-1", "new")
    assert profile.recent == (("lisbon", "hotel"),) and profile.meaning == pytest.approx((0.6, 0.8))


def test_a_profile_rebuilt_from_its_messages_is_the_one_placing_left_and_survives_json() -> None:
    """`profile_of` over a topic's messages equals the profile placing them one by one left
    (so a store may keep profiles or rebuild them), and a profile round-trips through JSON."""
    session = sessions()[0]
    placed, topics = replay(session, None)
    for topic_id, profile in topics.items():
        mine = [
            (m["text"], None)
            for m, t in zip(session["messages"], placed, strict=True)
            if t == topic_id
        ]
        assert profile_of(topic_id, mine) == profile
        assert msgspec.json.decode(msgspec.json.encode(profile), type=TopicProfile) == profile
