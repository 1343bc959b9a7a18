"""The in-memory recall index: bounded memory, least recently used agents leave and reload."""

from __future__ import annotations

from pathlib import Path

from handlers.store import insert_memory
from worker.db import migrate, open_db
from worker.index import MemoryIndex


def test_least_recently_used_agents_leave_when_over_budget_and_reload_on_demand(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    conn = open_db(path)
    migrate(conn)
    with conn:
        for agent in ("a", "b", "c"):
            for number in range(300):
                insert_memory(
                    conn, agent_id=agent, content=f"{agent} note {number}", role="user",
                    now=1, timestamp=1, importance=0.5,
                )  # fmt: skip
    index = MemoryIndex(lambda: open_db(path), max_bytes=1, clock=lambda: 1)
    with index.lock:
        first = index.agent("a")
        assert index.loaded_agents() == 1
        index.agent("b")
        assert index.loaded_agents() == 1  # "a" left to make room
        again = index.agent("a")
    assert again is not first and again.columns().rows == 300
    roomy = MemoryIndex(lambda: open_db(path), max_bytes=10**9, clock=lambda: 1)
    with roomy.lock:
        for agent in ("a", "b", "c"):
            roomy.agent(agent)
        assert roomy.loaded_agents() == 3
    conn.close()
