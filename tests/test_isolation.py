"""Isolation between agents, as a property: random sequences of store, recall, evict and
consolidate for two agents with overlapping contents and session ids.

After every step: no reply to one agent carries another agent's memory, recall returns exactly
the agent's own best `limit` memories, and an operation scoped to one agent leaves every other
agent's rows (memories, sessions, session_messages, read from the file) exactly as they were.
The agent pairs are chosen to catch ids compared loosely: case, inner spaces, LIKE wildcards,
zero-width joiners, and two Unicode spellings of the same letter (ids with control characters or
outer whitespace are refused, tests/test_errors.py). Contract sections 2-5.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import worker_config
from tests.support import Client
from worker.app import App

DAY_MS = 86_400_000
AGENT_PAIRS = [
    ("agent-a", "agent-b"),
    ("a", "A"),
    ("a b", "a  b"),
    ("a%", "ab"),
    ("a_", "ab"),
    ("x", "x\u200d"),
    ("\u00e9", "e\u0301"),
    ("bot", "b\u200cot"),
]
CONTENTS = [
    "the deploy key rotates on fridays",
    "deploy failed with a cache error",
    "```fix the critical bug```",
    "shared words",
    "Shared words",
    "x",
]
SESSIONS = ["s1", "s2", "S1", "s 1"]
QUERIES = ["", "deploy", "cache error", "shared", "bug fix", "zzz nothing"]
ROLES = ["user", "assistant", "system"]
Rows = dict[str, list[tuple[Any, ...]]]
EXAMPLES = itertools.count()


@pytest.fixture
async def worker(nats_url: str, tmp_path: Path) -> AsyncIterator[App]:
    """The worker with its built-in embedder, so that recall's vector path is isolated too."""
    app = App(worker_config(nats_url, tmp_path / "memory.db", embedder="builtin"))
    await app.start()
    yield app
    await app.stop()


# --- steps -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Store:
    who: int
    content: str
    session: str | None
    role: str
    old: bool
    importance: float | None

    def request(self, agent: str) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"agentId": agent, "content": self.content, "role": self.role}
        if self.session is not None:
            body["sessionId"] = self.session
        if self.old:  # 40 days old, so that evict and consolidate have something to do
            body["timestamp"] = int(time.time() * 1000) - 40 * DAY_MS
        if self.importance is not None:
            body["importance"] = self.importance
        return "memory::store", body


@dataclass(frozen=True)
class Recall:
    who: int
    query: str
    limit: int
    session: str | None
    roles: list[str] | None

    def request(self, agent: str) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"agentId": agent, "query": self.query, "limit": self.limit}
        if self.session is not None:
            body["sessionId"] = self.session
        if self.roles is not None:
            body["roles"] = self.roles
        return "memory::recall", body


@dataclass(frozen=True)
class Evict:
    who: int
    cap: int
    max_age: int
    min_importance: float
    min_confidence: float
    dry_run: bool
    scoped: bool  # False: all agents, and then only as a dry run

    def request(self, agent: str) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "cap": self.cap,
            "maxAge": self.max_age,
            "minImportance": self.min_importance,
            "minConfidence": self.min_confidence,
            "dryRun": self.dry_run or not self.scoped,
        }
        if self.scoped:
            body["agentId"] = agent
        return "memory::evict", body


@dataclass(frozen=True)
class Consolidate:
    who: int
    decay_rate: float

    def request(self, agent: str) -> tuple[str, dict[str, Any]]:
        return "memory::consolidate", {"agentId": agent, "decayRate": self.decay_rate}


Step = Store | Recall | Evict | Consolidate
WHO = st.integers(0, 1)
STORES = st.builds(
    Store,
    who=WHO,
    content=st.sampled_from(CONTENTS),
    session=st.none() | st.sampled_from(SESSIONS),
    role=st.sampled_from(ROLES),
    old=st.booleans(),
    importance=st.none() | st.sampled_from([0.05, 0.5, 0.95]),
)
SOMETIMES = st.sampled_from([False, False, True])
STEPS: st.SearchStrategy[Step] = st.one_of(
    STORES,
    STORES,  # twice as likely, so that the agents have memories to lose
    st.builds(
        Recall,
        who=WHO,
        query=st.sampled_from(QUERIES),
        limit=st.integers(1, 8),
        session=st.none() | st.none() | st.sampled_from(SESSIONS),
        roles=st.none()
        | st.none()
        | st.lists(st.sampled_from(ROLES), min_size=1, max_size=3, unique=True),
    ),
    st.builds(
        Evict,
        who=WHO,
        cap=st.integers(0, 4),
        max_age=st.sampled_from([DAY_MS, 30 * DAY_MS]),
        min_importance=st.sampled_from([0.2, 0.7]),
        min_confidence=st.sampled_from([0.1, 0.5, 0.95]),
        dry_run=SOMETIMES,
        scoped=st.booleans().map(lambda unscoped: not unscoped) | st.just(True),
    ),
    st.builds(Consolidate, who=WHO, decay_rate=st.sampled_from([0.05, 0.5, 1.0])),
)


# --- the database, per agent -------------------------------------------------------------------


def rows_by_agent(db_path: str) -> dict[str, Rows]:
    """Every row of memories, sessions and session_messages, grouped by agent."""
    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        agents: dict[str, Rows] = {}
        for table in ("memories", "sessions", "session_messages"):
            # Every column but tenant (one tenant here), in the order the tests index them by.
            columns = ", ".join(
                str(info[1])
                for info in conn.execute(f"PRAGMA table_info({table})")
                if info[1] != "tenant"
            )
            for row in conn.execute(f"SELECT agent_id, {columns} FROM {table}"):
                tables = agents.setdefault(str(row[0]), {})
                tables.setdefault(table, []).append(tuple(row[1:]))
        for tables in agents.values():
            for table_rows in tables.values():
                table_rows.sort(key=repr)
        return agents
    finally:
        conn.close()


def memories_of(rows: dict[str, Rows], agent: str) -> dict[str, tuple[Any, ...]]:
    """The agent's memories by id: (id, agent_id, role, content, hash, session_id, ...)."""
    return {str(row[0]): row for row in rows.get(agent, {}).get("memories", [])}


def others(before: dict[str, Rows], after: dict[str, Rows], agent: str) -> set[str]:
    return (set(before) | set(after)) - {agent}


def changes(before: dict[str, Rows], after: dict[str, Rows]) -> list[tuple[Any, ...]]:
    """The rows that differ, for a readable failure: ("-", row) gone, ("+", row) new."""

    def flat(rows: dict[str, Rows]) -> set[tuple[Any, ...]]:
        return {
            (table, *(f"<{len(v)} bytes>" if isinstance(v, bytes) else v for v in row))
            for tables in rows.values()
            for table, table_rows in tables.items()
            for row in table_rows
        }

    old, new = flat(before), flat(after)
    return [("-", *row) for row in old - new] + [("+", *row) for row in new - old]


def ids_of_others(rows: dict[str, Rows], agent: str) -> set[str]:
    return {memory_id for other in rows if other != agent for memory_id in memories_of(rows, other)}


async def access_recorded(db_path: str, agent: str, memories: list[Any]) -> None:
    """Wait until recall's access counts are on file: recall replies first and records them
    in a write that follows, and a later step must not see them land."""
    wanted = {memory["id"]: memory["accessCount"] for memory in memories}
    for _ in range(400):
        own = memories_of(rows_by_agent(db_path), agent)
        if all(
            memory_id not in own or own[memory_id][8] >= count
            for memory_id, count in wanted.items()
        ):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"recall's access counts were not recorded within 2 s: {wanted}")


# --- checks per step ----------------------------------------------------------------------------


def check_store(step: Store, agent: str, reply: Any, before: dict[str, Rows], after: Any) -> None:
    own_before, own_after = memories_of(before, agent), memories_of(after, agent)
    assert reply["id"] in own_after, "the stored memory belongs to the agent that stored it"
    assert own_after[reply["id"]][3] == step.content
    assert reply["id"] not in ids_of_others(before, agent) | ids_of_others(after, agent)
    if reply["deduplicated"]:
        assert reply["id"] in own_before, "dedup found another agent's memory"
    else:
        assert reply["id"] not in own_before


def check_recall(step: Recall, agent: str, reply: Any, before: dict[str, Rows]) -> None:
    own = memories_of(before, agent)
    matching = [
        row
        for row in own.values()
        if (step.session is None or row[5] == step.session)
        and (step.roles is None or row[2] in step.roles)
    ]
    memories = reply["memories"]
    assert len(memories) == min(step.limit, len(matching)), "recall missed own memories"
    foreign = ids_of_others(before, agent)
    for memory in memories:
        assert memory["id"] not in foreign, "recall returned another agent's memory"
        assert memory["id"] in own
        row = own[memory["id"]]
        assert (memory["content"], memory["role"], memory["sessionId"]) == (row[3], row[2], row[5])
        assert step.session is None or memory["sessionId"] == step.session
        assert step.roles is None or memory["role"] in step.roles


def check_evict(
    step: Evict, agent: str, reply: Any, before: dict[str, Rows], after: dict[str, Rows]
) -> None:
    if reply["dryRun"]:
        assert after == before, "a dry run changed the database"
        return
    removed = len(memories_of(before, agent)) - len(memories_of(after, agent))
    assert reply["evicted"] == removed
    assert set(memories_of(after, agent)) <= set(memories_of(before, agent))
    assert len(memories_of(after, agent)) <= step.cap


def check_consolidate(agent: str, reply: Any, before: dict[str, Rows]) -> None:
    assert reply["memoriesDecayed"] <= len(memories_of(before, agent))


# --- the property -------------------------------------------------------------------------------


@settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pair=st.sampled_from(AGENT_PAIRS), steps=st.lists(STEPS, min_size=4, max_size=16))
async def test_no_operation_for_one_agent_reads_or_touches_another_agents_memories(
    client: Client, worker: App, pair: tuple[str, str], steps: list[Step]
) -> None:
    """Whatever one agent stores, recalls, evicts or consolidates, no reply carries another
    agent's memory and every other agent's rows stay exactly as they were."""
    db_path = worker.config.db_path
    # Fresh agents for each example (the file keeps the earlier ones, as other agents), so
    # that an example replays the same way when hypothesis shrinks it.
    nonce = next(EXAMPLES)
    agents = (f"{nonce}/{pair[0]}", f"{nonce}/{pair[1]}")
    for step in steps:
        agent = agents[step.who]
        trigger, body = step.request(agent)
        before = rows_by_agent(db_path)
        reply = await client.call(trigger, body)
        assert reply.ok, (step, reply)
        if isinstance(step, Recall):
            await access_recorded(db_path, agent, reply.body["memories"])
        after = rows_by_agent(db_path)
        for other in others(before, after, agent):
            assert after.get(other) == before.get(other), (
                f"{step} {other!r} {changes(before, after)}"
            )
        if isinstance(step, Store):
            check_store(step, agent, reply.body, before, after)
            event(f"store deduplicated={reply.body['deduplicated']}")
        elif isinstance(step, Recall):
            check_recall(step, agent, reply.body, before)
            event(f"recall returned any={bool(reply.body['memories'])}")
        elif isinstance(step, Evict):
            check_evict(step, agent, reply.body, before, after)
            event(f"evict dryRun={reply.body['dryRun']} evicted any={reply.body['evicted'] > 0}")
        else:
            check_consolidate(agent, reply.body, before)
            event(f"consolidate decayed any={reply.body['memoriesDecayed'] > 0}")
