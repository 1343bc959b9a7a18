"""The topics table is whole (contract section 21): export and import carry each topic and the
topic of each session message, erasure removes an agent's topics, memory::stats counts them."""

from __future__ import annotations

import io
from pathlib import Path

import apsw
import numpy as np

from handlers.life import Erasure, apply_erase
from handlers.stats import table_counts
from tests.test_transfer import dump, migrated
from worker.transfer.exporting import export_jsonl
from worker.transfer.importing import import_jsonl

MEANING = np.asarray([0.6, 0.8, 0.0], dtype=np.float32).tobytes()


def fill(conn: apsw.Connection, agent: str) -> None:
    with conn:
        conn.execute("INSERT INTO sessions VALUES ('', ?, 's', 1, 2, NULL, NULL)", (agent,))
        conn.executemany(
            "INSERT INTO session_messages VALUES ('', ?, 's', ?, ?, 'user', ?, ?)",
            [(agent, 1, f"m1{agent}", 10, "trip"), (agent, 2, f"m2{agent}", 20, "bug"),
             (agent, 3, None, 30, None)],
        )  # fmt: skip
        conn.executemany(
            "INSERT INTO topics VALUES ('', ?, ?, 's', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(agent, "trip", "Lisbon in May", '["Lisbon","hotel"]', "2 messages (2 user).",
              '[{"kind":"question","text":"Which hotel?","messageId":"m1","role":"user"}]',
              2, 10, 15, 1, '[["lisbon","hotel"]]', MEANING,
              '{"vocabulary":{"lisbon":2},"roles":{"user":2}}'),
             (agent, "bug", "KeyError", "[]", "", "[]", 1, 20, 20, 2, "[]", None,
              '{"vocabulary":{},"roles":{}}')],
        )  # fmt: skip


def topics(conn: apsw.Connection) -> list[tuple[object, ...]]:
    return [tuple(row) for row in conn.execute("SELECT * FROM topics ORDER BY 1, 2, 3")]


def test_topics_and_each_messages_topic_travel_in_export_and_import(tmp_path: Path) -> None:
    """Every column of every topic and each message's topic come back as they were; a second
    import of the same file changes nothing."""
    source = migrated(tmp_path / "source.db")
    fill(source, "a")
    fill(source, "b")
    out = io.BytesIO()
    export_jsonl(source, out, agent_id=None, now=1)
    assert out.getvalue().count(b'"kind":"topic"') == 4
    target = migrated(tmp_path / "target.db")
    lines = out.getvalue().splitlines(keepends=True)
    result = import_jsonl(target, lines)
    assert result.topics_written == 4 and "topics 4 written" in result.summary()
    assert topics(target) == topics(source) != []
    assert dump(target)["session_messages"] == dump(source)["session_messages"]
    import_jsonl(target, lines)
    assert topics(target) == topics(source)


def test_erasure_removes_the_agents_topics_and_stats_count_them(tmp_path: Path) -> None:
    conn = migrated(tmp_path / "memory.db")
    fill(conn, "a")
    fill(conn, "b")
    assert table_counts(conn, now=0)["topics"] == 4
    with conn:
        apply_erase(conn, Erasure(("", "a")))
    assert [row[1] for row in conn.execute("SELECT * FROM topics")] == ["b", "b"]
    assert table_counts(conn, "", ["a"], now=0)["topics"] == 0


def test_a_topic_titled_by_the_llm_keeps_its_text_and_mark_through_export_and_import(
    tmp_path: Path,
) -> None:
    """The LLM's title and the mark of where it came from (`llmTitled`, the message count it
    was asked at) travel, so the next built-in refresh after import leaves the text alone."""
    source = migrated(tmp_path / "source.db")
    fill(source, "a")
    with source:
        source.execute(
            "UPDATE topics SET title = 'Lisbon trip (LLM)', profile = "
            """'{"vocabulary":{"lisbon":2},"roles":{"user":2},"llm_titled":2}' WHERE id = 'trip'"""
        )
    out = io.BytesIO()
    export_jsonl(source, out, agent_id=None, now=1)
    [line] = [line for line in out.getvalue().splitlines() if b'"id":"trip"' in line]
    assert b'"llmTitled":2' in line and b"Lisbon trip (LLM)" in line
    assert out.getvalue().count(b"llmTitled") == 1  # a built-in text carries no mark
    target = migrated(tmp_path / "target.db")
    import_jsonl(target, out.getvalue().splitlines(keepends=True))
    assert topics(target) == topics(source)
