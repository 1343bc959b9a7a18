"""memory::consolidate's `mergeThreshold` on the handlers (handlers/merge.py), with fixed vectors
set in SQL: which memories merge, what the survivor keeps, where session references go, and
that apply re-checks what it was decided on."""

from __future__ import annotations

import math
from typing import Any

import apsw
import numpy as np
import pytest

from handlers.consolidate import consolidate
from handlers.merge import apply_merges, greedy_groups, plan_agent_merges
from schema.memory import ConsolidateRequest
from tests.handlers.support import NOW, insert_in_tenant, rows, store

MODEL = "test-model"


def vector(angle_degrees: float, dim: int = 8) -> bytes:
    """A unit vector at this angle from the first axis, in the plane of the first two: two of
    them have cosine cos(difference of angles)."""
    out = np.zeros(dim, dtype=np.float32)
    out[0], out[1] = math.cos(math.radians(angle_degrees)), math.sin(math.radians(angle_degrees))
    return out.tobytes()


def cosine_angle(cosine: float) -> float:
    return math.degrees(math.acos(cosine))


def embed(conn: apsw.Connection, memory_id: str, angle: float, model: str = MODEL) -> None:
    with conn:
        conn.execute(
            "UPDATE memories SET embedding = ?, embedding_model = ? WHERE id = ?",
            (vector(angle), model, memory_id),
        )


def put(conn: apsw.Connection, agent: str, content: str, angle: float, **fields: Any) -> str:
    """A memory stored (created at `now`, default NOW) with its vector at `angle`."""
    memory_id = store(conn, agent, content, **fields).id
    embed(conn, memory_id, angle)
    return memory_id


def run(conn: apsw.Connection, threshold: float | None = 0.95, **fields: Any) -> int:
    """Consolidate without decay (rate 0: the tests set old access times); memories merged."""
    fields.setdefault("decay_rate", 0.0)
    if threshold is not None:
        fields["merge_threshold"] = threshold
    with conn:
        reply = consolidate(conn, ConsolidateRequest(**fields), now=NOW)
    return reply.memories_merged


def ids(conn: apsw.Connection) -> set[str]:
    return {str(row[0]) for row in rows(conn, "SELECT id FROM memories")}


def test_a_paraphrase_pair_becomes_the_newest_with_the_best_scores_and_its_session_places(
    conn: apsw.Connection,
) -> None:
    """The survivor is the newer memory; it takes the higher importance and confidence and
    the later access; the other's place in a session points at it, and where a session holds
    both, the survivor's own place stays and the other's goes."""
    old = put(conn, "a", "the deploy key rotates on Fridays", 0, session_id="s1",
              importance=0.9, timestamp=1_000)  # fmt: skip
    new = put(conn, "a", "deploy keys are rotated every Friday", cosine_angle(0.97),
              session_id="s1", importance=0.3, timestamp=5_000)  # fmt: skip
    with conn:
        conn.execute("UPDATE memories SET access_count = 2, last_accessed = 9 WHERE id = ?", (old,))
        conn.execute("UPDATE memories SET confidence = 0.6, last_accessed = 7 WHERE id = ?", (new,))
        # `old` also sits in a second session, at position 1 before another memory.
        store(conn, "a", "unrelated", session_id="s2")
        conn.execute("UPDATE session_messages SET position = 2 WHERE session_id = 's2'")
        conn.execute(
            "INSERT INTO session_messages (tenant, agent_id, session_id, position, memory_id, "
            "role, timestamp) VALUES ('', 'a', 's2', 1, ?, 'user', 1000)",
            (old,),
        )
    assert run(conn) == 1
    [kept] = rows(
        conn,
        "SELECT id, content, importance, confidence, timestamp, access_count, last_accessed "
        "FROM memories WHERE content != 'unrelated'",
    )
    assert kept == (new, "deploy keys are rotated every Friday", 0.9, 1.0, 5_000, 2, 9)
    by_session = rows(
        conn, "SELECT session_id, position, memory_id FROM session_messages ORDER BY 1, 2"
    )
    unrelated = by_session[-1][2]
    assert by_session == [("s1", 2, new), ("s2", 1, new), ("s2", 2, unrelated)]


def test_roles_models_and_the_threshold_keep_memories_apart(conn: apsw.Connection) -> None:
    base = put(conn, "a", "one", 0, now=NOW - 1)
    assistant = put(conn, "a", "one, said by the assistant", 0, role="assistant")
    other_model = store(conn, "a", "one, in another model").id
    embed(conn, other_model, 0, model="other-model")
    below = put(conn, "a", "almost one", cosine_angle(0.94))
    assert run(conn, 0.95) == 0
    assert ids(conn) == {base, assistant, other_model, below}
    assert run(conn, 0.939) == 1  # into the newer
    assert ids(conn) == {assistant, other_model, below} and base


def test_pinned_always_forgotten_and_switched_off_memories_are_left_alone(
    conn: apsw.Connection,
) -> None:
    put(conn, "a", "plain", 0)
    put(conn, "a", "pinned", 0)
    put(conn, "a", "always", 0, recall_policy="always")
    put(conn, "a", "forgotten", 0)
    put(conn, "off", "first", 0)
    put(conn, "off", "second", 0)
    with conn:
        conn.execute("UPDATE memories SET pinned = 1 WHERE content = 'pinned'")
        conn.execute("UPDATE memories SET forgotten_at = 1 WHERE content = 'forgotten'")
        conn.execute(
            "INSERT INTO agent_switch (tenant, agent_id, disabled_at) VALUES ('', 'off', 1)"
        )
    assert run(conn) == 0
    assert len(ids(conn)) == 6


def test_each_agent_and_tenant_merges_alone_and_a_scope_limits_it(conn: apsw.Connection) -> None:
    for agent in ("a", "b"):
        put(conn, agent, "first", 0)
        put(conn, agent, "second", 0)
    with conn:
        for content in ("first", "second"):
            embed(conn, insert_in_tenant(conn, "T", "a", content), 0)
    assert run(conn, agent_id="b", tenant="") == 1
    assert run(conn, tenant="T") == 1
    count = dict(rows(conn, "SELECT tenant || '/' || agent_id, count(*) FROM memories GROUP BY 1"))
    assert count == {"/a": 2, "/b": 1, "T/a": 1}
    assert run(conn) == 1 and run(conn) == 0  # the rest, then nothing: idempotent


def test_a_group_is_the_newest_and_what_is_close_to_it_not_a_chain(conn: apsw.Connection) -> None:
    """A ~ B and B ~ C but not A ~ C: C, the newest, takes B, and A (near nothing untaken
    that leads) stays."""
    a = put(conn, "a", "A", 0, now=NOW - 3)
    b = put(conn, "a", "B", 15, now=NOW - 2)
    c = put(conn, "a", "C", 30, now=NOW - 1)
    assert run(conn, math.cos(math.radians(16))) == 1
    assert ids(conn) == {a, c} and b


def test_apply_skips_what_changed_since_the_decision_and_a_replay_changes_nothing(
    conn: apsw.Connection,
) -> None:
    survivor = put(conn, "a", "s", 0)
    gone = put(conn, "a", "gone", 0, now=NOW - 1)
    rescored = put(conn, "a", "rescored", 0, now=NOW - 2)
    kept = put(conn, "a", "kept", 0, now=NOW - 3, importance=0.9)
    lonely = put(conn, "a", "lonely survivor", 90, now=NOW - 4)
    partner = put(conn, "a", "partner", 90, now=NOW - 5)
    groups = plan_agent_merges(conn, ("", "a"), 0.95)
    assert [(g.survivor.memory_id, [m.memory_id for m in g.merged]) for g in groups] == [
        (survivor, [gone, rescored, kept]),
        (lonely, [partner]),
    ]
    with conn:
        conn.execute("DELETE FROM memories WHERE id = ?", (gone,))
        conn.execute("UPDATE memories SET importance = 0.1 WHERE id = ?", (rescored,))
        conn.execute("UPDATE memories SET content = 'changed', hash = 'x' WHERE id = ?", (lonely,))
    with conn:
        done = apply_merges(conn, groups)
    assert [(d.survivor, d.removed) for d in done] == [(survivor, [kept])]
    assert ids(conn) == {survivor, rescored, lonely, partner}
    assert rows(conn, "SELECT importance FROM memories WHERE id = ?", survivor) == [(0.9,)]
    before = rows(conn, "SELECT * FROM memories ORDER BY id")
    with conn:
        assert apply_merges(conn, groups) == []
    assert rows(conn, "SELECT * FROM memories ORDER BY id") == before


def test_without_a_threshold_nothing_merges(conn: apsw.Connection) -> None:
    put(conn, "a", "one", 0)
    put(conn, "a", "two", 0)
    assert run(conn, None) == 0 and len(ids(conn)) == 2


@pytest.mark.parametrize("seed", range(5))
def test_tiles_find_the_groups_the_whole_matrix_finds(seed: int) -> None:
    """greedy_groups with tiny tiles against the same greedy rule over the whole matrix."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(6, 5))
    vectors = centres[rng.integers(0, 6, 60)] + 0.15 * rng.normal(size=(60, 5))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    threshold = 0.97
    whole = vectors @ vectors.T >= threshold
    taken: set[int] = set()
    expected = []
    for leader in range(60):
        if leader in taken:
            continue
        members = [j for j in range(leader + 1, 60) if whole[leader, j] and j not in taken]
        taken.update(members)
        if members:
            expected.append((leader, members))
    assert expected, "the data has groups"
    assert greedy_groups(vectors, threshold, block=7) == expected
