"""memory::session::list, compaction planning/applying and repair on a plain connection."""

from __future__ import annotations

import apsw
import msgspec
import pytest

from handlers.session import (
    CompactionPlan,
    apply_compaction,
    chunk_text,
    fallback_summary,
    plan_compaction,
    session_list,
)
from handlers.session_refs import Ref, read_messages, write_messages
from handlers.session_repair import repair
from schema.errors import NotFound, Unavailable
from schema.session import (
    CompactReply,
    CompactRequest,
    RepairReply,
    RepairRequest,
    RepairStats,
    SessionListRequest,
)
from tests.handlers.support import NOW, rows, store


def fill(conn: apsw.Connection, count: int, agent: str = "a", session: str = "s") -> list[str]:
    """`count` messages alternating user and assistant, timestamps 1000, 1001, ..."""
    return [
        store(
            conn,
            agent,
            f"message {index}",
            session_id=session,
            role="user" if index % 2 == 0 else "assistant",
            timestamp=1_000 + index,
        ).id
        for index in range(count)
    ]


def plan(conn: apsw.Connection, **fields: int) -> CompactionPlan | CompactReply:
    req = CompactRequest(agent_id="a", session_id="s", **fields)  # type: ignore[arg-type]
    return plan_compaction(conn, req)


def compact(
    conn: apsw.Connection, summary: str, *, now: int = NOW + 1, **fields: int
) -> CompactReply:
    req = CompactRequest(agent_id="a", session_id="s", **fields)  # type: ignore[arg-type]
    planned = plan_compaction(conn, req)
    assert isinstance(planned, CompactionPlan)
    with conn:
        reply = apply_compaction(conn, req, planned, summary=summary, summarizer="llm", now=now)
    return reply


def test_list_is_newest_first_with_counts_and_times(conn: apsw.Connection) -> None:
    for index in range(3):
        store(conn, "a", f"old {index}", session_id="old", now=NOW + index)
    for index in range(2):
        store(conn, "a", f"new {index}", session_id="new", now=NOW + 10 + index)
    store(conn, "b", "other agent", session_id="theirs", now=NOW + 20)
    sessions = session_list(conn, SessionListRequest(agent_id="a"), now=0).sessions
    assert [(s.id, s.message_count) for s in sessions] == [("new", 2), ("old", 3)]
    assert (sessions[0].created_at, sessions[0].updated_at) == (NOW + 10, NOW + 11)
    assert sessions[0].compacted_at is None and sessions[0].repaired_at is None
    assert session_list(conn, SessionListRequest(agent_id="nobody"), now=0).sessions == []


@pytest.mark.parametrize(("count", "compacted"), [(29, False), (30, True), (31, True)])
def test_compaction_threshold_defaults_to_thirty_and_keeps_ten(
    conn: apsw.Connection, count: int, compacted: bool
) -> None:
    fill(conn, count)
    planned = plan(conn)
    if not compacted:
        assert planned == CompactReply(compacted=False, reason="below_threshold")
        return
    assert isinstance(planned, CompactionPlan) and len(planned.summarized) == count - 10
    reply = compact(conn, "LLM summary")
    assert (reply.compacted, reply.summarizer) == (True, "llm")
    assert (reply.summarized, reply.kept) == (count - 10, 10)


def test_the_plan_holds_the_older_messages_as_role_prefixed_text(conn: apsw.Connection) -> None:
    fill(conn, 12)
    planned = plan(conn, threshold=5, keep_recent=4)
    assert isinstance(planned, CompactionPlan)
    [text] = planned.chunks
    assert text.startswith("user: message 0\n\nassistant: message 1\n\n")
    assert text.endswith("assistant: message 7") and planned.last_timestamp == 1_007


def test_compaction_stores_the_summary_and_rewrites_the_list(conn: apsw.Connection) -> None:
    ids = fill(conn, 12)
    reply = compact(conn, "LLM summary 1", now=NOW + 7, threshold=5, keep_recent=4)
    assert (reply.summarized, reply.kept) == (8, 4)
    [row] = rows(
        conn,
        "SELECT content, role, importance, session_id, timestamp FROM memories WHERE id = ?",
        reply.summary_id,
    )
    assert row == ("LLM summary 1", "system", 0.9, "s", 1_007)
    refs = [ref[0] for ref in read_messages(conn, ("", "a"), "s")]
    assert refs == [reply.summary_id, *ids[8:]]
    assert rows(conn, "SELECT count(*) FROM memories WHERE agent_id = 'a'") == [(13,)]
    [session] = session_list(conn, SessionListRequest(agent_id="a"), now=0).sessions
    assert (session.compacted_at, session.updated_at) == (NOW + 7, NOW + 7)
    assert session.message_count == 5


def test_a_blank_llm_summary_is_replaced_by_the_fallback(conn: apsw.Connection) -> None:
    fill(conn, 30)
    reply = compact(conn, "  ")
    assert reply.summarizer == "fallback"
    [(content,)] = rows(conn, "SELECT content FROM memories WHERE id = ?", reply.summary_id)
    assert str(content).startswith("Summary of 20 earlier messages") and len(str(content)) <= 8000


def test_applying_refuses_a_list_that_changed_since_the_plan(conn: apsw.Connection) -> None:
    fill(conn, 30)
    req = CompactRequest(agent_id="a", session_id="s")
    planned = plan_compaction(conn, req)
    assert isinstance(planned, CompactionPlan)
    with conn:
        write_messages(conn, ("", "a"), "s", read_messages(conn, ("", "a"), "s")[1:])
    with pytest.raises(Unavailable, match="changed during compaction"):
        apply_compaction(conn, req, planned, summary="late", summarizer="llm", now=NOW)


def test_chunking_cuts_after_the_last_newline_and_loses_nothing() -> None:
    text = ("line of text ü\n" * 20_000) + "x" * 100_000
    chunks = chunk_text(text)
    assert "".join(chunks) == text
    assert all(len(chunk) <= 80_000 for chunk in chunks)
    assert chunks[0].endswith("\n") and len(chunks[0]) == 80_000 - 80_000 % 15
    assert chunk_text("y" * 160_001) == ["y" * 80_000, "y" * 80_000, "y"]
    assert chunk_text("") == []


def test_fallback_summary_is_deterministic_bounded_and_non_empty() -> None:
    lines = [("user" if i % 2 else "assistant", f"point {i}. " + "z" * 500) for i in range(2000)]
    summary = fallback_summary(lines)
    assert summary == fallback_summary(lines) and 0 < len(summary) <= 8000
    assert summary.startswith("Summary of 2000 earlier messages (1000 assistant, 1000 user).")
    assert fallback_summary([]) != ""


def test_another_agents_or_an_unknown_session_is_not_found(conn: apsw.Connection) -> None:
    fill(conn, 30)
    with pytest.raises(NotFound, match=r"\$\.sessionId"):
        plan_compaction(conn, CompactRequest(agent_id="b", session_id="s"))
    with pytest.raises(NotFound):
        repair(conn, RepairRequest(agent_id="a", session_id="nope"), now=NOW)


def run_repair(conn: apsw.Connection, now: int = NOW + 1) -> RepairReply:
    with conn:
        reply = repair(conn, RepairRequest(agent_id="a", session_id="s"), now=now)
    return reply


def fixes(reply: RepairReply) -> dict[str, int]:
    """The non-zero counts of the reply's stats."""
    counts = msgspec.structs.asdict(reply.stats)
    return {key: value for key, value in counts.items() if value}


def set_refs(conn: apsw.Connection, refs: list[Ref]) -> None:
    with conn:
        write_messages(conn, ("", "a"), "s", refs)


@pytest.mark.parametrize(
    ("broken", "expected_stats"),
    [
        ("empty", {"empty_removed": 2}),
        ("duplicate", {"duplicates_removed": 1}),
        ("orphan", {"orphaned_refs": 1}),
        ("reorder", {"reordered": 1}),
    ],
)
def test_each_repair_phase_on_its_own(
    conn: apsw.Connection, broken: str, expected_stats: dict[str, int]
) -> None:
    ids = fill(conn, 3)
    good: list[Ref] = [(ids[0], "user", 1000), (ids[1], "assistant", 1001), (ids[2], "user", 1002)]
    refs = list(good)
    if broken == "empty":
        refs = [refs[0], (None, "user", 1000), refs[1], ("", "assistant", 1001), refs[2]]
    elif broken == "duplicate":
        refs = [*refs, refs[1]]
    elif broken == "orphan":
        refs = [refs[0], ("no-such-memory", "assistant", 1001), refs[1], refs[2]]
    elif broken == "reorder":
        refs = [refs[0], (ids[1], "assistant", 999), refs[2]]
    set_refs(conn, refs)
    reply = run_repair(conn)
    assert reply.repaired is True and fixes(reply) == expected_stats
    assert reply.total_fixes == sum(expected_stats.values())
    after = read_messages(conn, ("", "a"), "s")
    if broken == "reorder":
        assert after == [good[0], (ids[1], "assistant", 1001), good[2]]
    else:
        assert after == good
    assert run_repair(conn).total_fixes == 0


def test_repair_merges_consecutive_same_role_messages_into_a_new_memory(
    conn: apsw.Connection,
) -> None:
    first = store(conn, "a", "part one", session_id="s", timestamp=10, importance=0.3).id
    second = store(conn, "a", "part two", session_id="s", timestamp=20, importance=0.8).id
    third = store(conn, "a", "answer", session_id="s", role="assistant", timestamp=30).id
    reply = run_repair(conn, now=NOW + 3)
    assert fixes(reply) == {"consecutive_merged": 1} and reply.repaired is True
    [merged, answer] = read_messages(conn, ("", "a"), "s")
    assert answer == (third, "assistant", 30) and merged[1:] == ("user", 10)
    [row] = rows(
        conn,
        "SELECT content, importance, timestamp, session_id FROM memories WHERE id = ?",
        merged[0],
    )
    assert row == ("part one\n\npart two", 0.8, 10, "s")
    assert rows(conn, "SELECT count(*) FROM memories WHERE id IN (?, ?)", first, second) == [(2,)]
    again = run_repair(conn, now=NOW + 9)
    assert again.repaired is False and again.total_fixes == 0
    [session] = session_list(conn, SessionListRequest(agent_id="a"), now=0).sessions
    assert (session.repaired_at, session.updated_at) == (NOW + 3, NOW + 3)


def test_system_messages_are_never_merged_and_oversize_is_only_counted(
    conn: apsw.Connection,
) -> None:
    store(conn, "a", "rule one", session_id="s", role="system", timestamp=1)
    store(conn, "a", "rule two", session_id="s", role="system", timestamp=2)
    store(conn, "a", "y" * 500_001, session_id="s", timestamp=3)
    before = read_messages(conn, ("", "a"), "s")
    assert run_repair(conn) == RepairReply(
        repaired=False,
        total_fixes=0,
        stats=RepairStats(
            empty_removed=0, duplicates_removed=0, consecutive_merged=0,
            orphaned_refs=0, reordered=0, oversized_detected=1,
        ),
    )  # fmt: skip
    assert read_messages(conn, ("", "a"), "s") == before
    [session] = session_list(conn, SessionListRequest(agent_id="a"), now=0).sessions
    assert session.repaired_at is None


def test_an_orphan_between_two_same_role_messages_is_dropped_then_they_merge(
    conn: apsw.Connection,
) -> None:
    one = store(conn, "a", "first", session_id="s", timestamp=1).id
    two = store(conn, "a", "second", session_id="s", timestamp=3).id
    set_refs(conn, [(one, "user", 1), ("gone", "assistant", 2), (two, "user", 3)])
    reply = run_repair(conn)
    assert fixes(reply) == {"orphaned_refs": 1, "consecutive_merged": 1}
    assert len(read_messages(conn, ("", "a"), "s")) == 1
