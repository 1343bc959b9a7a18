"""Reads of an agent's rows by a list of their ids, as SQLite plans them: each id looked up in
its index, never a walk over the agent's memories. The statements are those the real handlers
execute (captured by apsw's exec_trace), each explained with the values it was bound to.

Without statistics (the worker never runs ANALYZE) SQLite cannot see how few ids a
`json_each(?)` holds, and preferred the agent's prefix of memories_by_agent (tenant, agent_id,
timestamp, id) to the id's own index: one memory::get of one id read all 20 000 memories of an
agent: 1.1 ms of SQLite where the id's index takes 9 µs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw
import pytest

from handlers.kg import kg_add, kg_query
from handlers.life import apply_marks, get_memories, plan_delete, plan_forget
from handlers.session import plan_compaction
from handlers.session_repair import repair
from schema.kg import Entity, KgAddRequest, KgQueryRequest, Relation
from schema.life import DeleteRequest, ForgetRequest, GetRequest, UnforgetRequest
from schema.session import CompactRequest, RepairRequest
from tests.handlers.support import NOW, insert_in_tenant, store

Seeded = dict[str, str]

# How a row is found when its key is known: a memory by its id's index (or, storing, by its
# agent's content hash), a graph's rows by all three columns of their agent's key.
KEY_LOOKUPS = (
    "USING INDEX sqlite_autoindex_memories_1 (id=?)",
    "USING COVERING INDEX sqlite_autoindex_memories_1 (id=?)",
    "(tenant=? AND agent_id=? AND hash=?)",
    "(tenant=? AND agent_id=? AND id=?)",
    "(tenant=? AND agent_id=? AND source=?)",
)


def seed(conn: apsw.Connection) -> Seeded:
    """A session of six messages of agent a, a memory of another tenant's agent a, and a small
    graph; the ids by name."""
    ids = {
        f"m{index}": store(
            conn,
            "a",
            f"message {index}",
            session_id="s",
            role="user" if index % 2 == 0 else "assistant",
            timestamp=1_000 + index,
        ).id
        for index in range(6)
    }
    with conn:
        ids["stranger"] = insert_in_tenant(conn, "other", "a", "not a's")
        for entity, targets in {"alice": ["bob", "carol"], "bob": ["carol"]}.items():
            relations = [Relation(target=target, type="knows") for target in targets]
            request = KgAddRequest(agent_id="a", entity=Entity(id=entity, relations=relations))
            kg_add(conn, request, now=NOW)
    return ids


def get(conn: apsw.Connection, ids: Seeded) -> None:
    reply = get_memories(conn, GetRequest(agent_id="a", ids=[ids["m1"], ids["stranger"]]), now=0)
    assert [memory.id for memory in reply.memories] == [ids["m1"]]
    assert reply.missing == [ids["stranger"]]  # another tenant's memory is never read


def forget_then_unforget(conn: apsw.Connection, ids: Seeded) -> None:
    with conn:
        plan = plan_forget(conn, ForgetRequest(agent_id="a", ids=[ids["m2"]]), now=NOW, forget=True)
        apply_marks(conn, plan, forget=True)
    back = plan_forget(conn, UnforgetRequest(agent_id="a", ids=[ids["m2"]]), now=NOW, forget=False)
    assert back.changed == [ids["m2"]]


def delete(conn: apsw.Connection, ids: Seeded) -> None:
    plan = plan_delete(conn, DeleteRequest(agent_id="a", ids=[ids["m3"], ids["stranger"]]))
    assert (plan.ids, plan.missing) == ([ids["m3"]], [ids["stranger"]])


def repair_session(conn: apsw.Connection, ids: Seeded) -> None:
    with conn:
        reply = repair(conn, RepairRequest(agent_id="a", session_id="s"), now=NOW + 1)
    assert reply.total_fixes == 0


def plan_compacting(conn: apsw.Connection, ids: Seeded) -> None:
    request = CompactRequest(agent_id="a", session_id="s", threshold=4, keep_recent=2)
    plan_compaction(conn, request)


def query_graph(conn: apsw.Connection, ids: Seeded) -> None:
    reply = kg_query(conn, KgQueryRequest(agent_id="a", entity_id="alice"), now=0)
    assert [entity.id for entity in reply.entities] == ["alice", "bob", "carol"]


def store_forgotten_again(conn: apsw.Connection, ids: Seeded) -> None:
    with conn:
        plan = plan_forget(conn, ForgetRequest(agent_id="a", ids=[ids["m4"]]), now=NOW, forget=True)
        apply_marks(conn, plan, forget=True)
    assert store(conn, "a", "message 4", session_id="s", role="user").id == ids["m4"]


def traced(conn: apsw.Connection, call: Callable[[], None]) -> list[tuple[str, Any]]:
    """The statements `call` executes on conn, with their bindings."""
    seen: list[tuple[str, Any]] = []

    def trace(_cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
        seen.append((sql, bindings))
        return True

    conn.exec_trace = trace
    try:
        call()
    finally:
        conn.exec_trace = None
    return seen


def plan_of(conn: apsw.Connection, sql: str, bindings: Any) -> list[str]:
    return [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, bindings)]


def walks(step: str) -> bool:
    """A step that reads a table's rows one after the other (a json_each list's are not rows),
    or an agent's memories by their (tenant, agent_id) prefix alone."""
    if step.startswith("SCAN "):
        return "VIRTUAL TABLE" not in step and "SUBQUERY" not in step
    return step.endswith("memories_by_agent (tenant=? AND agent_id=?)")


def by_ids(sql: str) -> bool:
    return "json_each(?)" in sql or " IN (?" in sql


@pytest.mark.parametrize(
    "call",
    [
        get,
        forget_then_unforget,
        delete,
        repair_session,
        plan_compacting,
        query_graph,
        store_forgotten_again,
    ],
)
def test_a_read_of_memories_by_their_ids_looks_each_id_up_in_its_index_never_walking_the_agent(
    conn: apsw.Connection, call: Callable[[apsw.Connection, Seeded], None]
) -> None:
    """Every statement the handler runs that names ids (a `json_each(?)` or an `IN` list)
    searches its table by the id's index; and no statement it runs scans a table or searches
    the agent's memories by their (tenant, agent_id) prefix alone."""
    ids = seed(conn)
    statements = traced(conn, lambda: call(conn, ids))
    looked_up = 0
    for sql, bindings in statements:
        plan = plan_of(conn, sql, bindings)
        assert not [step for step in plan if walks(step)], (sql, plan)
        if by_ids(sql):
            looked_up += 1
            searches = [step for step in plan if step.startswith("SEARCH ")]
            assert searches, (sql, plan)
            assert all(step.endswith(KEY_LOOKUPS) for step in searches), (sql, plan)
    assert looked_up, [sql for sql, _ in statements]
