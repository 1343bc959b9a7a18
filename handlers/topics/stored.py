"""Topics in the database: a store's topic step, as its decide and apply (contract section 21).

decide (`choose`) reads the session's topics as assignment compares them (the COMPARED most
recently active: their recent stems and mean vector) and its active topic (that of the
session's latest message), and says which topic the message joins: one named by the store's
`topicId`, an existing one, or a new one whose id it mints. apply (`place`) writes it: the
message's row of the session list gets the topic, and the topic row its updated profile, open
loops, counts, times and built-in text. apply is deterministic over (state, decision), so a
shard's replay writes the same rows. A message already in the session list keeps its topic.

The built-in text is made from at most TEXT_SAMPLE of the topic's messages (its first
TEXT_FIRST and its latest), so a store's cost does not grow with the topic, and only when the
topic reaches 1, 2, 4, 8, 16 or 32 messages and every REFRESH_EVERY after (`refreshes`): made
on every store, it was most of a store's cost (0.8 ms of the 0.8 ms a topic added per store on
tests/fixtures/topic_sessions.jsonl). Between refreshes only the summary's first sentence,
the count of messages by role, changes (the profile keeps them by role).
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any, NamedTuple

import apsw
import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from handlers.topics.assign import Incoming, assign
from handlers.topics.extract import TopicText, extract, header_of, llm_holds
from handlers.topics.loops import LoopMessage, OpenLoop, advance
from handlers.topics.profile import TopicProfile, updated
from handlers.topics.words import keyword_stems
from schema.base import Agent
from schema.errors import InvalidRequest

COMPARED = 16  # topics a message is compared with: the session's most recently active
TEXT_FIRST = 6  # a topic's opening messages, which usually say what it is about
TEXT_SAMPLE = 32  # messages its built-in text is made from
MAX_LOOPS = 50  # open loops kept per topic, the oldest dropped first
REFRESH_EVERY = 16  # past 32 messages, the built-in text is remade every this many

Vector = tuple[float, ...]


class TopicChoice(msgspec.Struct, frozen=True, kw_only=True):
    """The topic step of a store's decision: the topic the message joins (a new id minted by
    decide when it starts one), why, and the message's keyword stems."""

    topic_id: str
    reason: str
    stems: list[str]


class Extra(msgspec.Struct, frozen=True, kw_only=True):
    """The parts of a profile assignment does not compare, kept as the `profile` column; and
    where the topic's text came from: `llm_titled`, the message count when the LLM's text now
    on it was asked for (handlers/topics/titles.py), unset for the built-in text."""

    vocabulary: dict[str, int] = {}
    roles: dict[str, int] = {}
    llm_titled: int | UnsetType = UNSET


_RECENT = msgspec.json.Decoder(list[list[str]])
_EXTRA = msgspec.json.Decoder(Extra)
_LOOPS = msgspec.json.Decoder(list[OpenLoop])
_LABELS = msgspec.json.Decoder(list[str])
_ENCODE = msgspec.json.Encoder()


def meaning_of(blob: Any) -> Vector | None:
    if blob is None:
        return None
    return tuple(np.frombuffer(bytes(blob), dtype=np.float32).astype(np.float64).tolist())


def active_topic(conn: apsw.Connection, agent: Agent, session_id: str) -> str | None:
    """The topic of the session's latest message (None: no message, or it has none)."""
    row = conn.execute(
        "SELECT topic_id FROM session_messages WHERE tenant = ? AND agent_id = ? "
        "AND session_id = ? ORDER BY position DESC LIMIT 1",
        (*agent, session_id),
    ).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def compared(conn: apsw.Connection, agent: Agent, session_id: str) -> list[TopicProfile]:
    rows = conn.execute(
        "SELECT id, recent, meaning FROM topics WHERE tenant = ? AND agent_id = ? "
        "AND session_id = ? ORDER BY last_active_at DESC, last_position DESC LIMIT ?",
        (*agent, session_id, COMPARED),
    ).fetchall()
    return [
        TopicProfile(
            topic_id=str(topic_id),
            recent=tuple(tuple(stems) for stems in _RECENT.decode(str(recent))),
            meaning=meaning_of(meaning),
        )
        for topic_id, recent, meaning in rows
    ]


def topic_session(conn: apsw.Connection, agent: Agent, topic_id: str) -> str | None:
    row = conn.execute(
        "SELECT session_id FROM topics WHERE tenant = ? AND agent_id = ? AND id = ?",
        (*agent, topic_id),
    ).fetchone()
    return None if row is None else str(row[0])


def choose(
    conn: apsw.Connection,
    agent: Agent,
    session_id: str,
    message: Incoming,
    named: str | None = None,
) -> TopicChoice:
    """decide's topic step for a message stored in `session_id`; `named`: the store's topicId
    (an existing topic of this session, or a new id to start one)."""
    if named is not None:
        found = topic_session(conn, agent, named)
        if found is not None and found != session_id:
            raise InvalidRequest(
                f"topic `{named}` belongs to another session of agent `{agent[1]}` (at `$.topicId`)"
            )
        return TopicChoice(topic_id=named, reason="named", stems=list(keyword_stems(message.text)))
    active = active_topic(conn, agent, session_id)
    found_assignment = assign(message, compared(conn, agent, session_id), active)
    topic_id = found_assignment.topic_id or str(uuid.uuid4())
    return TopicChoice(
        topic_id=topic_id, reason=found_assignment.reason, stems=list(found_assignment.stems)
    )


def _sample(conn: apsw.Connection, agent: Agent, topic_id: str) -> list[tuple[str, str]]:
    """(role, content) of the topic's first TEXT_FIRST messages and its latest, in order."""
    rows = conn.execute(
        "SELECT position, role, content FROM ("
        "  SELECT * FROM (SELECT m.position, m.role, k.content FROM session_messages m "
        "    JOIN memories k ON k.id = m.memory_id WHERE m.tenant = ? AND m.agent_id = ? "
        "    AND m.topic_id = ? ORDER BY m.position LIMIT ?) "
        "  UNION "
        "  SELECT * FROM (SELECT m.position, m.role, k.content FROM session_messages m "
        "    JOIN memories k ON k.id = m.memory_id WHERE m.tenant = ? AND m.agent_id = ? "
        "    AND m.topic_id = ? ORDER BY m.position DESC LIMIT ?)"
        ") ORDER BY position",
        (*agent, topic_id, TEXT_FIRST, *agent, topic_id, TEXT_SAMPLE - TEXT_FIRST),
    ).fetchall()
    return [(str(role), str(content)) for _, role, content in rows]


class Placing(msgspec.Struct, frozen=True, kw_only=True):
    """What apply knows of the message: its memory id, role, text, vector and timestamp."""

    memory_id: str
    role: str
    text: str
    vector: Vector | None
    timestamp: int


class Placed(NamedTuple):
    """Where the topic step left a message: its topic, and the topic's message count after it
    when the step wrote the topic (None: the message was already in the list with a topic)."""

    topic_id: str
    message_count: int | None = None


def place(
    conn: apsw.Connection, agent: Agent, session_id: str, choice: TopicChoice, m: Placing
) -> Placed:
    """apply's topic step: the message's row of the session list joins the chosen topic, and
    the topic row is written; the topic the message is in (its old one if it had one)."""
    row = conn.execute(
        "UPDATE session_messages SET topic_id = ? WHERE tenant = ? AND agent_id = ? "
        "AND session_id = ? AND memory_id = ? AND topic_id IS NULL RETURNING position",
        (choice.topic_id, *agent, session_id, m.memory_id),
    ).fetchone()
    if row is None:  # already in the list with its topic
        held = conn.execute(
            "SELECT topic_id FROM session_messages WHERE tenant = ? AND agent_id = ? "
            "AND session_id = ? AND memory_id = ? ORDER BY position LIMIT 1",
            (*agent, session_id, m.memory_id),
        ).fetchone()
        return Placed(choice.topic_id if held is None or held[0] is None else str(held[0]))
    return Placed(choice.topic_id, _write_topic(conn, agent, session_id, choice, m, int(row[0])))


def refreshes(count: int) -> bool:
    """Whether a topic's built-in text is remade when it reaches `count` messages."""
    return (count <= 32 and count & (count - 1) == 0) or count % REFRESH_EVERY == 0


def _write_topic(
    conn: apsw.Connection,
    agent: Agent,
    session_id: str,
    choice: TopicChoice,
    m: Placing,
    position: int,
) -> int:
    """The topic row with the message added; its message count after."""
    current = conn.execute(
        "SELECT recent, meaning, profile, open_loops, message_count, first_at, last_active_at, "
        "title, labels, summary FROM topics WHERE tenant = ? AND agent_id = ? AND id = ?",
        (*agent, choice.topic_id),
    ).fetchone()
    profile = TopicProfile(topic_id=choice.topic_id)
    extra, loops, count, first_at, last_at = Extra(), list[OpenLoop](), 0, m.timestamp, 0
    if current is not None:
        recent, meaning, extra_json, loops_json, count, first_at, last_at, *text_was = current
        extra = _EXTRA.decode(extra_json)
        profile = TopicProfile(
            topic_id=choice.topic_id,
            recent=tuple(tuple(stems) for stems in _RECENT.decode(recent)),
            vocabulary=extra.vocabulary,
            meaning=meaning_of(meaning),
        )
        loops = _LOOPS.decode(loops_json)
    profile = updated(profile, tuple(choice.stems), m.vector)
    roles = Counter(extra.roles)
    roles[m.role] += 1
    loops = advance(loops, LoopMessage(id=m.memory_id, role=m.role, text=m.text))[-MAX_LOOPS:]
    llm_titled = extra.llm_titled or 0
    if current is None or (refreshes(int(count) + 1) and not llm_holds(llm_titled, count + 1)):
        text = extract(_sample(conn, agent, choice.topic_id), roles=roles)
        llm_titled = 0
    else:
        title, labels, summary = (str(column) for column in text_was)
        body = summary[len(header_of(extra.roles)) :]
        text = TopicText(
            title=title, labels=_LABELS.decode(labels), summary=header_of(roles) + body
        )
    meaning = (
        None if profile.meaning is None else np.asarray(profile.meaning, dtype=np.float32).tobytes()
    )
    conn.execute(
        "INSERT OR REPLACE INTO topics (tenant, agent_id, id, session_id, title, labels, "
        "summary, open_loops, message_count, first_at, last_active_at, last_position, recent, "
        "meaning, profile) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            *agent,
            choice.topic_id,
            session_id,
            text.title,
            _ENCODE.encode(text.labels).decode(),
            text.summary,
            _ENCODE.encode(loops).decode(),
            int(count) + 1,
            min(int(first_at), m.timestamp),
            max(m.timestamp, int(last_at)),
            position,
            _ENCODE.encode([list(stems) for stems in profile.recent]).decode(),
            meaning,
            _ENCODE.encode(
                Extra(
                    vocabulary=profile.vocabulary, roles=dict(roles), llm_titled=llm_titled or UNSET
                )
            ).decode(),
        ),
    )
    return int(count) + 1
