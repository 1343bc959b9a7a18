"""Recall's expanded mode (handlers/recall/expand.py) over an agent's columns with a fixed now:
a memory next to a strong hit in its conversation is lifted above one that is not."""

from __future__ import annotations

from typing import Any

import apsw
import pytest

from handlers.recall.columns import Columns
from handlers.recall.expand import Expansion
from handlers.recall.expand import expanded_rank as expanded_rank_of
from handlers.recall.rank import rank
from schema.memory import RecallRequest
from tests.handlers.support import NOW, store
from tests.handlers.test_stats_recall import columns
from worker.config import ConfigError, load_config

SECOND = 1000
HOUR = 3_600_000


def expanded_rank(
    columns: Columns, req: RecallRequest, **options: object
) -> list[tuple[str, float]]:
    """The expanded ranking, with `now` and the rest as keywords."""
    return expanded_rank_of(columns, req, **options)  # type: ignore[arg-type]


def both(conn: apsw.Connection, query: str, **fields: object) -> tuple[list[str], list[str]]:
    """The formula's order and the expanded order of the agent's memories, as contents."""
    req = RecallRequest(agent_id="a", query=query, **fields)  # type: ignore[arg-type]
    found = columns(conn, "a")
    content = {found.ids[row]: row for row in range(found.rows)}
    texts = {
        memory_id: text for memory_id, text in conn.execute("SELECT id, content FROM memories")
    }
    formula = rank(found, req, now=NOW, query_vector=None)
    expanded = expanded_rank(found, req, now=NOW, query_vector=None)
    assert set(content) >= {memory_id for memory_id, _ in expanded}
    return [texts[i] for i, _ in formula], [texts[i] for i, _ in expanded]


def turn(conn: apsw.Connection, content: str, at: int, session: str | None = None) -> str:
    fields: dict[str, Any] = {} if session is None else {"session_id": session}
    return store(conn, "a", content, timestamp=NOW - HOUR * 24 + at, **fields).id


def test_the_turn_after_a_strong_hit_is_lifted_above_a_newer_turn_of_another_session(
    conn: apsw.Connection,
) -> None:
    turn(conn, "what did you paint last week", 0, "s1")
    turn(conn, "oh a lake at dawn", SECOND, "s1")
    turn(conn, "the weather was nice", 10 * SECOND, "s2")
    formula, expanded = both(conn, "paint")
    assert formula == ["what did you paint last week", "the weather was nice", "oh a lake at dawn"]
    assert expanded == ["what did you paint last week", "oh a lake at dawn", "the weather was nice"]


def test_the_expanded_score_is_the_stage_score_plus_the_lift_share_of_the_neighbours_lead(
    conn: apsw.Connection,
) -> None:
    """The stage's score is the formula's with the keyword term weighed `keyword` instead of
    0.25; the answer, matching no keyword, takes `lift` of the hit's lead over it; each is
    given over the highest stage score (`ceiling`)."""
    hit = turn(conn, "what did you paint last week", 0, "s1")
    answer = turn(conn, "oh a lake at dawn", SECOND, "s1")
    req = RecallRequest(agent_id="a", query="paint")
    found = columns(conn, "a")
    formula = dict(rank(found, req, now=NOW, query_vector=None))
    expanded = dict(expanded_rank(found, req, now=NOW, query_vector=None))
    lift, keyword, ceiling = Expansion().lift, Expansion().keyword, Expansion().ceiling
    stage_hit = formula[hit] + (keyword - 0.25) * 1.0  # the one keyword matched: share 1
    assert expanded[hit] == pytest.approx(stage_hit / ceiling, abs=1e-12)
    assert expanded[answer] == pytest.approx(
        (formula[answer] + lift * (stage_hit - formula[answer])) / ceiling, abs=1e-12
    )


def test_at_the_formulas_keyword_weight_the_stage_score_is_the_formulas(
    conn: apsw.Connection,
) -> None:
    hit = turn(conn, "what did you paint last week", 0, "s1")
    other = turn(conn, "the weather was nice", 10 * SECOND, "s2")
    req = RecallRequest(agent_id="a", query="paint weather")
    found = columns(conn, "a")
    formula = dict(rank(found, req, now=NOW, query_vector=None))
    same = dict(
        expanded_rank(found, req, now=NOW, query_vector=None, expansion=Expansion(keyword=0.25))
    )
    assert same == {hit: formula[hit], other: formula[other]}


def test_a_heavier_keyword_term_puts_an_old_partial_match_above_a_recent_memory(
    conn: apsw.Connection,
) -> None:
    """One of four keywords (share 0.25) weighs 0.0625 in the formula, less than a recent
    memory's recency (about 0.09); at the default weight 0.8 it weighs 0.2 and wins."""
    old = turn(conn, "a lake far away", -10 * 7 * 24 * HOUR, "s1")
    recent = turn(conn, "the weather was nice", 0, "s2")
    req = RecallRequest(agent_id="a", query="paint lake heron reeds")
    found = columns(conn, "a")
    assert [i for i, _ in rank(found, req, now=NOW, query_vector=None)] == [recent, old]
    expanded = expanded_rank(found, req, now=NOW, query_vector=None)
    assert [i for i, _ in expanded] == [old, recent]
    formula = dict(rank(found, req, now=NOW, query_vector=None))
    assert dict(expanded)[old] == pytest.approx(
        (formula[old] + 0.25 * (Expansion().keyword - 0.25)) / Expansion().ceiling, abs=1e-12
    )


def test_a_turn_of_another_session_stored_in_between_is_not_a_neighbour(
    conn: apsw.Connection,
) -> None:
    turn(conn, "what did you paint last week", 0, "s1")
    turn(conn, "oh a lake at dawn", SECOND, "s2")
    turn(conn, "the weather was nice", 10 * SECOND, "s3")
    _, expanded = both(conn, "paint")
    assert expanded == ["what did you paint last week", "the weather was nice", "oh a lake at dawn"]


def test_memories_without_a_session_are_neighbours_only_within_an_hour(
    conn: apsw.Connection,
) -> None:
    turn(conn, "what did you paint last week", 0)
    turn(conn, "oh a lake at dawn", 2 * HOUR)
    turn(conn, "the weather was nice", 3 * HOUR)
    _, far = both(conn, "paint")
    assert far == ["what did you paint last week", "the weather was nice", "oh a lake at dawn"]
    turn(conn, "a heron on the shore", 10 * SECOND)  # stored later, said just after the hit
    _, near = both(conn, "paint")
    assert near[:2] == ["what did you paint last week", "a heron on the shore"]


def test_turns_count_in_time_order_when_stores_were_committed_out_of_order(
    conn: apsw.Connection,
) -> None:
    """Two turns (limit 2 either side) stored after three later turns of the same session are
    still the hit's neighbours; the later ones, three turns away in time, are not lifted."""
    turn(conn, "what did you paint last week", 0, "s1")
    for n in range(3):
        turn(conn, f"filler number {n}", (10 + n) * SECOND, "s1")
    turn(conn, "oh a lake at dawn", 2 * SECOND, "s1")
    turn(conn, "and some reeds", 3 * SECOND, "s1")
    _, expanded = both(conn, "paint")
    assert expanded[0] == "what did you paint last week"
    assert set(expanded[1:3]) == {"oh a lake at dawn", "and some reeds"}


def test_filters_hold_and_min_score_applies_to_the_expanded_score(conn: apsw.Connection) -> None:
    turn(conn, "what did you paint last week", 0, "s1")
    turn(conn, "oh a lake at dawn", SECOND, "s1")
    turn(conn, "the weather was nice", 10 * SECOND, "s2")
    _, only_s2 = both(conn, "paint", session_id="s2")
    assert only_s2 == ["the weather was nice"]
    req = RecallRequest(agent_id="a", query="paint")
    found = columns(conn, "a")
    expanded = expanded_rank(found, req, now=NOW, query_vector=None)
    floor = expanded[1][1]  # the lifted answer's score, above the formula's
    assert floor > dict(rank(found, req, now=NOW, query_vector=None))[expanded[1][0]]
    kept = expanded_rank(
        found, RecallRequest(agent_id="a", query="paint", min_score=floor), now=NOW,
        query_vector=None,
    )  # fmt: skip
    assert [memory_id for memory_id, _ in kept] == [memory_id for memory_id, _ in expanded[:2]]


def test_the_recall_setting_is_checked_at_start_naming_its_variable() -> None:
    assert load_config({}).recall == "expanded"
    assert load_config({"MEMORY_WORKER_RECALL": "formula"}).recall == "formula"
    with pytest.raises(ConfigError, match="MEMORY_WORKER_RECALL"):
        load_config({"MEMORY_WORKER_RECALL": "reranked"})
