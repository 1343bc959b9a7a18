"""Topics kept right when messages leave a session's list or are forgotten (contract section 21).

Delete, eviction and merging take messages out of lists; compaction and repair rewrite a
session's list; forget hides a message's text. Each then refreshes the topics it touched, in
its own transaction: a topic with no message left in the list is removed; otherwise its
message count, first and last times and latest position follow the list, and its title,
labels, summary and open loops are remade from its messages that are neither gone nor
forgotten, so that no forgotten text lingers in a topic (an LLM's text included: the built-in
text replaces it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import apsw
import msgspec
from msgspec import UNSET

from handlers.topics.extract import extract
from handlers.topics.loops import LoopMessage, OpenLoop, advance
from handlers.topics.stored import MAX_LOOPS, Extra
from handlers.topics.text import TEXT_FIRST, TEXT_SAMPLE
from schema.base import Agent

_ENCODE = msgspec.json.Encoder()
_EXTRA = msgspec.json.Decoder(Extra)


def topics_of_memories(conn: apsw.Connection, agent: Agent, memory_ids: Iterable[str]) -> set[str]:
    """The topics the memories' messages are in, over every session of the agent."""
    found: set[str] = set()
    for memory_id in memory_ids:
        for (topic_id,) in conn.execute(
            "SELECT topic_id FROM session_messages INDEXED BY session_messages_by_memory "
            "WHERE tenant = ? AND agent_id = ? AND memory_id = ? AND topic_id IS NOT NULL",
            (*agent, memory_id),
        ):
            found.add(str(topic_id))
    return found


def topics_of_session(conn: apsw.Connection, agent: Agent, session_id: str) -> set[str]:
    rows = conn.execute(
        "SELECT id FROM topics WHERE tenant = ? AND agent_id = ? AND session_id = ?",
        (*agent, session_id),
    )
    return {str(row[0]) for row in rows}


def refresh_topics(conn: apsw.Connection, agent: Agent, topic_ids: Iterable[str]) -> None:
    """Each topic made to follow its messages in the list (removed when none is left)."""
    for topic_id in sorted(set(topic_ids)):
        _refresh(conn, agent, topic_id)


def _refresh(conn: apsw.Connection, agent: Agent, topic_id: str) -> None:
    rows: list[Any] = conn.execute(
        "SELECT m.position, m.memory_id, m.role, m.timestamp, k.content "
        "FROM session_messages m LEFT JOIN memories k ON k.id = m.memory_id "
        "AND k.tenant = m.tenant AND k.agent_id = m.agent_id AND k.forgotten_at IS NULL "
        "WHERE m.tenant = ? AND m.agent_id = ? AND m.topic_id = ? ORDER BY m.position",
        (*agent, topic_id),
    ).fetchall()
    if not rows:
        conn.execute(
            "DELETE FROM topics WHERE tenant = ? AND agent_id = ? AND id = ?", (*agent, topic_id)
        )
        return
    held = conn.execute(
        "SELECT profile FROM topics WHERE tenant = ? AND agent_id = ? AND id = ?",
        (*agent, topic_id),
    ).fetchone()
    if held is None:  # messages name a topic without a row (an older import): left as it is
        return
    present = [
        (str(memory_id), str(role), str(content))
        for _, memory_id, role, _, content in rows
        if content is not None and memory_id is not None
    ]
    loops: list[OpenLoop] = []
    for memory_id, role, content in present:
        loops = advance(loops, LoopMessage(id=memory_id, role=role, text=content))[-MAX_LOOPS:]
    roles = Counter(role for _, role, _ in present)
    said = [(role, content) for _, role, content in present]
    sample = (
        said
        if len(said) <= TEXT_SAMPLE
        else [*said[:TEXT_FIRST], *said[-(TEXT_SAMPLE - TEXT_FIRST) :]]
    )
    text = extract(sample, roles=roles)
    extra = msgspec.structs.replace(
        _EXTRA.decode(held[0]), roles=dict(roles), text_at=len(rows), llm_titled=UNSET
    )
    timestamps = [int(row[3]) for row in rows]
    conn.execute(
        "UPDATE topics SET title = ?, labels = ?, summary = ?, open_loops = ?, message_count = ?, "
        "first_at = ?, last_active_at = ?, last_position = ?, profile = ? "
        "WHERE tenant = ? AND agent_id = ? AND id = ?",
        (
            text.title,
            _ENCODE.encode(text.labels).decode(),
            text.summary,
            _ENCODE.encode(loops).decode(),
            len(rows),
            min(timestamps),
            max(timestamps),
            int(rows[-1][0]),
            _ENCODE.encode(extra).decode(),
            *agent,
            topic_id,
        ),
    )
