"""A batch of stores decided and applied together (worker/writes.py `decide_and_apply_all`,
worker/triggers/storing.py `apply_stores`, handlers/store.py `place_memories`) leaves the same
rows, audit and replies as the same stores one after the other: duplicates of stored content and
of a batch-mate's, forgotten content restored once, a switched-off agent, a store that states a
fact, metadata, a vector."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import msgspec
import numpy as np
import pytest

from handlers.audit import Call
from handlers.facts.extract import extract_statements
from handlers.sanitize import Sanitized
from schema.memory import StoreRequest
from worker.db import migrate, open_db
from worker.triggers import storing
from worker.triggers.preparing import Prepared
from worker.triggers.storing import STORE
from worker.writes import Pending, decide_and_apply, decide_and_apply_all

NOW = 1_700_000_000_000
CALL = Call("memory::store", "bus", "acct/user")
# Every table a store may write, read in full (memory_changes without its order: a batch writes
# its restores before its new memories).
TABLES = ("memories", "audit", "facts")


def request(agent: str, content: str, **fields: Any) -> StoreRequest:
    return StoreRequest(agent_id=agent, content=content, **fields)


REQUESTS = [
    request("a1", "a new memory"),
    request("a1", "known already"),
    request("a1", "a new memory", role="assistant"),  # a batch-mate's content
    request("a1", "forgotten once"),  # restored
    request("a1", "forgotten once"),  # restored by the one before: a duplicate
    request("off", "a new memory"),  # switched off: nothing written
    request("a2", "a new memory", importance=0.9, timestamp=NOW - 5),  # another agent's
    request("a1", "I live in Lisbon and my name is Ada"),  # states facts: applied on its own
    request("a1", "with its details", metadata={"n": 2**70, "s": "x"}, summary="s", tags=["t"]),
    request("a2", "with a vector"),
]


Restart = Callable[[int], None]


@pytest.fixture
def ids(monkeypatch: pytest.MonkeyPatch) -> Restart:
    """New memory ids from a counter (restarted at a number by the returned function), so that
    both ways choose the same ids."""
    counter = itertools.count()

    def next_id(now: int) -> str:
        return f"00000000-0000-7000-8000-{next(counter):012d}"

    def next_uuid4() -> uuid.UUID:  # a stated fact's id
        return uuid.UUID(int=next(counter), version=4)

    def restart(start: int) -> None:
        nonlocal counter
        counter = itertools.count(start)

    monkeypatch.setattr(uuid, "uuid4", next_uuid4)

    monkeypatch.setattr(storing, "new_memory_id", next_id)
    return restart


def prepared(req: StoreRequest) -> Prepared:
    vector = None
    if req.content == "with a vector":
        vector = ("test-model", np.arange(8, dtype=np.float32) / np.float32(8))
    found = Sanitized(req.content, {}, [], ())
    return Prepared(req, found, vector, tuple(extract_statements(req.content)))


def database(path: Path, ids: Restart) -> Iterator[apsw.Connection]:
    ids(1000)
    conn = open_db(path, synchronous="normal")
    migrate(conn)
    with conn:
        conn.execute(
            "INSERT INTO agent_switch (tenant, agent_id, disabled_at) VALUES ('', 'off', 1)"
        )
        for content in ("known already", "forgotten once"):
            decide_and_apply(
                conn,
                "memory::store",
                STORE,
                request("a1", content),
                now=NOW - 100,
                prepared=prepared(request("a1", content)),
                call=None,
            )
        conn.execute("UPDATE memories SET forgotten_at = 1 WHERE content = 'forgotten once'")
    yield conn
    conn.close()


@pytest.fixture
def one_by_one(tmp_path: Path, ids: Restart) -> Iterator[apsw.Connection]:
    yield from database(tmp_path / "one.db", ids)


@pytest.fixture
def together(tmp_path: Path, ids: Restart) -> Iterator[apsw.Connection]:
    yield from database(tmp_path / "together.db", ids)


def contents(conn: apsw.Connection) -> dict[str, Any]:
    found: dict[str, Any] = {
        table: [tuple(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
        for table in TABLES
    }
    found["agent_switch"] = sorted(tuple(row) for row in conn.execute("SELECT * FROM agent_switch"))
    changes = conn.execute("SELECT tenant, agent_id, memory_id, readd FROM memory_changes")
    found["memory_changes"] = sorted(tuple(row) for row in changes)
    return found


def test_a_batch_of_stores_applied_together_writes_what_they_write_one_after_the_other(
    ids: Restart, one_by_one: apsw.Connection, together: apsw.Connection
) -> None:
    ids(0)
    with one_by_one:
        alone = [
            decide_and_apply(
                one_by_one, "memory::store", STORE, req, now=NOW, prepared=prepared(req), call=CALL
            )
            for req in REQUESTS
        ]
    ids(0)
    pending = [
        Pending("memory::store", STORE, req, prepared(req), CALL, lambda: NOW) for req in REQUESTS
    ]
    with together:
        joined = decide_and_apply_all(together, pending)
    assert [each.reply for each in joined] == [each.reply for each in alone]
    replies = [each.reply for each in joined]
    assert [(r.stored, r.deduplicated) for r in replies[:5]] == [
        (True, False),
        (False, True),
        (False, True),
        (False, True),
        (False, True),
    ]
    assert replies[0].id == replies[2].id and replies[3].id == replies[4].id
    assert replies[5].id is None and replies[5].disabled  # the switched-off agent's
    assert replies[7].facts, "the store that states facts asserted them"
    assert contents(together) == contents(one_by_one)
    triggers = [row[0] for row in together.execute("SELECT trigger FROM audit ORDER BY seq")]
    assert triggers.count("memory::unforget") == 1  # the restore, once


def test_apply_stores_places_a_run_of_plain_stores_by_three_statements(
    ids: Restart, together: apsw.Connection
) -> None:
    """Plain stores (no session, no facts) are placed by one look-up, one UPDATE (the restore)
    and one INSERT statement, stepped once per new memory, whatever their number; each agent's
    switch is read once."""
    plain = [req for req in REQUESTS if not extract_statements(req.content)]
    decisions = [storing.decide_store(together, req, NOW, prepared(req)) for req in plain]
    statements: list[str] = []

    def trace(cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
        words = sql.split()
        statements.append(" ".join(words[:3]))
        return True

    together.execute("BEGIN")
    together.exec_trace = trace
    storing.apply_stores(together, decisions)
    together.exec_trace = None
    together.execute("COMMIT")
    assert len(plain) == 9  # 4 new memories, 4 duplicates or restores, 1 switched off
    assert statements == [
        *["SELECT 1 FROM"] * 3,  # a1, off, a2
        "SELECT m.tenant, m.agent_id,",
        "UPDATE memories SET",
        *["INSERT INTO memories"] * 4,  # the new memories, one INSERT stepped for each
    ]


def test_stored_metadata_keeps_integers_past_64_bits(
    ids: Restart, together: apsw.Connection
) -> None:
    req = request("a1", "big numbers", metadata={"n": 2**70})
    with together:
        decide_and_apply_all(
            together, [Pending("memory::store", STORE, req, prepared(req), CALL, lambda: NOW)]
        )
    [(metadata,)] = together.execute("SELECT metadata FROM memories WHERE content = 'big numbers'")
    assert msgspec.json.decode(metadata) == {"n": 2**70}
