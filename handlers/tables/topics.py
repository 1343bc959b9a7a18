"""The topics table (contract section 21): a session's lines of work, each a record of its own;
which topic each message is in travels with its session's message list (handlers/tables/
sessions.py, a reference's `topic`). A topic titled by the LLM keeps its text and the mark of
where it came from (`llmTitled`), so the next built-in refresh after import leaves it as before.

Import writes each topic as the file has it, replacing a topic of the same id (as a session's
record replaces the session): topics come after sessions, whose lists name them. The open loops
keep the message ids they were exported with.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apsw
import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from handlers.tables.records import Count, NonEmpty, Record, insert_once, json_text, staged
from handlers.tables.table import Stat, Table, Transfer, counted, delete_rows
from handlers.topics.loops import OpenLoop
from handlers.topics.stored import Extra, recent_of, vocabulary_of
from schema.base import DEFAULT_TENANT, Millis, StoredId, Tenant


class TopicRecord(Record, frozen=True, tag="topic"):
    agent_id: StoredId
    id: NonEmpty
    session_id: NonEmpty
    title: str
    labels: list[str]
    summary: str
    open_loops: list[OpenLoop]
    message_count: Count
    first_at: Millis
    last_active_at: Millis
    last_position: Count
    recent: list[list[str]]
    meaning: list[float] | None = None
    vocabulary: dict[str, int] = msgspec.field(default_factory=dict)
    roles: dict[str, int] = msgspec.field(default_factory=dict)
    # The message count when the LLM's text now on the topic was asked for; 0: built-in text.
    llm_titled: Count = 0
    tenant: Tenant = DEFAULT_TENANT


COLUMNS = (
    "id, session_id, title, labels, summary, open_loops, message_count, first_at, "
    "last_active_at, last_position, recent, meaning, profile"
)


class _Extra(msgspec.Struct, frozen=True):
    vocabulary: dict[str, int] = {}
    roles: dict[str, int] = {}
    llm_titled: int | UnsetType = UNSET  # unset: the built-in text (handlers/topics/stored.py)


def export_topics(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[TopicRecord]:
    rows: list[Any] = conn.execute(
        f"SELECT {COLUMNS} FROM topics WHERE tenant = ? AND agent_id = ? ORDER BY session_id, "
        "first_at, id",
        (tenant, agent_id),
    ).fetchall()
    for topic_id, session_id, title, labels, summary, loops, count, first, last, *rest in rows:
        position, recent, meaning, profile = rest
        extra = msgspec.json.decode(profile, type=Extra)
        yield TopicRecord(
            tenant=tenant, agent_id=agent_id, id=topic_id, session_id=session_id, title=title,
            labels=msgspec.json.decode(labels, type=list[str]), summary=summary,
            open_loops=msgspec.json.decode(loops, type=list[OpenLoop]), message_count=count,
            first_at=first, last_active_at=last, last_position=position,
            recent=msgspec.json.decode(recent, type=list[list[str]]),
            meaning=None if meaning is None else np.frombuffer(meaning, np.float32).tolist(),
            vocabulary=vocabulary_of(extra, recent_of(recent)), roles=extra.roles,
            llm_titled=extra.llm_titled or 0,
        )  # fmt: skip


STAGING = """
CREATE TEMP TABLE transfer_topics (seq INTEGER PRIMARY KEY, tenant, agent_id, id, session_id,
    title, labels, summary, open_loops, message_count, first_at, last_active_at, last_position,
    recent, meaning, profile, UNIQUE (tenant, agent_id, id));
"""


def stage_topic(conn: apsw.Connection, r: TopicRecord, tenant: str, line: int) -> None:
    meaning = None if r.meaning is None else np.asarray(r.meaning, np.float32).tobytes()
    profile = json_text(
        _Extra(vocabulary=r.vocabulary, roles=r.roles, llm_titled=r.llm_titled or UNSET)
    )
    insert_once(
        conn, "transfer_topics", "topic", line, (tenant, r.agent_id), r.id, r.session_id,
        r.title, json_text(r.labels), r.summary, json_text(r.open_loops), r.message_count,
        r.first_at, r.last_active_at, r.last_position, json_text(r.recent), meaning, profile,
    )  # fmt: skip


def apply_topics(conn: apsw.Connection, now: int) -> dict[str, int]:
    count = staged(conn, "transfer_topics")
    conn.execute(
        f"INSERT OR REPLACE INTO main.topics (tenant, agent_id, {COLUMNS}) "
        f"SELECT tenant, agent_id, {COLUMNS} FROM temp.transfer_topics ORDER BY seq"
    )
    return {"topics_written": count}


TOPICS = Table(
    name="topics",
    owner="agent",
    erase=delete_rows,
    transfer=Transfer(
        record=TopicRecord,
        export=export_topics,
        staging=STAGING,
        stage=stage_topic,
        apply=apply_topics,
        summary="topics {topics_written} written",
    ),
    stats=(
        Stat(
            key="topics",
            count=counted("SELECT count(*) FROM topics WHERE {where}"),
            label="topics",
            metric="Topics of sessions (lines of work, contract section 21).",
        ),
    ),
)
