"""memory::session::resume (contract section 21): what an agent reads to pick a line of work up
again. The topic named, else the one the query names best (handlers/topics/assign.py's
`resume_topic`, over every word each topic has used), else the active one, else the most
recently active; its title, labels, summary and open loops, the agent's current facts and
pinned memories that share a word with its labels, and its latest messages, inside section
13's fixed wrapper (handlers/context.py), never longer than `maxChars`.

The topic's own lines come first, then facts and pinned memories; its messages take the room
left, the latest first (shown in session order), so a short budget keeps the newest turns.
"""

from __future__ import annotations

from typing import NamedTuple

import apsw
import msgspec

from handlers.context import FOOTER, HEADER, MIN_CUT, line_of, neutralise
from handlers.facts.context import context_facts, keywords
from handlers.recall.trigger import pinned_memories
from handlers.session_refs import require_session
from handlers.topics.assign import resume_topic
from handlers.topics.profile import TopicProfile
from handlers.topics.reading import find_topic
from handlers.topics.stored import Extra, active_topic, recent_of, vocabulary_of
from schema.base import Agent, agent_of
from schema.errors import NotFound
from schema.memory import RecallRequest
from schema.topics import SessionResumeReply, SessionResumeRequest, Topic

LAST_MESSAGES = 30  # the topic's latest messages considered
_EXTRA = msgspec.json.Decoder(Extra)
_FLAGS = msgspec.json.Decoder(list[str])


class Said(NamedTuple):
    """A message as line_of shows it."""

    id: str
    role: str
    content: str
    timestamp: int
    summary: str | None
    flags: list[str]


def chosen_topic(conn: apsw.Connection, agent: Agent, req: SessionResumeRequest) -> Topic | None:
    if req.topic_id is not msgspec.UNSET:
        topic = find_topic(conn, agent, req.topic_id)
        if topic.session_id != req.session_id:
            raise NotFound(
                f"topic `{req.topic_id}` is not a topic of session `{req.session_id}` "
                "(at `$.topicId`)"
            )
        return topic
    rows = conn.execute(
        "SELECT id, profile, recent FROM topics WHERE tenant = ? AND agent_id = ? "
        "AND session_id = ? ORDER BY last_active_at DESC, last_position DESC",
        (*agent, req.session_id),
    ).fetchall()
    if not rows:
        return None
    found = None
    if req.query is not msgspec.UNSET and req.query.strip():
        profiles = [
            TopicProfile(
                topic_id=str(topic_id),
                vocabulary=vocabulary_of(_EXTRA.decode(str(profile)), recent_of(str(recent))),
            )
            for topic_id, profile, recent in rows
        ]
        found = resume_topic(req.query, profiles)
    found = found or active_topic(conn, agent, req.session_id) or str(rows[0][0])
    return find_topic(conn, agent, found)


def latest_messages(conn: apsw.Connection, agent: Agent, topic: Topic) -> list[Said]:
    rows = conn.execute(
        "SELECT m.memory_id, m.role, m.timestamp, x.content, x.summary, x.flags "
        "FROM session_messages m JOIN memories x ON x.id = m.memory_id AND x.tenant = m.tenant "
        "AND x.agent_id = m.agent_id AND x.forgotten_at IS NULL "
        "WHERE m.tenant = ? AND m.agent_id = ? AND m.topic_id = ? AND m.session_id = ? "
        "ORDER BY m.position DESC LIMIT ?",
        (*agent, topic.id, topic.session_id, LAST_MESSAGES),
    ).fetchall()
    return [
        Said(str(i), str(role), str(content), int(at), summary, _FLAGS.decode(flags or "[]"))
        for i, role, at, content, summary, flags in reversed(rows)
    ]


def topic_lines(conn: apsw.Connection, agent: Agent, topic: Topic) -> list[str]:
    """Its own lines, then the facts and pinned memories sharing a word with its labels."""
    lines = [f"topic: {neutralise(topic.title)}"]
    if topic.labels:
        lines.append(f"labels: {neutralise(', '.join(topic.labels))}")
    if topic.summary:
        lines.append(f"summary: {neutralise(topic.summary)}")
    lines += [f"open {loop.kind}: {neutralise(loop.text)}" for loop in topic.open_loops]
    labels = " ".join(topic.labels)
    lines += [neutralise(line) for line in context_facts(conn, agent, labels)]
    wanted = keywords(labels)
    ask = RecallRequest(agent_id=agent[1], max_sensitivity="internal")  # as memory::context
    pinned = pinned_memories(conn, *agent, ask)
    lines += [line_of(m) for m in pinned if wanted and keywords(m.content) & wanted]
    return lines


def session_resume(
    conn: apsw.Connection, req: SessionResumeRequest, *, now: int
) -> SessionResumeReply:
    """A read: `now` is the registry's calling convention, unused."""
    agent = agent_of(req)
    require_session(conn, agent, req.session_id)
    topic = chosen_topic(conn, agent, req)
    if topic is None:
        return SessionResumeReply(text=f"{HEADER}\n{FOOTER}", topic_id=None, truncated=False)
    room = req.max_chars - len(HEADER) - len(FOOTER) - 1
    shown, truncated = [HEADER], False
    for line in topic_lines(conn, agent, topic):
        if len(line) + 1 <= room:
            shown.append(line)
            room -= len(line) + 1
            continue
        truncated = True
        if room - 1 >= MIN_CUT:
            shown.append(line[: room - 2] + "\u2026")
        room = 0
        break
    kept: list[str] = []
    for message in reversed(latest_messages(conn, agent, topic)):
        line = line_of(message)
        if len(line) + 1 > room:
            truncated = True
            break
        kept.append(line)
        room -= len(line) + 1
    text = "\n".join([*shown, *reversed(kept), FOOTER])
    return SessionResumeReply(text=text, topic_id=topic.id, truncated=truncated)
