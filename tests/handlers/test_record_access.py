"""Recall's access counts written in one statement: each memory's count grows by all of its
accesses in the list, its last access is the latest of them, and nothing else changes."""

from __future__ import annotations

import apsw

from handlers.recall.trigger import record_access
from tests.handlers.support import NOW, rows
from tests.handlers.support import insert_in_tenant as insert


def test_repeated_ids_add_every_access_and_keep_the_latest_time(conn: apsw.Connection) -> None:
    with conn:
        first, second, untouched = (insert(conn, "", "a", f"memory {n}") for n in range(3))
        other_agent = insert(conn, "", "b", "memory 0")
    accesses = [(first, 2, NOW + 5), (second, 1, NOW + 1), (first, 3, NOW + 9), (first, 1, NOW)]
    with conn:
        record_access(conn, "", "a", [*accesses, (other_agent, 1, NOW + 7)])
    found = {
        str(memory_id): (int(count), int(last))
        for memory_id, count, last in rows(
            conn, "SELECT id, access_count, last_accessed FROM memories"
        )
    }
    before = found[untouched][1]
    assert found[first] == (6, NOW + 9)
    assert found[second] == (1, max(before, NOW + 1))
    assert found[untouched] == (0, before)
    assert found[other_agent][0] == 0  # another agent's id in the list is left alone


def test_an_empty_list_changes_nothing(conn: apsw.Connection) -> None:
    with conn:
        memory = insert(conn, "", "a", "memory")
        record_access(conn, "", "a", [])
    assert rows(conn, "SELECT access_count FROM memories WHERE id = ?", memory) == [(0,)]
