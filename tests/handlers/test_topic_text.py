"""A topic's text as reads make it (handlers/topics/text.py, contract section 21): from at most
32 of its messages that are not forgotten, its first 6 and its latest, whatever its size."""

from __future__ import annotations

from pathlib import Path

import apsw
import msgspec

from handlers.sanitize import Sanitized
from handlers.topics.text import made_text, sample
from schema.memory import StoreRequest
from tests.test_transfer import migrated
from worker.triggers.preparing import Prepared
from worker.triggers.storing import apply_store, decide_store

AGENT = ("", "a")


def stored(conn: apsw.Connection, texts: list[str]) -> list[str]:
    """Each text stored as a user message of session `s`, named into topic `t`; their ids."""
    ids = []
    for n, text in enumerate(texts, start=1):
        body = {"agentId": "a", "content": text, "role": "user", "sessionId": "s", "topicId": "t"}
        req = msgspec.convert(body, StoreRequest)
        with conn:
            decided = decide_store(conn, req, n, Prepared(req, Sanitized(text, {}, [], ()), None))
            ids.append(str(apply_store(conn, decided).reply.id))
    return ids


def test_a_large_topic_is_read_by_its_first_6_and_latest_26_messages_not_forgotten(
    tmp_path: Path,
) -> None:
    conn = migrated(tmp_path / "memory.db")
    texts = [f"message number {n} about the garden shed" for n in range(1, 41)]
    ids = stored(conn, texts)
    assert [text for _, text in sample(conn, AGENT, "t", 40)] == texts[:6] + texts[-26:]
    with conn:  # forgotten: the 2nd and the 40th
        conn.execute("UPDATE memories SET forgotten_at = 1 WHERE id IN (?, ?)", (ids[1], ids[39]))
    present = [text for n, text in enumerate(texts) if n not in (1, 39)]
    assert [text for _, text in sample(conn, AGENT, "t", 40)] == present[:6] + present[-26:]


def test_a_small_topic_is_read_whole_and_its_text_made_from_it(tmp_path: Path) -> None:
    """The header counts every message by role; a second read gives the same text."""
    conn = migrated(tmp_path / "memory.db")
    stored(conn, ["Repaint the garden shed green", "Buy green shed paint on Saturday"])
    text = made_text(conn, AGENT, "t", 2, {"user": 2})
    assert text.labels[:2] == ["shed", "green"]  # the words of both messages first
    assert text.summary.startswith("2 messages (2 user). Repaint the garden shed green")
    assert made_text(conn, AGENT, "t", 2, {"user": 2}) == text
