"""The LLM's text of a topic as pure steps (handlers/topics/titles.py): when it is asked for, how
its answer is read, when its write applies, and how long it holds over the built-in text."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import apsw
import msgspec
import pytest

from handlers.sanitize import Sanitized
from handlers.topics.extract import asks_llm
from handlers.topics.reading import find_topic
from handlers.topics.titles import Titled, apply_titled, read_answer, title_sample
from schema.memory import StoreRequest
from tests.test_transfer import migrated
from worker.triggers.preparing import Prepared
from worker.triggers.storing import apply_store, decide_store

AGENT = ("", "a")
Role = Literal["user", "assistant", "system"]


def store(conn: apsw.Connection, text: str, role: Role = "user", at: int = 1) -> str:
    """A message stored in session `s` as memory::store stores it; its topic."""
    req = StoreRequest(agent_id="a", content=text, role=role, session_id="s", timestamp=at)
    with conn:
        done = apply_store(
            conn, decide_store(conn, req, at, Prepared(req, Sanitized(text, {}, [], ()), None))
        )
    topic = done.reply.topic_id
    assert isinstance(topic, str)
    return topic


def topic_row(conn: apsw.Connection, topic_id: str) -> tuple[str, str, int]:
    found: Any = conn.execute(
        "SELECT title, profile, message_count FROM topics WHERE id = ?", (topic_id,)
    ).fetchone()
    title, profile, count = found
    return str(title), str(profile), int(count)


def titled(conn: apsw.Connection, topic_id: str) -> Titled:
    sample = title_sample(conn, AGENT, topic_id)
    assert sample is not None
    return Titled(
        tenant="", agent_id="a", topic_id=topic_id, session_id=sample.session_id,
        message_count=sample.message_count, message_ids=sample.message_ids,
        title="Lisbon trip", labels=["Lisbon"], summary="A trip to Lisbon.",
    )  # fmt: skip


@pytest.fixture
def conn(tmp_path: Path) -> apsw.Connection:
    return migrated(tmp_path / "memory.db")


def test_the_llm_is_asked_at_3_messages_and_every_12_more() -> None:
    assert [n for n in range(1, 52) if asks_llm(n)] == [3, 15, 27, 39, 51]


def test_an_answer_is_bounded_as_the_built_in_text_and_anything_else_is_refused() -> None:
    """A long title is cut at 80 characters, labels are unique (case aside), at most 40
    characters and 5; an answer without a title, label or summary, or not an object, is none."""
    answer = {
        "title": "A very long title " * 10,
        "labels": ["Lisbon", "lisbon", "x" * 41, "a", "b", "c", "d", "e"],
        "summary": "  A   trip. ",
    }
    text = read_answer(msgspec.json.encode(answer).decode())
    assert text is not None
    assert len(text.title) <= 80 and text.title.endswith("…")
    assert text.labels == ["Lisbon", "a", "b", "c", "d"] and text.summary == "A trip."
    for garbage in ("", "{}", "null", '{"title": 1, "labels": [], "summary": ""}', "```\n{}\n```"):
        assert read_answer(garbage) is None


def test_the_llm_text_is_not_written_to_a_topic_whose_message_moved_meanwhile(
    conn: apsw.Connection,
) -> None:
    topic = store(conn, "I'm planning a trip to Lisbon in May with flights and a hotel.")
    store(conn, "Which Lisbon hotel is quiet?")
    store(conn, "Alfama hotels are quiet.", role="assistant")
    decided = titled(conn, topic)
    before = topic_row(conn, topic)
    with conn:
        conn.execute("UPDATE session_messages SET topic_id = 'other' WHERE position = 2")
        assert apply_titled(conn, decided) is False
    assert topic_row(conn, topic) == before
    elsewhere = msgspec.structs.replace(decided, session_id="s2", message_ids=decided.message_ids)
    with conn:
        assert apply_titled(conn, elsewhere) is False


def test_the_llm_text_holds_until_the_topic_grew_past_its_next_chance(
    conn: apsw.Connection,
) -> None:
    """Titled at 3 messages, reads show the LLM's text (its summary counting the messages
    now) up to 15 messages; with no answer at 15, from 16 they show the built-in text again."""
    topic = store(conn, "I'm planning a trip to Lisbon in May with flights and a hotel.")
    store(conn, "Which Lisbon hotel is quiet?")
    store(conn, "Alfama hotels are quiet.", role="assistant")
    with conn:
        assert apply_titled(conn, titled(conn, topic))
    for n in range(4, 16):
        store(conn, f"Lisbon hotel note {n}: the Alfama trams", at=n)
    shown = find_topic(conn, AGENT, topic)
    assert (shown.title, shown.message_count) == ("Lisbon trip", 15)
    assert shown.summary == "15 messages (1 assistant, 14 user). A trip to Lisbon."
    assert '"llm_titled":3' in topic_row(conn, topic)[1]
    store(conn, "Lisbon hotel note 16: the Alfama trams", at=16)
    shown = find_topic(conn, AGENT, topic)
    assert shown.message_count == 16 and shown.title != "Lisbon trip"
    assert shown.summary.startswith("16 messages (1 assistant, 15 user). I'm planning a trip")
