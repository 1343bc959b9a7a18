"""Topics in the database: a store's topic step, as its decide and apply (contract section 21).

decide (`choose`) reads the session's topics as assignment compares them (the COMPARED most
recently active: their recent stems and mean vector) and its active topic (that of the
session's latest message), and says which topic the message joins: one named by the store's
`topicId`, an existing one, or a new one whose id it mints. apply (`place`) writes it: the
message's row of the session list gets the topic, and the topic row its updated profile, open
loops, counts and times. apply is deterministic over (state, decision), so a
shard's replay writes the same rows. A message already in the session list keeps its topic.

A store does not remake the topic's built-in text (handlers/topics/text.py: reads make it when
it is older than the topic's messages); it writes the text of a topic's first message when it
starts one. The rest of the row is updated in the columns that change, and what is decoded
from the session's topics is kept while they do not change, since most do not between two
stores.
"""

from __future__ import annotations

import uuid
from functools import lru_cache
from typing import Any, NamedTuple

import apsw
import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from handlers.topics.assign import Incoming, assign
from handlers.topics.extract import extract
from handlers.topics.loops import LoopMessage, OpenLoop, advance
from handlers.topics.profile import (
    WINDOW,
    TopicProfile,
    folded,
    mean_with,
    updated,
    window_with,
    words_of,
)
from handlers.topics.words import keyword_stems, too_short
from schema.base import Agent
from schema.errors import InvalidRequest

COMPARED = 16  # topics a message is compared with: the session's most recently active
MAX_LOOPS = 50  # open loops kept per topic, the oldest dropped first

Vector = tuple[float, ...]


class TopicChoice(msgspec.Struct, frozen=True, kw_only=True):
    """The topic step of a store's decision: the topic the message joins (a new id minted by
    decide when it starts one), why, and the message's keyword stems."""

    topic_id: str
    reason: str
    stems: list[str]


class Extra(msgspec.Struct, frozen=True, kw_only=True):
    """The parts of a profile assignment does not compare, kept as the `profile` column; and
    where the topic's text came from: `text_at`, the message count its stored built-in text was
    made at (handlers/topics/text.py), and `llm_titled`, the message count when the LLM's text
    now on it was asked for (handlers/topics/titles.py), unset for the built-in text.

    `vocabulary` lacks the stems of the topic's last `unfolded` messages that had any: they are
    the last `unfolded` windows of its `recent` column (`vocabulary_of` adds them). A store adds
    its message's stems to the vocabulary only when WINDOW of them are waiting: decoding,
    updating and encoding a vocabulary of up to VOCABULARY stems on every store was a sixth of
    the store's topic step."""

    vocabulary: dict[str, int] = {}
    roles: dict[str, int] = {}
    text_at: int = 0
    llm_titled: int | UnsetType = UNSET
    unfolded: int = 0


class _Kept(msgspec.Struct, frozen=True, kw_only=True):
    """The `profile` column as a store updates it: its vocabulary as the JSON it is, unless
    it is due to be folded."""

    vocabulary: msgspec.Raw = msgspec.Raw(b"{}")
    roles: dict[str, int] = {}
    text_at: int = 0
    llm_titled: int | UnsetType = UNSET
    unfolded: int = 0


def vocabulary_of(extra: Extra, recent: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    """Every stem the topic has used (the most used VOCABULARY), as placing its messages one by
    one left it: the `profile` column's vocabulary with the windows not yet folded into it."""
    if not extra.unfolded:
        return extra.vocabulary
    return folded(extra.vocabulary, recent[max(0, len(recent) - extra.unfolded) :])


_RECENT = msgspec.json.Decoder(list[list[str]])
_EXTRA = msgspec.json.Decoder(Extra)
_KEPT = msgspec.json.Decoder(_Kept)
_VOCABULARY = msgspec.json.Decoder(dict[str, int])
_LOOPS = msgspec.json.Decoder(list[OpenLoop])
_ENCODE = msgspec.json.Encoder()


def meaning_of(blob: Any) -> Vector | None:
    return None if blob is None else _meaning(bytes(blob))


# A store compares its message with each of the session's topics, and most of them have not
# changed since the store before: their columns are decoded once, not on every store.
@lru_cache(maxsize=1024)
def _meaning(blob: bytes) -> Vector:
    return tuple(np.frombuffer(blob, dtype=np.float32).astype(np.float64).tolist())


@lru_cache(maxsize=4096)
def recent_of(column: str) -> tuple[tuple[str, ...], ...]:
    """The `recent` column's windows of stems."""
    return tuple(tuple(stems) for stems in _RECENT.decode(column))


@lru_cache(maxsize=4096)
def words_in(column: str) -> frozenset[str]:
    """Every stem of the `recent` column's windows: looked up by the column's text, which
    hashes once, where the windows' tuple of tuples hashes again at every look."""
    return words_of(recent_of(column))


def active_topic(conn: apsw.Connection, agent: Agent, session_id: str) -> str | None:
    """The topic of the session's latest message (None: no message, or it has none)."""
    row = conn.execute(
        "SELECT topic_id FROM session_messages WHERE tenant = ? AND agent_id = ? "
        "AND session_id = ? ORDER BY position DESC LIMIT 1",
        (*agent, session_id),
    ).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def compared(
    conn: apsw.Connection, agent: Agent, session_id: str
) -> tuple[list[TopicProfile], int | None]:
    """The session's COMPARED most recently active topics, and the latest position of a
    message of theirs (None: the session has no topic)."""
    rows: list[Any] = conn.execute(
        "SELECT id, recent, meaning, last_position FROM topics WHERE tenant = ? AND agent_id = ? "
        "AND session_id = ? ORDER BY last_active_at DESC, last_position DESC LIMIT ?",
        (*agent, session_id, COMPARED),
    ).fetchall()
    profiles = [
        TopicProfile(
            topic_id=str(topic_id),
            recent=recent_of(str(recent)),
            meaning=meaning_of(m),
            words=words_in(str(recent)),
        )
        for topic_id, recent, m, _ in rows
    ]
    return profiles, max((int(row[3]) for row in rows), default=None)


def latest_topic(
    conn: apsw.Connection, agent: Agent, session_id: str, position: int | None
) -> str | None:
    """`active_topic`, read at `position` (the latest a topic of the session holds) when the
    session has one message there or after (then it is the latest, whatever its topic): an
    index seek without ORDER BY costs a third of the ordered one."""
    if position is not None:
        rows = conn.execute(
            "SELECT topic_id FROM session_messages WHERE tenant = ? AND agent_id = ? "
            "AND session_id = ? AND position >= ? LIMIT 2",
            (*agent, session_id, position),
        ).fetchall()
        if len(rows) == 1:
            return None if rows[0][0] is None else str(rows[0][0])
    return active_topic(conn, agent, session_id)


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
    if too_short(keyword_stems(message.text)):  # stays in the active topic: nothing compared
        active = active_topic(conn, agent, session_id)
        topics = [] if active is not None else compared(conn, agent, session_id)[0]
    else:
        topics, latest = compared(conn, agent, session_id)
        active = latest_topic(conn, agent, session_id, latest)
    found_assignment = assign(message, topics, active)
    topic_id = found_assignment.topic_id or str(uuid.uuid4())
    return TopicChoice(
        topic_id=topic_id, reason=found_assignment.reason, stems=list(found_assignment.stems)
    )


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
    conn: apsw.Connection,
    agent: Agent,
    session_id: str,
    choice: TopicChoice,
    m: Placing,
    listed: int | None = None,
) -> Placed:
    """apply's topic step: the message's row of the session list joins the chosen topic, and
    the topic row is written; the topic the message is in (its old one if it had one).
    `listed`: the position the store appended the message at, already in the topic."""
    if listed is not None:
        return Placed(choice.topic_id, _write_topic(conn, agent, session_id, choice, m, listed))
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


def _write_topic(
    conn: apsw.Connection,
    agent: Agent,
    session_id: str,
    choice: TopicChoice,
    m: Placing,
    position: int,
) -> int:
    """The topic row with the message added; its message count after. An existing row gets
    only the columns that change (the window when the message has keywords, the mean when it
    has a vector, the loops when they moved), never its text."""
    current = conn.execute(
        "SELECT recent, meaning, profile, open_loops, message_count, first_at, last_active_at "
        "FROM topics WHERE tenant = ? AND agent_id = ? AND id = ?",
        (*agent, choice.topic_id),
    ).fetchone()
    if current is None:
        return _insert_topic(conn, agent, session_id, choice, m, position)
    recent, meaning, extra_json, loops_json, count, first_at, last_at = current
    extra = _KEPT.decode(extra_json)
    # The profile's window and mean with the message (profile.py `updated`; its vocabulary is
    # folded in below, a window at a time).
    window = window_with(recent_of(str(recent)), tuple(choice.stems))
    vocabulary, unfolded = extra.vocabulary, extra.unfolded + (1 if choice.stems else 0)
    if unfolded >= WINDOW:  # the window holds exactly the messages waiting
        words = folded(_VOCABULARY.decode(vocabulary), window[-unfolded:])
        vocabulary, unfolded = msgspec.Raw(_ENCODE.encode(words)), 0
    roles = dict(extra.roles)
    roles[m.role] = roles.get(m.role, 0) + 1
    count = int(count) + 1
    loops_was = [] if loops_json == "[]" else _LOOPS.decode(loops_json)
    loops = advance(loops_was, LoopMessage(id=m.memory_id, role=m.role, text=m.text))[-MAX_LOOPS:]
    changes: dict[str, Any] = {}
    if loops != loops_was:
        changes["open_loops"] = _ENCODE.encode(loops).decode()
    if choice.stems:
        changes["recent"] = _ENCODE.encode(window).decode()
    if m.vector is not None:
        changes["meaning"] = _meaning_column(mean_with(meaning_of(meaning), m.vector))
    changes |= {
        "message_count": count,
        "first_at": min(int(first_at), m.timestamp),
        "last_active_at": max(m.timestamp, int(last_at)),
        "last_position": position,
        "profile": _ENCODE.encode(
            msgspec.structs.replace(extra, vocabulary=vocabulary, roles=roles, unfolded=unfolded)
        ).decode(),
    }
    conn.execute(_update_sql(tuple(changes)), (*changes.values(), *agent, choice.topic_id))
    return count


@lru_cache(maxsize=16)
def _update_sql(columns: tuple[str, ...]) -> str:
    """The UPDATE of a topic row's `columns` (a few sets of them occur)."""
    sets = ", ".join(f"{column} = ?" for column in columns)
    return f"UPDATE topics SET {sets} WHERE tenant = ? AND agent_id = ? AND id = ?"


def _meaning_column(meaning: Vector | None) -> bytes | None:
    if meaning is None:
        return None
    return np.asarray(meaning, dtype=np.float32).tobytes()


def _insert_topic(
    conn: apsw.Connection,
    agent: Agent,
    session_id: str,
    choice: TopicChoice,
    m: Placing,
    position: int,
) -> int:
    """A new topic's row, of its first message (its text made from that message)."""
    profile = updated(TopicProfile(topic_id=choice.topic_id), tuple(choice.stems), m.vector)
    roles = {m.role: 1}
    loops = advance([], LoopMessage(id=m.memory_id, role=m.role, text=m.text))[-MAX_LOOPS:]
    text = extract([(m.role, m.text)], roles=roles)
    conn.execute(
        "INSERT INTO topics (tenant, agent_id, id, session_id, title, labels, "
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
            1,
            m.timestamp,
            m.timestamp,
            position,
            _ENCODE.encode(profile.recent).decode(),
            _meaning_column(profile.meaning),
            _ENCODE.encode(Extra(vocabulary=profile.vocabulary, roles=roles, text_at=1)).decode(),
        ),
    )
    return 1
