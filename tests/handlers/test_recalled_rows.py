"""Recall's read of the winners' rows by the rowids an earlier recall saw: a rowid is only a
hint (a delete, an import or a VACUUM can give it to another row), so a row counts only when
its id, tenant and agent are the ones asked for; the rest are read by id."""

from __future__ import annotations

from typing import Any

import apsw

from handlers.recall.trigger import ROWID, recalled_rows
from tests.handlers.support import NOW
from tests.handlers.support import insert_in_tenant as insert


def statements(conn: apsw.Connection) -> list[str]:
    """The SQL the connection runs from now on."""
    seen: list[str] = []

    def trace(_cursor: Any, sql: str, _bindings: Any) -> bool:
        seen.append(sql)
        return True

    conn.exec_trace = trace
    return seen


def test_right_rowids_read_every_row_by_rowid_alone(conn: apsw.Connection) -> None:
    with conn:
        ids = [insert(conn, "", "a", f"memory {n}") for n in range(3)]
    first = recalled_rows(conn, "", "a", ids)
    rowids = {memory_id: row[ROWID] for memory_id, row in first.items()}
    seen = statements(conn)
    again = recalled_rows(conn, "", "a", ids, rowids)
    assert again == first
    assert len(seen) == 1 and "rowid IN" in seen[0]


def test_a_rowid_now_another_rows_finds_the_memory_by_id(conn: apsw.Connection) -> None:
    with conn:
        kept, other = insert(conn, "", "a", "kept"), insert(conn, "", "a", "other")
        elsewhere = insert(conn, "B", "a", "another tenant's")
    rows = recalled_rows(conn, "", "a", [kept, other, elsewhere])
    assert set(rows) == {kept, other}
    wrong = {kept: rows[other][ROWID]}  # as if `other` had taken kept's old rowid
    found = recalled_rows(conn, "", "a", [kept], wrong)
    assert list(found) == [kept] and found[kept][2] == "kept"
    tenants = recalled_rows(conn, "B", "a", [elsewhere], {elsewhere: rows[kept][ROWID]})
    assert list(tenants) == [elsewhere] and tenants[elsewhere][2] == "another tenant's"
    assert recalled_rows(conn, "", "a", [elsewhere], {elsewhere: rows[kept][ROWID]}) == {}


def test_a_forgotten_memory_is_not_read_by_its_rowid(conn: apsw.Connection) -> None:
    with conn:
        memory = insert(conn, "", "a", "to forget")
    rowids = {memory: recalled_rows(conn, "", "a", [memory])[memory][ROWID]}
    with conn:
        conn.execute("UPDATE memories SET forgotten_at = ? WHERE id = ?", (NOW, memory))
    assert recalled_rows(conn, "", "a", [memory], rowids) == {}
