"""The active topic a store compares its message with (contract section 21): the topic of the
session's latest message, read at the latest position the session's topics hold when that is
the latest, else as the session's list says."""

from __future__ import annotations

from pathlib import Path

import apsw

from handlers.topics.stored import active_topic, compared, latest_topic
from tests.handlers.test_topic_vocabulary import stored
from tests.test_transfer import migrated

AGENT = ("", "a")


def appended(conn: apsw.Connection, position: int, topic_id: str | None) -> None:
    """A message row at `position` of session `s` (as a compaction's summary, or a message
    stored before topics, is: no topic; or naming one)."""
    with conn:
        conn.execute(
            "INSERT INTO session_messages VALUES ('', 'a', 's', ?, NULL, 'user', 1, ?)",
            (position, topic_id),
        )


def test_the_active_topic_is_the_latest_messages_however_it_is_read(tmp_path: Path) -> None:
    conn = migrated(tmp_path / "memory.db")
    stored(conn, ["Fix the flaky checkout test in CI before the release"], "u")
    stored(conn, ["Book the Lisbon hotel near the tram line for May"], "t", start=2)
    _, latest = compared(conn, AGENT, "s")
    assert latest == 2
    assert latest_topic(conn, AGENT, "s", latest) == active_topic(conn, AGENT, "s") == "t"
    appended(conn, 3, None)  # the latest message has no topic: none is active
    assert latest_topic(conn, AGENT, "s", latest) is active_topic(conn, AGENT, "s") is None
    appended(conn, 4, "u")  # past the topics' latest position: the list says which
    assert latest_topic(conn, AGENT, "s", latest) == active_topic(conn, AGENT, "s") == "u"
    assert latest_topic(conn, AGENT, "s", None) == "u"
