"""The same agentId in two tenants is two agents, in every handler that reads or writes it."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from handlers.consolidate import consolidate
from handlers.evict import evict
from handlers.kg import kg_add, kg_query
from handlers.session import session_list
from handlers.session_repair import repair
from handlers.stats import database_counts, memories_by_tenant
from schema.errors import NotFound
from schema.kg import Entity, KgAddRequest, KgQueryRequest, Relation
from schema.memory import ConsolidateRequest, EvictRequest
from schema.session import RepairRequest, SessionListRequest
from tests.handlers.support import NOW, WEEK, rows, store
from worker.db import migrate, open_db


def test_the_same_content_for_the_same_agent_id_in_two_tenants_is_two_memories(
    conn: apsw.Connection,
) -> None:
    first = store(conn, "a1", "the deploy key rotates monthly", tenant="TEAM_A")
    second = store(conn, "a1", "the deploy key rotates monthly", tenant="TEAM_B")
    again = store(conn, "a1", "the deploy key rotates monthly", tenant="TEAM_A")
    assert first.stored and second.stored and first.id != second.id
    assert again.deduplicated and again.id == first.id
    assert rows(conn, "SELECT tenant FROM memories ORDER BY tenant") == [("TEAM_A",), ("TEAM_B",)]


def test_sessions_of_one_tenant_are_not_listed_or_repaired_for_another(
    conn: apsw.Connection,
) -> None:
    store(conn, "a1", "hello", tenant="TEAM_A", session_id="s1")
    store(conn, "a1", "hello again", tenant="TEAM_A", session_id="s1")
    mine = session_list(conn, SessionListRequest(agent_id="a1", tenant="TEAM_A"), now=NOW)
    theirs = session_list(conn, SessionListRequest(agent_id="a1", tenant="TEAM_B"), now=NOW)
    assert [s.message_count for s in mine.sessions] == [2]
    assert theirs.sessions == []
    with pytest.raises(NotFound):
        repair(conn, RepairRequest(agent_id="a1", session_id="s1", tenant="TEAM_B"), now=NOW)


def test_a_knowledge_graph_is_per_tenant(conn: apsw.Connection) -> None:
    entity = Entity(id="alice", type="person", relations=[Relation(target="acme", type="works")])
    with conn:
        kg_add(conn, KgAddRequest(agent_id="a1", entity=entity, tenant="TEAM_A"), now=NOW)
    found = kg_query(conn, KgQueryRequest(agent_id="a1", entity_id="alice", tenant="TEAM_A"), now=0)
    other = kg_query(conn, KgQueryRequest(agent_id="a1", entity_id="alice", tenant="TEAM_B"), now=0)
    assert [e.id for e in found.entities] == ["alice", "acme"]
    assert other.entities == []


def test_eviction_in_one_tenant_leaves_another_tenant_alone(conn: apsw.Connection) -> None:
    for tenant in ("TEAM_A", "TEAM_B"):
        store(conn, "a1", "one", tenant=tenant)
        store(conn, "a1", "two", tenant=tenant)
    with conn:
        reply = evict(conn, EvictRequest(cap=0, tenant="TEAM_B"), now=NOW)
    assert reply.over_cap == 2
    assert rows(conn, "SELECT DISTINCT tenant FROM memories") == [("TEAM_A",)]
    with conn:
        everything = evict(conn, EvictRequest(cap=1), now=NOW)  # no tenant: all of them
    assert everything.over_cap == 1


def test_the_cap_counts_each_tenants_agent_apart(conn: apsw.Connection) -> None:
    for tenant in ("TEAM_A", "TEAM_B"):
        store(conn, "a1", "one", tenant=tenant)
    with conn:
        reply = evict(conn, EvictRequest(cap=1), now=NOW)
    assert reply.evicted == 0


def test_decay_in_one_tenant_leaves_another_tenant_alone(conn: apsw.Connection) -> None:
    for tenant in ("TEAM_A", "TEAM_B"):
        store(conn, "a1", "old news", tenant=tenant, timestamp=NOW - 2 * WEEK)
    with conn:
        reply = consolidate(conn, ConsolidateRequest(tenant="TEAM_A"), now=NOW)
    assert reply.memories_decayed == 1
    assert rows(conn, "SELECT tenant, confidence < 1 FROM memories ORDER BY tenant") == [
        ("TEAM_A", 1),
        ("TEAM_B", 0),
    ]


def test_counts_are_of_one_tenant_or_of_all(conn: apsw.Connection) -> None:
    store(conn, "a1", "x", tenant="TEAM_A", session_id="s")
    store(conn, "a1", "y", tenant="TEAM_B")
    store(conn, "a2", "z", tenant="TEAM_B")
    assert database_counts(conn, "TEAM_A") | {"database_bytes": 0} == {
        "agents": 1,
        "memories": 1,
        "memories_without_vector": 1,
        "memories_pinned": 0,
        "memories_forgotten": 0,
        "agents_disabled": 0,
        "entities": 0,
        "relations": 0,
        "sessions": 1,
        "audit_events": 0,
        "facts_current": 0,
        "facts_past": 0,
        "facts_retracted": 0,
        "topics": 0,
        "database_bytes": 0,
    }
    assert database_counts(conn)["agents"] == 3
    assert memories_by_tenant(conn) == {"TEAM_A": 1, "TEAM_B": 2}


def test_data_written_before_tenants_becomes_the_default_tenant(tmp_path: Path) -> None:
    """Migration 0002 keeps every row of a version-1 file, in the default tenant ''."""
    path = tmp_path / "old.db"
    conn = open_db(path, synchronous="normal")
    with conn:
        conn.execute((Path(__file__).parents[2] / "schema/migrations/0001_initial.sql").read_text())
        conn.pragma("user_version", 1)
        conn.execute(
            "INSERT INTO memories (id, agent_id, role, content, hash, importance, confidence, "
            "last_accessed, timestamp, created_at) VALUES ('m1', 'a1', 'user', 'x', 'h', 0.5, 1, "
            "0, 0, 0)"
        )
        conn.execute("INSERT INTO sessions VALUES ('a1', 's1', 0, 0, NULL, NULL)")
        conn.execute("INSERT INTO session_messages VALUES ('a1', 's1', 1, 'm1', 'user', 0)")
        conn.execute("INSERT INTO kg_entities VALUES ('a1', 'e1', NULL, '{}')")
        conn.execute("INSERT INTO kg_relations VALUES (1, 'a1', 'e1', 'r', 'e1')")
    migrate(conn)
    for table in ("memories", "sessions", "session_messages", "kg_entities", "kg_relations"):
        assert rows(conn, f"SELECT tenant, agent_id FROM {table}") == [("", "a1")], table
    assert rows(conn, "PRAGMA foreign_key_check") == []
    listed = session_list(conn, SessionListRequest(agent_id="a1"), now=0).sessions
    assert [(s.id, s.message_count) for s in listed] == [("s1", 1)]
    conn.close()
