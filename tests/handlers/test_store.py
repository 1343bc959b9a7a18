"""memory::store's handler (contract section 2) on a plain connection with a fixed clock."""

from __future__ import annotations

import hashlib
import uuid

import apsw
import pytest

from handlers.store import estimate_importance
from tests.handlers.support import NOW, rows, store


def test_store_returns_a_new_uuid7_of_its_time_and_keeps_content_and_its_sha256(
    conn: apsw.Connection,
) -> None:
    reply = store(conn, "a1", "the sky is blue")
    assert reply.stored is True and reply.deduplicated is False
    assert uuid.UUID(reply.id).version == 7 and len(reply.id) == 36
    assert int(uuid.UUID(reply.id).hex[:12], 16) == NOW  # its first 48 bits: the time, in ms
    [(content, digest)] = rows(conn, "SELECT content, hash FROM memories WHERE id = ?", reply.id)
    assert content == "the sky is blue"
    assert digest == hashlib.sha256(b"the sky is blue").hexdigest()


def test_same_content_same_agent_is_deduplicated_with_the_existing_id(
    conn: apsw.Connection,
) -> None:
    first = store(conn, "a1", "same words")
    again = store(conn, "a1", "same words", role="assistant")
    assert again == (first.id, False, True)  # (id, stored, deduplicated)
    assert rows(conn, "SELECT count(*), role FROM memories") == [(1, "user")]


def test_dedup_is_per_agent(conn: apsw.Connection) -> None:
    first = store(conn, "a1", "shared words")
    other = store(conn, "a2", "shared words")
    assert other.stored is True and other.id != first.id


@pytest.mark.parametrize(
    ("content", "role", "expected"),
    [
        ("plain note", "user", 0.5),
        ("plain note", "assistant", 0.6),
        ("x" * 501, "user", 0.6),
        ("x" * 500, "user", 0.5),
        ("found a BUG today", "user", 0.65),
        ("error and fix and critical", "user", 0.65),
        ("```code```", "user", 0.6),
        ("Error ```fix``` " + "y" * 500, "assistant", 0.95),
        ("é" * 251, "user", 0.6),  # 502 bytes of UTF-8, 251 characters
        ("CRITICAL error ```x``` " + "z" * 600, "assistant", 0.95),
    ],
)
def test_importance_estimate_follows_the_contract(content: str, role: str, expected: float) -> None:
    assert estimate_importance(content, role) == pytest.approx(min(1.0, expected))


def test_stored_memory_starts_with_full_confidence_and_no_accesses(conn: apsw.Connection) -> None:
    reply = store(conn, "a1", "note", timestamp=1_600_000_000_000, importance=0.3)
    [row] = rows(
        conn,
        "SELECT confidence, access_count, last_accessed, timestamp, importance, role, metadata, "
        "created_at FROM memories WHERE id = ?",
        reply.id,
    )
    assert row == (1.0, 0, 1_600_000_000_000, 1_600_000_000_000, 0.3, "user", None, NOW)


def test_timestamp_and_importance_default_to_now_and_the_estimate(conn: apsw.Connection) -> None:
    reply = store(conn, "a1", "a bug", role="assistant")
    [row] = rows(conn, "SELECT timestamp, last_accessed, importance FROM memories")
    assert reply.stored and row == (NOW, NOW, pytest.approx(0.75))


def test_session_store_appends_once_even_when_deduplicated(conn: apsw.Connection) -> None:
    first = store(conn, "a1", "hello", session_id="s1")
    store(conn, "a1", "hello", session_id="s1")
    store(conn, "a1", "hello", session_id="s2")
    refs = rows(
        conn, "SELECT session_id, memory_id FROM session_messages ORDER BY session_id, position"
    )
    assert refs == [("s1", first.id), ("s2", first.id)]


def test_store_keeps_the_session_created_at_and_moves_its_updated_at_to_now(
    conn: apsw.Connection,
) -> None:
    store(conn, "a1", "one", session_id="s1")
    store(conn, "a1", "two", session_id="s1", now=NOW + 5)
    assert rows(conn, "SELECT created_at, updated_at FROM sessions") == [(NOW, NOW + 5)]
