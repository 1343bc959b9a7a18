"""memory::topic::list and memory::topic::get (contract section 21): pure reads of the topics
table and of the session list's messages in a topic. A topic whose stored text is older than
its messages shows its text made now (handlers/topics/text.py)."""

from __future__ import annotations

import re
from typing import Any

import apsw
import msgspec

from handlers.cursors import decode_cursor, encode_cursor
from handlers.paging import fitting_page
from handlers.session_refs import require_session
from handlers.topics.extract import TopicText, header_of, llm_holds
from handlers.topics.stored import Extra, active_topic
from handlers.topics.text import made_text
from schema.base import Agent, agent_of
from schema.errors import NotFound
from schema.life import SessionMessage
from schema.topics import (
    OpenLoop,
    Topic,
    TopicGetReply,
    TopicGetRequest,
    TopicListReply,
    TopicListRequest,
)

COLUMNS = (
    "id, session_id, title, labels, summary, open_loops, message_count, first_at, "
    "last_active_at, profile"
)
_LABELS = msgspec.json.Decoder(list[str])
_LOOPS = msgspec.json.Decoder(list[OpenLoop])
_EXTRA = msgspec.json.Decoder(Extra)


# The summary's first sentence, as header_of writes it: "12 messages (5 assistant, 7 user)."
_HEADER = re.compile(r"\A\d+ messages(?: \([^)]*\))?\.")


def current_text(conn: apsw.Connection, agent: Agent, row: Any) -> TopicText:
    """The topic's title, labels and summary: the LLM's while it holds (extract.py
    `llm_holds`), its summary's first sentence counting the messages now; else as stored when
    made at its message count; else made now. `row`: COLUMNS."""
    topic_id, _, title, labels, summary, _, count, _, _, profile = row
    extra = _EXTRA.decode(str(profile))
    stored = TopicText(title=str(title), labels=_LABELS.decode(str(labels)), summary=str(summary))
    if llm_holds(extra.llm_titled or 0, int(count)):
        header = _HEADER.match(stored.summary)
        body = stored.summary[header.end() :] if header else " " + stored.summary
        return msgspec.structs.replace(stored, summary=header_of(extra.roles) + body)
    if extra.text_at == int(count):
        return stored
    return made_text(conn, agent, str(topic_id), int(count), extra.roles)


def topic_of(conn: apsw.Connection, agent: Agent, row: Any, active: str | None) -> Topic:
    topic_id, session_id, _, _, _, loops, count, first_at, last_at, _ = row
    text = current_text(conn, agent, row)
    return Topic(
        id=str(topic_id),
        session_id=str(session_id),
        title=text.title,
        labels=text.labels,
        summary=text.summary,
        open_loops=_LOOPS.decode(str(loops)),
        message_count=int(count),
        first_at=int(first_at),
        last_active_at=int(last_at),
        active=topic_id == active,
    )


def topic_list(conn: apsw.Connection, req: TopicListRequest, *, now: int) -> TopicListReply:
    """Most recently active first, ties by the later message in the session. `now`: unused."""
    agent = agent_of(req)
    require_session(conn, agent, req.session_id)
    active = active_topic(conn, agent, req.session_id)
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM topics WHERE tenant = ? AND agent_id = ? AND session_id = ? "
        "ORDER BY last_active_at DESC, last_position DESC",
        (*agent, req.session_id),
    ).fetchall()
    return TopicListReply(topics=[topic_of(conn, agent, row, active) for row in rows])


def find_topic(conn: apsw.Connection, agent: Agent, topic_id: str) -> Topic:
    row = conn.execute(
        f"SELECT {COLUMNS} FROM topics WHERE tenant = ? AND agent_id = ? AND id = ?",
        (*agent, topic_id),
    ).fetchone()
    if row is None:
        raise NotFound(f"topic `{topic_id}` of agent `{agent[1]}` not found (at `$.topicId`)")
    return topic_of(conn, agent, row, active_topic(conn, agent, str(row[1])))


def topic_get(
    conn: apsw.Connection, req: TopicGetRequest, *, now: int, budget: int
) -> TopicGetReply:
    """The topic and its messages in session order, positions as memory::session::get counts
    them (from 1 over the whole session); content null where the memory is gone or forgotten.
    `now`: unused."""
    agent = agent_of(req)
    topic = find_topic(conn, agent, req.topic_id)
    scope = ("topic", *agent, req.topic_id)
    after = -1
    if req.cursor is not msgspec.UNSET:
        [after] = decode_cursor(req.cursor, scope, 1)
    rows: list[Any] = conn.execute(
        "SELECT m.position, m.memory_id, m.role, m.timestamp, x.content, "
        "(SELECT count(*) FROM session_messages b WHERE b.tenant = m.tenant "
        "AND b.agent_id = m.agent_id AND b.session_id = m.session_id "
        "AND b.position <= m.position) FROM session_messages m "
        "LEFT JOIN memories x ON x.id = m.memory_id AND x.tenant = m.tenant "
        "AND x.agent_id = m.agent_id AND x.forgotten_at IS NULL "
        "WHERE m.tenant = ? AND m.agent_id = ? AND m.topic_id = ? AND m.session_id = ? "
        "AND m.position > ? ORDER BY m.position LIMIT ?",
        (*agent, req.topic_id, topic.session_id, after, req.limit + 1),
    ).fetchall()
    messages = [
        SessionMessage(
            position=int(row[5]),
            id=None if row[1] is None else str(row[1]),
            role=str(row[2]),
            timestamp=int(row[3]),
            content=None if row[4] is None else str(row[4]),
        )
        for row in rows[: req.limit]
    ]

    def cursor_after(n: int) -> str | None:
        return None if n + 1 >= len(rows) else encode_cursor(scope, (int(rows[n][0]),))

    def reply(page: list[SessionMessage], cursor: str | None) -> TopicGetReply:
        return TopicGetReply(topic=topic, messages=page, next_cursor=cursor)

    return fitting_page(messages, req.limit, budget, reply, cursor_after, "message")
