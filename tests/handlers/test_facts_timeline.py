"""For any sequence of asserts, ends and retracts, in any order of validFrom, what the fact
store answers (current and at every `asOf`) is what a plain reference model of contract section
19's rules answers; run as the writer runs them (decide, then apply, one transaction each) on a
real SQLite file."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import apsw
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from msgspec import UNSET, UnsetType

from handlers.facts import writes
from handlers.facts.reading import query_facts
from schema.facts import FactAssertRequest, FactEndRequest, FactQueryRequest, FactRetractRequest

NOW = 1_000_000
SINGLE = {"lives_in"}
PREDICATES = ["lives_in", "likes", "dislikes", "speaks"]
OBJECTS = ["x", "y", "z"]


@dataclass
class Modelled:
    id: str
    predicate: str
    object: str
    valid_from: int
    seq: int
    ended: int | None = None
    retracted: bool = False


class Model:
    """The rules in plain Python, by brute force over every fact."""

    def __init__(self) -> None:
        self.facts: list[Modelled] = []

    @staticmethod
    def line(predicate: str, obj: str) -> tuple[str, ...]:
        if predicate in SINGLE:
            return (predicate,)
        return ("likes", obj) if predicate in ("likes", "dislikes") else (predicate, obj)

    def timeline(self, line: tuple[str, ...]) -> list[Modelled]:
        live = [
            f for f in self.facts if not f.retracted and self.line(f.predicate, f.object) == line
        ]
        return sorted(live, key=lambda f: (f.valid_from, f.seq))

    def valid_to(self, fact: Modelled) -> int | None:
        order = self.timeline(self.line(fact.predicate, fact.object))
        position = order.index(fact)
        if position + 1 < len(order):
            following = order[position + 1].valid_from
            if fact.ended is None or following <= fact.ended:
                return following
        return fact.ended

    def holds(self, fact: Modelled, at: int) -> bool:
        valid_to = self.valid_to(fact)
        return not fact.retracted and fact.valid_from <= at and (valid_to is None or at < valid_to)

    def assert_(self, predicate: str, obj: str, valid_from: int, new_id: str) -> tuple[str, bool]:
        order = self.timeline(self.line(predicate, obj))
        same = [f for f in order if (f.predicate, f.object) == (predicate, obj)]
        holding = [f for f in same if self.holds(f, valid_from)]
        if holding:
            return holding[0].id, False
        current = [f for f in same if self.valid_to(f) is None]
        if current:
            [fact] = current
            if not any(g is not fact and g.valid_from >= valid_from for g in order):
                fact.valid_from = min(fact.valid_from, valid_from)
                return fact.id, False
        self.facts.append(Modelled(new_id, predicate, obj, valid_from, len(self.facts)))
        return new_id, True

    def end(self, predicate: str, obj: str | None, at: int) -> set[str]:
        ended = set()
        for f in self.facts:
            if f.retracted or f.predicate != predicate or (obj is not None and f.object != obj):
                continue
            if self.valid_to(f) is None and f.valid_from <= at:
                ended.add(f.id)
        for f in self.facts:
            if f.id in ended:
                f.ended = at
        return ended

    def answer(self, at: int | None) -> set[tuple[str, str, str, int, int | None]]:
        return {
            (f.id, f.predicate, f.object, f.valid_from, self.valid_to(f))
            for f in self.facts
            if not f.retracted and (self.valid_to(f) is None if at is None else self.holds(f, at))
        }


def stored(conn: apsw.Connection, agent: str, at: int | None) -> set[Any]:
    as_of: int | UnsetType = UNSET if at is None else at
    request = FactQueryRequest(agent_id=agent, subject="u", limit=1000, as_of=as_of)
    return {
        (f.id, f.predicate, f.object, f.valid_from, f.valid_to)
        for f in query_facts(conn, request, now=NOW).facts
    }


TIMES = st.integers(min_value=0, max_value=6)
ASSERT = st.tuples(st.just("assert"), st.sampled_from(PREDICATES), st.sampled_from(OBJECTS), TIMES)
STEP = st.one_of(
    ASSERT,
    ASSERT,
    st.tuples(
        st.just("end"), st.sampled_from(PREDICATES), st.sampled_from([*OBJECTS, None]), TIMES
    ),
    st.tuples(st.just("retract"), st.integers(0, 20)),
)
AGENTS = itertools.count()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(STEP, min_size=1, max_size=14))
# A value confirmed earlier than it began cuts the one before it short.
@example(
    steps=[
        ("assert", "lives_in", "x", 0),
        ("assert", "lives_in", "y", 5),
        ("assert", "lives_in", "y", 3),
    ]
)
def test_as_of_answers_equal_the_reference_models(
    conn: apsw.Connection, steps: list[tuple[Any, ...]]
) -> None:
    agent = f"agent-{next(AGENTS)}"
    model = Model()
    for step in steps:
        with conn:
            if step[0] == "assert":
                _, predicate, obj, day = step
                request = FactAssertRequest(
                    agent_id=agent, subject="u", predicate=predicate, object=obj, valid_from=day
                )
                decision = writes.decide_assert(conn, request, NOW, None)
                reply = writes.apply_assert(conn, decision)
                expected = model.assert_(predicate, obj, day, decision.id)
                assert (reply.fact.id, reply.created) == expected, step
            elif step[0] == "end":
                _, predicate, obj, day = step
                ended = writes.apply_end(
                    conn,
                    writes.decide_end(
                        conn,
                        FactEndRequest(
                            agent_id=agent,
                            subject="u",
                            predicate=predicate,
                            at=day,
                            **({} if obj is None else {"object": obj}),
                        ),
                        NOW,
                        None,
                    ),
                )
                assert set(ended.ended) == model.end(predicate, obj, day), step
            else:
                known = [f.id for f in model.facts]
                target = known[step[1] % len(known)] if known else "missing"
                retract = FactRetractRequest(agent_id=agent, ids=[target])
                writes.apply_retract(conn, writes.Retracting(retract, NOW))
                for fact in model.facts:
                    fact.retracted = fact.retracted or fact.id == target
    assert stored(conn, agent, None) == model.answer(None)
    for at in range(-1, 9):
        assert stored(conn, agent, at) == model.answer(at), at
