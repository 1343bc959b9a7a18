"""MEMORY_WORKER_VECTOR_INDEX=codes: a shortlist picked with sign codes, ranked by the exact
formula; the codes follow every write; a bad setting stops start-up."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import msgspec
import nats
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.recall.codes import best_rows, hamming, shortlist, sign_codes
from handlers.recall.columns import Columns
from handlers.recall.formula import scores
from handlers.recall.keywords import keyword_weights
from handlers.recall.rank import rank
from handlers.recall.vector_index import EXACT, VectorIndex, shortlist_scores
from schema.memory import RecallRequest
from tests.conftest import worker_config
from tests.support import Client
from worker.app import App
from worker.config import ConfigError, load_config
from worker.embedders import normalise
from worker.recall_index.agent_index import AgentIndex, Row

NOW = 1_800_000_000_000
WEEK = 604_800_000
DIM = 96  # not a multiple of 64: the last code word is half padding


def row_of(name: str, vector: np.ndarray | None, *, days: int, importance: float) -> Row:
    blob = None if vector is None else normalise(vector.tolist())[0].tobytes()
    return (
        name, "user", None, NOW - days * 86_400_000, importance, 0.8, blob,
        None if blob is None else "m", f"note {name}", 0, None, 0, None, "note", "public", None,
    )  # fmt: skip


def request(limit: int, query: str = "note") -> RecallRequest:
    return msgspec.convert({"agentId": "a", "query": query, "limit": limit}, RecallRequest)


def exact_order(columns: Columns, req: RecallRequest, vector: np.ndarray) -> list[str]:
    return [memory_id for memory_id, _ in rank(columns, req, now=NOW, query_vector=("m", vector))]


def test_sign_codes_count_the_dimensions_whose_signs_differ() -> None:
    """Bit j of a code is dimension j's sign; padding past the last dimension never differs."""
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((50, DIM)).astype(np.float32)
    query = rng.standard_normal(DIM).astype(np.float32)
    codes = sign_codes(vectors)
    assert codes.shape == (2, 50) and codes.dtype == np.uint64
    expected = ((vectors > 0) != (query > 0)).sum(axis=1)
    assert hamming(codes, sign_codes(query[None])[:, 0]).tolist() == expected.tolist()


def test_best_rows_holds_the_largest_values_and_never_an_excluded_row() -> None:
    rng = np.random.default_rng(2)
    values = rng.random(100_000)
    values[::3] = -np.inf
    found = best_rows(values, 500)
    assert len(found) >= 500 and not np.isinf(values[found]).any()
    assert set(np.argsort(values)[-500:].tolist()) <= set(found.tolist())
    assert len(best_rows(np.full(10, -np.inf), 5)) == 0


@settings(max_examples=150, deadline=None)
@given(
    count=st.integers(1, 120),
    candidates=st.integers(1, 40),
    limit=st.integers(1, 12),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_index_returns_the_exact_top_k_whenever_the_shortlist_holds_it(
    count: int, candidates: int, limit: int, seed: int
) -> None:
    """Random memories (some without a vector, ties in timestamp): the approximate ranking's
    scores are the exact formula's, and when the shortlist holds the exact top k, it is the
    exact top k in the exact order; with a shortlist as large as the agent, always."""
    rng = np.random.default_rng(seed)
    index = AgentIndex(anchor_ms=NOW - WEEK, codes=True)
    for n in range(count):
        vector = None if n and rng.random() < 0.2 else rng.standard_normal(DIM)
        index.upsert(row_of(f"m{n:03d}", vector, days=int(rng.integers(0, 4)), importance=0.5))
    columns = index.columns()
    query = normalise(rng.standard_normal(DIM).tolist())[0]
    req = request(limit)
    exact = rank(columns, req, now=NOW, query_vector=("m", query))
    approximate = rank(
        columns, req, now=NOW, query_vector=("m", query),
        vector_index=VectorIndex("codes", candidates),
    )  # fmt: skip
    every = scores(columns, req.query, now=NOW, query_vector=("m", query))
    for memory_id, score in approximate:  # float32 dot products over fewer rows may round apart
        assert score == pytest.approx(every[index.slot_of(memory_id)], abs=1e-7)
    base = scores(columns, req.query, now=NOW, query_vector=None)
    live = columns.live[: columns.rows]
    picked = shortlist(base, live, columns.codes["m"], columns.has_vector["m"], query, candidates)
    held = {columns.ids[int(row)] for row in picked}
    if {memory_id for memory_id, _ in exact} <= held or candidates >= count:
        assert len(approximate) == len(exact)
        for (found, _), (wanted, _) in zip(approximate, exact, strict=True):
            # Only that rounding may reorder: each place's exact score is the exact ranking's.
            assert every[index.slot_of(found)] == pytest.approx(
                every[index.slot_of(wanted)], abs=1e-7
            )


def test_the_shortlist_weighs_keywords_as_the_index_asks() -> None:
    """40 memories near the query vector and one far from it holding the query's keyword: a
    shortlist picked on the formula's keyword weight (0.25) leaves the far one out, one picked
    on 0.8 (as the expanded mode weighs keywords more) takes it in; either way the shortlist's
    scores are the exact formula's."""
    rng = np.random.default_rng(11)
    query = normalise(rng.standard_normal(DIM).tolist())[0]
    index = AgentIndex(anchor_ms=NOW - WEEK, codes=True)
    for n in range(40):
        close = query + 0.03 * rng.standard_normal(DIM).astype(np.float32)  # a cosine ~0.96
        index.upsert(row_of(f"near{n:02d}", close, days=1, importance=0.5))
    far = rng.standard_normal(DIM).astype(np.float32)
    far -= (far @ query) * query  # orthogonal: a cosine of 0
    index.upsert(row_of("special", far, days=1, importance=0.5))
    columns = index.columns()
    terms = keyword_weights(columns, ["special"], "share")
    every = scores(columns, "special", now=NOW, query_vector=("m", query))
    picked = {}
    for weight in (0.25, 0.8):
        rows, score = shortlist_scores(
            columns, terms, columns.live[: columns.rows].copy(), now=NOW,
            query_vector=("m", query), candidates=5, keyword_weight=weight,
        )  # fmt: skip
        assert score.tolist() == pytest.approx(every[rows].tolist(), abs=1e-7)
        picked[weight] = {columns.ids[int(row)] for row in rows}
    assert "special" not in picked[0.25] and "special" in picked[0.8]


def test_a_near_neighbour_among_noise_makes_a_small_shortlist_and_ranks_first() -> None:
    """300 random memories and one close to the query: a shortlist of 20 holds it, so the
    approximate top 1 is the exact one (the rest of an exact top 5 of noise need not be)."""
    rng = np.random.default_rng(7)
    index = AgentIndex(anchor_ms=NOW - WEEK, codes=True)
    query = normalise(rng.standard_normal(DIM).tolist())[0]
    for n in range(300):
        index.upsert(row_of(f"m{n:03d}", rng.standard_normal(DIM), days=n % 5, importance=0.3))
    index.upsert(row_of("close", query + 0.3 * rng.standard_normal(DIM), days=9, importance=0.3))
    columns, req = index.columns(), request(1)
    exact = rank(columns, req, now=NOW, query_vector=("m", query))
    found = rank(
        columns, req, now=NOW, query_vector=("m", query), vector_index=VectorIndex("codes", 20)
    )
    assert exact[0][0] == "close"
    assert [m for m, _ in found] == [m for m, _ in exact]
    assert [s for _, s in found] == pytest.approx([s for _, s in exact], abs=1e-7)


def test_auto_is_exact_below_its_threshold_and_codes_above() -> None:
    auto = VectorIndex("auto", 10, threshold=100)
    assert not auto.applies(99) and auto.applies(100)
    assert VectorIndex("codes").applies(1) and not EXACT.applies(10**9)


def signed_vector(text: str) -> list[float]:
    """A deterministic 96-d stand-in embedding with signs that differ between texts."""
    digest = hashlib.blake2b(text.encode(), digest_size=DIM // 8).digest()
    return [1.0 if byte >> bit & 1 else -0.5 for byte in digest for bit in range(8)]


def codes_in_step(index: AgentIndex) -> None:
    """Every row with a vector has the code of that vector."""
    assert index.codes is not None
    for model, matrix in index.vectors.items():
        rows = np.flatnonzero(index.has_vector[model][: len(index.ids)])
        assert len(rows) > 0
        assert np.array_equal(index.codes[model][:, rows], sign_codes(matrix[rows]))


async def test_codes_follow_store_update_delete_and_re_embedding_over_the_bus(
    nats_url: str, tmp_path: Path
) -> None:
    """With the index forced on and a bus embedder: codes match their vectors after a load and
    after stores (past the arrays' first growth), content updates (which re-embed), deletions;
    recall answers as the exact ranking of the same columns does."""
    nc = await nats.connect(nats_url)

    async def embed(msg: Any) -> None:
        text = msgspec.json.decode(msg.data)["text"]
        await msg.respond(msgspec.json.encode({"embedding": signed_vector(text)}))

    await nc.subscribe("embedding.generate", cb=embed)
    await nc.flush()
    app = App(worker_config(nats_url, tmp_path / "memory.db", embedder="bus", vector_index="codes",
                            vector_candidates=10))  # fmt: skip
    await app.start()
    try:
        assert app.services is not None
        index = app.services.index
        client = Client(nc)
        ids = [(await client.store("a", f"fact number {n}"))["id"] for n in range(20)]
        await client.recall("a", "fact number 3")  # loads the agent
        ids += [(await client.store("a", f"later fact {n}"))["id"] for n in range(60)]
        old = index.agent(("", "a")).vectors["bus"][index.agent(("", "a")).slot_of(ids[5])].copy()
        await client.ok("memory::update", {"agentId": "a", "id": ids[5], "content": "moved"})
        await client.ok("memory::delete", {"agentId": "a", "ids": [ids[6]]})
        # Every write queued so far (the recall's access counts too) committed and in the
        # index: the writer runs jobs in order, and this one after them.
        await app.services.writer.run(lambda conn: None, durable=False)
        agent = index.agent(("", "a"))
        assert not np.array_equal(agent.vectors["bus"][agent.slot_of(ids[5])], old)
        assert agent.slot_of(ids[6]) is None
        codes_in_step(agent)
        [top, *_] = await client.recall("a", "moved", limit=3)
        assert top["id"] == ids[5]
        columns = agent.columns()
        query = ("bus", normalise(signed_vector("later fact 7"))[0])
        req = msgspec.convert({"agentId": "a", "query": "later fact 7"}, RecallRequest)
        found = rank(
            columns, req, now=NOW, query_vector=query, vector_index=VectorIndex("codes", 80)
        )
        exact = rank(columns, req, now=NOW, query_vector=query)
        # The same ranking but where float32 rounding breaks a tie the other way (the stub's
        # vectors make many cosines equal).
        assert [s for _, s in found] == pytest.approx([s for _, s in exact], abs=1e-7)
        assert sum(m == n for (m, _), (n, _) in zip(found, exact, strict=True)) >= 8
        index.forget_all()  # a reload makes every code at once
        codes_in_step(index.agent(("", "a")))
    finally:
        await app.stop()
        await nc.close()


@pytest.mark.parametrize(
    ("variable", "value"),
    [("MEMORY_WORKER_VECTOR_INDEX", "hnsw"), ("MEMORY_WORKER_VECTOR_CANDIDATES", "5")],
)
def test_a_bad_vector_index_setting_stops_start_up_naming_it(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        load_config({variable: value})


def test_the_vector_index_is_auto_with_a_thousand_candidates_by_default() -> None:
    config = load_config({})
    assert (config.vector_index, config.vector_candidates) == ("auto", 1000)
    assert load_config({"MEMORY_WORKER_VECTOR_INDEX": "exact"}).vector_index == "exact"


def test_the_two_pass_shortlist_of_a_large_agent_holds_what_one_pass_over_all_codes_holds() -> None:
    """Clustered vectors (neighbours, not twins), some rows without a vector and some filtered
    out: the shortlist picked by a first pass over two code words, then all of them, holds the
    exact top 10 as the single pass does, and never a filtered-out row."""
    rng = np.random.default_rng(12)
    count, dim = 40_000, 384
    centres = rng.standard_normal((400, dim)).astype(np.float32)
    vectors = centres[rng.integers(0, 400, count)] + 0.9 * rng.standard_normal((count, dim))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    has_vector = rng.random(count) > 0.05
    vectors[~has_vector] = 0.0
    eligible = rng.random(count) > 0.1
    base = 0.25 * rng.random(count)
    codes = sign_codes(vectors)
    for trial in range(5):
        query = centres[trial] + 0.9 * rng.standard_normal(dim).astype(np.float32)
        query /= np.linalg.norm(query)
        exact = base + 0.5 * np.where(has_vector, vectors @ query, 0.0)
        exact[~eligible] = -np.inf
        top10 = set(np.argsort(exact)[-10:].tolist())
        one = shortlist(base, eligible, codes, has_vector, query, 100)
        two = shortlist(base, eligible, codes, has_vector, query, 100, coarse_from=1)
        assert top10 <= set(one.tolist()) and top10 <= set(two.tolist())
        assert eligible[two].all() and len(two) >= 100
        assert len(set(one.tolist()) & set(two.tolist())) >= 90
