"""A topic's built-in title, labels and summary as a read shows them: made from the topic's
messages (not forgotten) when its stored text is older than they are.

A store does not remake the text (made on every store, it was most of a store's topic cost;
made at 1, 2, 4, 8, 16 and 32 messages, still a fifth of it on
tests/fixtures/topic_sessions.jsonl): it keeps the message count the stored text was made at
(`text_at` in the profile column), and `memory::topic::list`, `memory::topic::get` and
`memory::session::resume` make the text of a topic whose count has moved on, from at most
TEXT_SAMPLE of its messages (its first TEXT_FIRST, which usually say what it is about, and its
latest), so a read's cost does not grow with the topic. Reads do not write: the stored text
stays as the store that started the topic, a forget or a repair left it (export carries it;
a read after import makes it anew).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import apsw
import msgspec

from handlers.topics.extract import TopicText, extract
from schema.base import Agent

TEXT_FIRST = 6  # a topic's opening messages, which usually say what it is about
TEXT_SAMPLE = 32  # messages its built-in text is made from
CACHED_CHARS = 65_536  # the largest sample whose text is kept for the next read

_PRESENT = (
    "FROM session_messages m JOIN memories k ON k.id = m.memory_id AND k.tenant = m.tenant "
    "AND k.agent_id = m.agent_id AND k.forgotten_at IS NULL "
    "WHERE m.tenant = ? AND m.agent_id = ? AND m.topic_id = ?"
)


def sample(conn: apsw.Connection, agent: Agent, topic_id: str, count: int) -> list[tuple[str, str]]:
    """(role, content) of the topic's first TEXT_FIRST messages and its latest, in order, of
    those not forgotten; `count`: its messages. A topic of up to TEXT_SAMPLE is read whole;
    a larger one by its first and its latest (two index scans: one query of their union cost
    twice as much)."""
    if count <= TEXT_SAMPLE:
        whole = conn.execute(
            f"SELECT m.role, k.content {_PRESENT} ORDER BY m.position LIMIT ?",
            (*agent, topic_id, TEXT_SAMPLE + 1),
        ).fetchall()
        if len(whole) <= TEXT_SAMPLE:
            return [(str(role), str(content)) for role, content in whole]
    first = conn.execute(
        f"SELECT m.position, m.role, k.content {_PRESENT} ORDER BY m.position LIMIT ?",
        (*agent, topic_id, TEXT_FIRST),
    ).fetchall()
    latest = conn.execute(
        f"SELECT m.position, m.role, k.content {_PRESENT} ORDER BY m.position DESC LIMIT ?",
        (*agent, topic_id, TEXT_SAMPLE - TEXT_FIRST),
    ).fetchall()
    after = first[-1][0] if first else None
    rows = first + [row for row in reversed(latest) if after is not None and row[0] > after]
    return [(str(role), str(content)) for _, role, content in rows]


def made_text(
    conn: apsw.Connection, agent: Agent, topic_id: str, count: int, roles: Mapping[str, int]
) -> TopicText:
    """The topic's text made now; `count`: its messages, `roles`: them by role (the summary's
    header)."""
    said = tuple(sample(conn, agent, topic_id, count))
    header = tuple(sorted(roles.items()))
    if sum(len(text) for _, text in said) > CACHED_CHARS:
        return _extract(said, header)
    text = _cached_extract(said, header)
    return msgspec.structs.replace(text, labels=list(text.labels))


def _extract(
    messages: tuple[tuple[str, str], ...], roles: tuple[tuple[str, int], ...]
) -> TopicText:
    return extract(messages, roles=dict(roles))


# The same messages give the same text: a topic read again and again (a resume on every turn
# of a long session) is made once until a message joins it. Samples of up to CACHED_CHARS only,
# so that the cache stays small (256 of them, at most 16 MB).
_cached_extract = lru_cache(maxsize=256)(_extract)
