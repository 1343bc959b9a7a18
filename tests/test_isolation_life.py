"""Isolation between agents for a memory's life (contract section 12), as a property: random
sequences of get, list, update, forget, unforget, delete, erase, session::get, kg add and delete
and recall with pinned memories for two agents whose ids differ in ways loose comparisons miss.
Every step that names memory ids draws them from both agents' memories, so each trigger is asked
for the other agent's memories too.

After every step: no reply carries another agent's memory, another agent's ids asked for are
reported `missing` (or refused), and every other agent's rows (memories, sessions, messages,
entities, relations, audit) are exactly as they were.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import worker_config
from tests.support import Client
from tests.test_isolation import AGENT_PAIRS
from worker.app import App

TABLES = ("memories", "sessions", "session_messages", "kg_entities", "kg_relations", "audit")
CONTENTS = ["the deploy key rotates", "cache error", "shared words", "Shared words", "x"]
EXAMPLES = itertools.count()
Rows = dict[str, list[tuple[Any, ...]]]


@pytest.fixture
async def worker(nats_url: str, tmp_path: Path) -> AsyncIterator[App]:
    """The worker with its built-in embedder: update's new content gets a vector too."""
    app = App(worker_config(nats_url, tmp_path / "memory.db", embedder="builtin"))
    await app.start()
    yield app
    await app.stop()


def rows_by_agent(db_path: str) -> dict[str, Rows]:
    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        agents: dict[str, Rows] = {}
        for table in TABLES:
            for row in conn.execute(f"SELECT agent_id, * FROM {table}"):
                agents.setdefault(str(row[0]), {}).setdefault(table, []).append(tuple(row[1:]))
        for tables in agents.values():
            for table_rows in tables.values():
                table_rows.sort(key=repr)
        return agents
    finally:
        conn.close()


def memory_ids(db_path: str, agent: str | None = None) -> list[str]:
    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        where, params = ("", ()) if agent is None else (" WHERE agent_id = ?", (agent,))
        return sorted(str(r[0]) for r in conn.execute(f"SELECT id FROM memories{where}", params))
    finally:
        conn.close()


@dataclass(frozen=True)
class Step:
    """One request of agent `who`; `picks` choose memory ids among both agents' at run time."""

    who: int
    trigger: str
    picks: tuple[int, ...]
    variant: int

    def request(self, agent: str, known: list[str]) -> dict[str, Any]:
        ids = list(dict.fromkeys(known[p % len(known)] for p in self.picks)) if known else []
        ids = ids or ["no-such-id"]
        body: dict[str, Any] = {"agentId": agent}
        match self.trigger:
            case "memory::store":
                body |= {"content": CONTENTS[self.variant % len(CONTENTS)], "sessionId": "s1"}
            case "memory::get" | "memory::forget" | "memory::unforget" | "memory::delete":
                body["ids"] = ids
            case "memory::list":
                body |= {"limit": 1 + self.variant % 4, "includeForgotten": self.variant % 2 == 0}
                body["order"] = "oldest" if self.variant % 3 else "newest"
            case "memory::update":
                body["id"] = ids[0]
                changes: list[dict[str, Any]] = [
                    {"pinned": True}, {"importance": 0.9}, {"metadata": {"k": 1}},
                    {"content": CONTENTS[self.variant % len(CONTENTS)]},
                ]  # fmt: skip
                body |= changes[self.variant % len(changes)]
            case "memory::erase":
                body["confirm"] = agent
            case "memory::session::get":
                body["sessionId"] = "s1"
            case "memory::recall":
                body |= {"withPinned": True, "limit": 5}
            case "memory::kg::add":
                body["entity"] = {"id": "e", "relations": [{"target": "f", "type": "knows"}]}
            case "memory::kg::delete":
                body["entityId"] = "e"
        return body


TRIGGERS = [
    "memory::store", "memory::store", "memory::store", "memory::get", "memory::list",
    "memory::update", "memory::forget", "memory::unforget", "memory::delete",
    "memory::session::get", "memory::recall", "memory::kg::add", "memory::kg::delete",
]  # fmt: skip
STEPS = st.builds(
    Step,
    who=st.integers(0, 1),
    trigger=st.sampled_from(TRIGGERS),
    picks=st.lists(st.integers(0, 50), min_size=1, max_size=3).map(tuple),
    variant=st.integers(0, 11),
)
ERASE = st.builds(Step, who=st.integers(0, 1), trigger=st.just("memory::erase"),
                  picks=st.just((0,)), variant=st.just(0))  # fmt: skip


def reply_ids(body: Any) -> set[str]:
    """Every memory id a reply hands out."""
    found: set[str] = set()
    for key in ("memories", "pinned", "messages"):
        listed = body.get(key)
        if isinstance(listed, list):  # erase's `memories` is a count
            found |= {m["id"] for m in listed if m.get("id")}
    if "memory" in body:
        found.add(body["memory"]["id"])
    return found


@settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    pair=st.sampled_from(AGENT_PAIRS),
    steps=st.lists(STEPS, min_size=4, max_size=14)
    | st.lists(STEPS | ERASE, min_size=4, max_size=14),
)
async def test_no_trigger_of_a_memorys_life_reads_or_touches_another_agent(
    client: Client,
    worker: App,
    pair: tuple[str, str],
    steps: list[Step],
) -> None:
    db_path = worker.config.db_path
    nonce = next(EXAMPLES)
    agents = (f"{nonce}/{pair[0]}", f"{nonce}/{pair[1]}")
    for step in steps:
        agent = agents[step.who]
        known = sorted(set(memory_ids(db_path, agents[0]) + memory_ids(db_path, agents[1])))
        body = step.request(agent, known)
        before = rows_by_agent(db_path)
        reply = await client.call(step.trigger, body)
        # A recall's access counts are written behind its reply: let them land in this step,
        # not in the next one's before/after (they are the recalling agent's rows).
        assert worker.services is not None
        await asyncio.gather(*worker.services.background)
        after = rows_by_agent(db_path)
        for other in (set(before) | set(after)) - {agent}:
            assert after.get(other) == before.get(other), (step, other)
        own = set(memory_ids(db_path, agent)) | {
            str(row[0]) for row in before.get(agent, {}).get("memories", [])
        }
        foreign = set(known) - own
        if reply.ok:
            assert not reply_ids(reply.body) & foreign, (step, reply.body)
            asked = set(body.get("ids", []))
            if "missing" in reply.body:
                assert asked & foreign <= set(reply.body["missing"]), (step, reply.body)
        else:
            assert reply.code in ("404", "409"), (step, reply)
            if reply.code == "409":
                assert not any(f in (reply.description or "") for f in foreign), (step, reply)
