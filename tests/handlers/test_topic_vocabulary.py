"""A topic's vocabulary (every stem it has used, for a resume query; contract section 21): a
store folds its message's stems into the stored vocabulary only when a window of them is
waiting, and resume and export see what placing the messages one by one left."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import msgspec

from handlers.sanitize import Sanitized
from handlers.tables.topics import export_topics
from handlers.topics.profile import WINDOW, profile_of
from handlers.topics.resume import session_resume
from handlers.topics.words import keyword_stems
from schema.memory import StoreRequest
from schema.topics import SessionResumeRequest
from tests.test_transfer import migrated
from worker.triggers.preparing import Prepared
from worker.triggers.storing import apply_store, decide_store

# Messages of distinct words, so that each window of stems is told apart.
WORDS = [
    "lisbon",
    "hotel",
    "tram",
    "pastel",
    "fado",
    "alfama",
    "sintra",
    "belem",
    "ferry",
    "cascais",
    "porto",
    "douro",
    "azulejo",
    "miradouro",
    "bacalhau",
    "ginjinha",
    "chiado",
    "bairro",
    "cathedral",
    "funicular",
]
TEXTS = [f"Planning the {word} visit with {word}s and more {word}ing" for word in WORDS]


def stored(conn: apsw.Connection, texts: list[str], topic: str, start: int = 1) -> None:
    """Each text stored as a user message of session `s`, named into `topic`."""
    for n, text in enumerate(texts, start=start):
        body = {"agentId": "a", "content": text, "role": "user", "sessionId": "s", "topicId": topic}
        req = msgspec.convert(body, StoreRequest)
        with conn:
            decided = decide_store(conn, req, n, Prepared(req, Sanitized(text, {}, [], ()), None))
            apply_store(conn, decided)


def stored_vocabulary(conn: apsw.Connection) -> dict[str, int]:
    [(profile,)] = conn.execute("SELECT profile FROM topics WHERE id = 't'").fetchall()
    found: dict[str, int] = json.loads(str(profile))["vocabulary"]
    return found


def test_a_store_folds_stems_into_the_stored_vocabulary_once_a_window_of_them_waits(
    tmp_path: Path,
) -> None:
    conn = migrated(tmp_path / "memory.db")
    stored(conn, TEXTS[:WINDOW], "t")  # the first message starts the topic, 11 wait
    assert set(stored_vocabulary(conn)) == set(keyword_stems(TEXTS[0]))
    stored(conn, TEXTS[WINDOW : WINDOW + 1], "t", start=WINDOW + 1)  # the 12th waiting
    everything = profile_of("t", [(text, None) for text in TEXTS[: WINDOW + 1]]).vocabulary
    assert stored_vocabulary(conn) == everything


def test_resume_and_export_see_every_stem_of_the_topic_folded_or_not(tmp_path: Path) -> None:
    """A query naming only the topic's latest message (not folded yet) picks it; export
    carries the vocabulary as placing the messages one by one left it."""
    conn = migrated(tmp_path / "memory.db")
    stored(conn, ["Fix the flaky checkout test in CI before the release"], "u")
    stored(conn, TEXTS, "t", start=2)
    assert "funicular" not in stored_vocabulary(conn)  # the last messages wait
    query = {"agentId": "a", "sessionId": "s", "query": "the funicular"}
    reply = session_resume(conn, msgspec.convert(query, SessionResumeRequest), now=0)
    assert reply.topic_id == "t"
    [record] = [r for r in export_topics(conn, "", "a") if r.id == "t"]
    assert record.vocabulary == profile_of("t", [(text, None) for text in TEXTS]).vocabulary
