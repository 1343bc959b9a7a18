"""memory::stats' database counts, and recall's ranking pieces with a fixed now: the contract's
score, ordering and filters over an agent's columns as the in-memory index builds them."""

from __future__ import annotations

import apsw
import pytest

from handlers.recall.columns import Columns
from handlers.recall.rank import rank
from handlers.stats import database_counts
from schema.memory import RecallRequest
from tests.handlers.support import NOW, WEEK, store
from worker.recall_index.agent_index import ROW_SQL, AgentIndex


def test_database_counts_count_agents_memories_vectors_graph_and_sessions(
    conn: apsw.Connection,
) -> None:
    for index in range(7):
        store(conn, "a" if index < 5 else "b", f"note {index}", session_id=f"s{index % 2}")
    with conn:
        conn.execute("INSERT INTO kg_entities (agent_id, id) VALUES ('a', 'e1'), ('a', 'e2')")
        conn.execute("INSERT INTO kg_relations (agent_id, source, type, target) "
                     "VALUES ('a', 'e1', 'knows', 'e2')")  # fmt: skip
        conn.execute("UPDATE memories SET pinned = 1 WHERE content = 'note 0'")
        conn.execute("UPDATE memories SET forgotten_at = 1 WHERE content IN ('note 1', 'note 2')")
        conn.execute("INSERT INTO agent_switch (agent_id, disabled_at) VALUES ('b', 1)")
    counts = database_counts(conn)
    assert counts.pop("database_bytes") > 0
    assert counts == {
        "agents": 2, "memories": 7, "memories_without_vector": 7, "memories_pinned": 1,
        "memories_forgotten": 2, "agents_disabled": 1, "entities": 2, "relations": 1,
        "sessions": 4, "audit_events": 0, "facts_current": 0, "facts_past": 0,
        "facts_retracted": 0,
        "topics": 0,
    }  # fmt: skip


def columns(conn: apsw.Connection, agent: str) -> Columns:
    index = AgentIndex(anchor_ms=NOW)
    index.load(conn.execute(ROW_SQL + " WHERE agent_id = ? ORDER BY rowid", (agent,)))
    return index.columns()


def ranked(
    conn: apsw.Connection, agent: str, query: str = "", **fields: object
) -> dict[str, float]:
    req = RecallRequest(agent_id=agent, query=query, **fields)  # type: ignore[arg-type]
    return dict(rank(columns(conn, agent), req, now=NOW, query_vector=None))


def test_score_is_the_contracts_formula_at_a_fixed_now(conn: apsw.Connection) -> None:
    """0.25 * keyword share + 0.10 * 0.5 ** (age / week) + 0.10 * importance + 0.05 * confidence,
    a future timestamp counting as now."""
    week_old = store(conn, "a", "The cat sat on the mat", importance=0.4, timestamp=NOW - WEEK)
    future = store(conn, "a", "from the future", importance=0.5, timestamp=NOW + WEEK)
    scores = ranked(conn, "a", "cat dog")
    assert scores[week_old.id] == pytest.approx(0.25 * 0.5 + 0.10 * 0.5 + 0.04 + 0.05, abs=1e-12)
    assert scores[future.id] == pytest.approx(0.10 + 0.05 + 0.05, abs=1e-12)


def test_ranking_is_by_score_then_newer_then_id_and_honours_roles_and_session(
    conn: apsw.Connection,
) -> None:
    made = [
        store(conn, "a", f"tie {n}", importance=0.5, timestamp=NOW - 5_000 + n % 2).id
        for n in range(6)
    ]
    order = list(ranked(conn, "a", limit=6))
    newer = sorted(made[1::2])
    older = sorted(made[0::2])
    assert order == newer + older
    store(conn, "a", "said by the assistant", role="assistant", session_id="s")
    assert len(ranked(conn, "a", roles=["assistant"])) == 1
    assert len(ranked(conn, "a", session_id="s")) == 1
    assert ranked(conn, "a", session_id="none") == {}
