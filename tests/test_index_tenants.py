"""Tenants in the recall index (contract section 15): agent `a` of tenant A and agent `a` of
tenant B are two agents. A recall in one never returns the other's memory, whether its index is
loaded or cold, and a write to one never reaches the other's loaded index.

Rows of a tenant are written with plain SQL: the store handler is not tenant-aware yet."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path

import apsw
import numpy as np

from schema.memory import RecallRequest
from tests.conftest import worker_config
from tests.handlers.support import insert_in_tenant as insert
from worker.app import App
from worker.db import migrate, open_db
from worker.readers import Readers
from worker.recall_index.agent_index import AgentKey
from worker.recall_index.changes import ChangeReader
from worker.recall_index.index import MemoryIndex
from worker.triggers import memory


def two_tenants(path: Path) -> tuple[apsw.Connection, dict[str, set[str]], ChangeReader]:
    """A writer (and its reader of the change log) on a file where tenants A and B each have
    an agent `a` with the same three contents; the ids of each tenant's memories."""
    conn = open_db(path)
    migrate(conn)
    changes = ChangeReader(conn)
    ids: dict[str, set[str]] = {"A": set(), "B": set()}
    with conn:
        for tenant in ids:
            ids[tenant] = {insert(conn, tenant, "a", f"shared note {n}") for n in range(3)}
    changes.take(conn)  # written before any index existed: nothing to apply
    return conn, ids, changes


def live_ids(index: MemoryIndex, key: AgentKey) -> set[str]:
    columns = index.snapshot(key).columns
    return {columns.ids[int(row)] for row in np.flatnonzero(columns.live[: columns.rows])}


def test_a_cold_load_reads_only_its_own_tenants_rows_of_the_agent(tmp_path: Path) -> None:
    conn, ids, _ = two_tenants(tmp_path / "memory.db")
    index = MemoryIndex(Readers(tmp_path / "memory.db"), max_bytes=10**9, clock=lambda: 3)
    assert live_ids(index, ("A", "a")) == ids["A"]
    assert live_ids(index, ("B", "a")) == ids["B"]
    assert live_ids(index, ("", "a")) == set()  # the default tenant's `a` has nothing
    assert index.loaded_agents() == 3 and index.loaded_agents("A") == 1
    conn.close()


def test_a_write_to_tenant_bs_agent_leaves_tenant_as_loaded_index_untouched(
    tmp_path: Path,
) -> None:
    """Insert, rescore and delete in B's `a` while both are loaded: B's index follows them,
    A's keeps its rows, scores and live flags exactly."""
    conn, ids, log = two_tenants(tmp_path / "memory.db")
    index = MemoryIndex(Readers(tmp_path / "memory.db"), max_bytes=10**9, clock=lambda: 3)
    before = index.snapshot(("A", "a")).columns
    rows, importance = before.rows, before.importance[: before.rows].copy()
    live_ids(index, ("B", "a"))
    gone, rescored = sorted(ids["B"])[:2]
    with conn:
        added = insert(conn, "B", "a", "only in B")
        conn.execute("UPDATE memories SET importance = 0.9 WHERE id = ?", (rescored,))
        conn.execute("DELETE FROM memories WHERE id = ?", (gone,))
    changes = log.take(conn)
    assert {key for key, _, _ in changes} == {("B", "a")}
    index.apply(conn, changes)
    after = index.snapshot(("A", "a")).columns
    assert after.rows == rows and live_ids(index, ("A", "a")) == ids["A"]
    assert np.array_equal(after.importance[:rows], importance)
    assert live_ids(index, ("B", "a")) == ids["B"] - {gone} | {added}
    b = index.snapshot(("B", "a")).columns
    assert b.importance[b.ids.index(rescored)] == 0.9
    conn.close()


def test_a_memory_moved_to_another_tenant_leaves_the_old_index_and_joins_the_new(
    tmp_path: Path,
) -> None:
    conn, ids, log = two_tenants(tmp_path / "memory.db")
    index = MemoryIndex(Readers(tmp_path / "memory.db"), max_bytes=10**9, clock=lambda: 3)
    live_ids(index, ("A", "a"))
    live_ids(index, ("B", "a"))
    moved = sorted(ids["A"])[0]
    with conn:
        conn.execute("UPDATE memories SET tenant = 'B' WHERE id = ?", (moved,))
    index.apply(conn, log.take(conn))
    assert live_ids(index, ("A", "a")) == ids["A"] - {moved}
    assert live_ids(index, ("B", "a")) == ids["B"] | {moved}
    conn.close()


def test_an_index_told_of_another_tenants_memory_does_not_take_it(tmp_path: Path) -> None:
    """The replay reads a changed row by id: it keeps it only if the row is this tenant's
    agent's, whatever change was logged for it."""
    conn, ids, _ = two_tenants(tmp_path / "memory.db")
    index = MemoryIndex(Readers(tmp_path / "memory.db"), max_bytes=10**9, clock=lambda: 3)
    live_ids(index, ("A", "a"))
    index.apply(conn, [(("A", "a"), memory_id, "upsert") for memory_id in ids["B"]])
    assert live_ids(index, ("A", "a")) == ids["A"]
    conn.close()


async def test_recall_in_one_tenant_never_returns_or_counts_the_others_memory(
    nats_url: str, tmp_path: Path
) -> None:
    """The whole recall flow, cold and then loaded, for `a` in tenants A and B with the same
    contents: each reply holds only its tenant's memories, and only their accesses are
    persisted."""

    def three(conn: apsw.Connection, tenant: str) -> set[str]:
        return {insert(conn, tenant, "a", f"shared note {n}") for n in range(3)}

    app = App(worker_config(nats_url, tmp_path / "memory.db"))
    await app.start()
    try:
        s = app.services
        assert s is not None
        ids = {tenant: await s.writer.run(partial(three, tenant=tenant)) for tenant in "AB"}
        for loaded in (False, True):
            if not loaded:
                s.index.forget_all()
            for tenant in ("A", "B"):
                req = RecallRequest(agent_id="a", query="shared note", limit=10, tenant=tenant)
                reply = await memory.recall(s, req)
                assert {memory.id for memory in reply.memories} == ids[tenant], (loaded, tenant)
            assert s.index.loaded_agents() == 2
        await asyncio.gather(*s.background)
        counts = dict(
            await s.readers.run(
                lambda conn: list(conn.execute("SELECT id, access_count FROM memories"))
            )
        )
        assert counts == dict.fromkeys(ids["A"] | ids["B"], 2)
        reply = await memory.recall(s, RecallRequest(agent_id="a", query="shared note"))
        assert reply.memories == []  # the default tenant's `a` is a third agent, with nothing
    finally:
        await app.stop()
