"""Recall's and the backfill's SQL under tenants (contract section 15): each names the tenant
and the agent, so that agent `a` of tenant A is never read, counted or embedded on behalf of
agent `a` of tenant B, even when handed one of A's memory ids."""

from __future__ import annotations

import apsw
import numpy as np

from handlers.backfill import missing_vector_agents, set_embeddings, vectorless
from handlers.recall.trigger import recalled_memories, record_access
from tests.handlers.support import NOW, rows
from tests.handlers.support import insert_in_tenant as insert


def one_each(conn: apsw.Connection) -> dict[str, str]:
    """Agent `a` of tenants A and B with one memory each, of the same content; their ids."""
    with conn:
        ids = {tenant: insert(conn, tenant, "a", "the same words") for tenant in ("A", "B")}
    return ids


def test_recalls_access_count_touches_only_its_tenants_rows(conn: apsw.Connection) -> None:
    ids = one_each(conn)
    with conn:
        record_access(conn, "B", "a", [(ids["A"], 1, NOW), (ids["B"], 1, NOW)])
    counts = dict(rows(conn, "SELECT tenant, access_count FROM memories"))
    assert counts == {"A": 0, "B": 1}


def test_recalls_reply_rows_leave_out_another_tenants_memory(conn: apsw.Connection) -> None:
    ids = one_each(conn)
    ranked = [(ids["A"], 0.9), (ids["B"], 0.8)]
    counts = {ids["A"]: 1, ids["B"]: 1}
    reply = recalled_memories(conn, "B", "a", ranked, counts, now=NOW)
    assert [memory.id for memory in reply.memories] == [ids["B"]]


def test_backfill_finds_agents_per_tenant_and_embeds_only_the_named_tenants_rows(
    conn: apsw.Connection,
) -> None:
    ids = one_each(conn)
    assert sorted(missing_vector_agents(conn)) == [("A", "a"), ("B", "a")]
    assert vectorless(conn, "B", "a", 10) == [(ids["B"], "the same words")]
    vector = np.ones(4, dtype=np.float32)
    with conn:
        set_embeddings(conn, "B", "a", "test-model", [(ids["A"], vector), (ids["B"], vector)])
    models = dict(rows(conn, "SELECT tenant, embedding_model FROM memories"))
    assert models == {"A": None, "B": "test-model"}
    assert missing_vector_agents(conn) == [("A", "a")]
