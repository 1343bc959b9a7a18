"""A topic's title, labels and summary from the LLM service (contract section 21: from the LLM
when it answers in time, else the built-in extract, as compaction falls back in section 7).

The store never waits for the LLM: it writes the built-in text in its own transaction, and when
the topic reaches the messages at which the LLM is asked (extract.py `asks_llm`) the worker
asks in the background (worker/topic_titles.py). What it shows the LLM is read here
(`title_sample`: the topic's first messages and its latest, neither forgotten nor gone), and
what the LLM answers is read here too (`read_answer`: one JSON object, else nothing). The
answer is then a write whose decision holds all of it (`Titled`); its apply writes the text
only if the topic is still there, in the same session, with every message the LLM was shown
still in it and not forgotten: a topic whose messages were deleted, forgotten, compacted away
or moved meanwhile keeps what it has. Nothing in apply reads the clock, so a shard replays it.
"""

from __future__ import annotations

import re
from typing import Any

import apsw
import msgspec

from handlers.topics.extract import LABELS, SUMMARY_CHARS, TITLE_CHARS, TopicText, header_of
from handlers.topics.stored import Extra
from handlers.topics.text import TEXT_FIRST, TEXT_SAMPLE
from schema.base import Agent

MESSAGE_CHARS = 1_500  # of each message shown to the LLM
PROMPT_CHARS = 16_000  # of all of them
LABEL_CHARS = 40

SYSTEM_PROMPT = (
    "You name one thread of a conversation for an AI agent's long-term memory. Answer with "
    'one JSON object only: {"title": "...", "labels": ["...", ...], "summary": "..."}. '
    "title: what the thread is about, at most 8 words. labels: 1 to 5 keywords (names, "
    "subjects). summary: at most 3 sentences with the facts, decisions and what is still open."
)


class TitleSample(msgspec.Struct, frozen=True, kw_only=True):
    """What the LLM is shown of a topic: its messages (role, text) in session order and their
    memory ids, and the topic's session and message count when it was read."""

    topic_id: str
    session_id: str
    message_count: int
    message_ids: list[str]
    said: list[tuple[str, str]]


def title_sample(conn: apsw.Connection, agent: Agent, topic_id: str) -> TitleSample | None:
    """The topic's first TEXT_FIRST messages and its latest, up to TEXT_SAMPLE, that are
    neither forgotten nor gone; None when the topic is gone or has none."""
    row = conn.execute(
        "SELECT session_id, message_count FROM topics WHERE tenant = ? AND agent_id = ? AND id = ?",
        (*agent, topic_id),
    ).fetchone()
    if row is None:
        return None
    present = (
        "SELECT m.position, m.memory_id, m.role, k.content FROM session_messages m "
        "JOIN memories k ON k.id = m.memory_id AND k.tenant = m.tenant "
        "AND k.agent_id = m.agent_id AND k.forgotten_at IS NULL "
        "WHERE m.tenant = ? AND m.agent_id = ? AND m.topic_id = ? ORDER BY m.position"
    )
    rows = conn.execute(
        f"SELECT * FROM (SELECT * FROM ({present} LIMIT ?) UNION "
        f"SELECT * FROM ({present} DESC LIMIT ?)) ORDER BY position",
        (*agent, topic_id, TEXT_FIRST, *agent, topic_id, TEXT_SAMPLE - TEXT_FIRST),
    ).fetchall()
    if not rows:
        return None
    return TitleSample(
        topic_id=topic_id,
        session_id=str(row[0]),
        message_count=int(row[1]),
        message_ids=[str(memory_id) for _, memory_id, _, _ in rows],
        said=[(str(role), str(content)) for _, _, role, content in rows],
    )


def prompt_of(sample: TitleSample) -> str:
    """The messages as `role: text` lines, each within MESSAGE_CHARS, all within PROMPT_CHARS
    (the latest kept first when they do not fit: a thread's end says what is open)."""
    lines: list[str] = []
    room = PROMPT_CHARS
    for role, text in reversed(sample.said):
        line = f"{role}: {' '.join(text.split())[:MESSAGE_CHARS]}"
        if len(line) + 2 > room:
            break
        lines.append(line)
        room -= len(line) + 2
    return "\n\n".join(reversed(lines))


class _Answer(msgspec.Struct, frozen=True):
    title: str
    labels: list[str]
    summary: str


_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


def read_answer(answer: str) -> TopicText | None:
    """The LLM's answer as a topic's text, or None when it is not one JSON object with a
    non-empty title, 1 or more labels and a non-empty summary (a fenced ```json block is
    read too). Each part is bounded as the built-in text is."""
    text = answer.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        found = msgspec.json.decode(text, type=_Answer)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    labels: list[str] = []
    for label in found.labels:
        label = " ".join(label.split())
        if label and len(label) <= LABEL_CHARS and label.lower() not in map(str.lower, labels):
            labels.append(label)
    title = _one_line(found.title, TITLE_CHARS)
    summary = " ".join(found.summary.split())
    if not title or not labels or not summary:
        return None
    return TopicText(title=title, labels=labels[:LABELS], summary=summary)


class Titled(msgspec.Struct, frozen=True, kw_only=True):
    """The LLM's text decided for a topic: whose, which session, the message count and the
    messages it was made from, and the text (already through the sanitiser)."""

    tenant: str
    agent_id: str
    topic_id: str
    session_id: str
    message_count: int
    message_ids: list[str]
    title: str
    labels: list[str]
    summary: str


_EXTRA = msgspec.json.Decoder(Extra)
_ENCODE = msgspec.json.Encoder()


def _still_there(conn: apsw.Connection, d: Titled) -> bool:
    """Whether every message the LLM was shown is still in the topic, neither forgotten nor
    gone."""
    shown = sorted(set(d.message_ids))
    marks = ", ".join("?" * len(shown))
    found: Any
    [(found,)] = conn.execute(
        "SELECT count(DISTINCT m.memory_id) FROM session_messages m JOIN memories k "
        "ON k.id = m.memory_id AND k.tenant = m.tenant AND k.agent_id = m.agent_id "
        "AND k.forgotten_at IS NULL WHERE m.tenant = ? AND m.agent_id = ? AND m.topic_id = ? "
        f"AND m.memory_id IN ({marks})",
        (d.tenant, d.agent_id, d.topic_id, *shown),
    ).fetchall()
    return int(found) == len(shown)


def apply_titled(conn: apsw.Connection, d: Titled) -> bool:
    """The LLM's text on the topic (the summary after the count of messages by role, as the
    built-in one starts), marked as the LLM's; False, and nothing written, when the topic is
    gone, in another session, or lost or forgot a message the LLM was shown."""
    row = conn.execute(
        "SELECT session_id, profile FROM topics WHERE tenant = ? AND agent_id = ? AND id = ?",
        (d.tenant, d.agent_id, d.topic_id),
    ).fetchone()
    if row is None or str(row[0]) != d.session_id or not d.message_ids:
        return False
    if not _still_there(conn, d):
        return False
    extra = _EXTRA.decode(row[1])
    header = header_of(extra.roles)
    summary = _one_line(f"{header} {d.summary}", SUMMARY_CHARS)
    extra = msgspec.structs.replace(extra, llm_titled=d.message_count)
    conn.execute(
        "UPDATE topics SET title = ?, labels = ?, summary = ?, profile = ? "
        "WHERE tenant = ? AND agent_id = ? AND id = ?",
        (
            d.title,
            _ENCODE.encode(d.labels).decode(),
            summary,
            _ENCODE.encode(extra).decode(),
            d.tenant,
            d.agent_id,
            d.topic_id,
        ),
    )
    return True
