"""The vectorised ranking returns exactly the contract formula's top-k (plain-Python reference),
summaries' words counted as their content's, over the memories the filters pass."""

from __future__ import annotations

import itertools
import math
import re

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.recall.keywords import KeywordMode
from handlers.recall.rank import rank
from handlers.text import STOPWORDS, stem
from schema.memory import RecallRequest
from schema.taxonomy import CATEGORIES, SENSITIVITIES
from worker.embedders import normalise
from worker.recall_index.agent_index import AgentIndex, Row

WORDS = ["cat", "cats", "category", "dog", "the", "and", "deploy", "Deploying", "deployed", "key"]
WORDS += ["rotates", "über", "a1"]
WEEK = 604_800_000
NOW = 1_800_000_000_000
ROLES = ["user", "assistant", "system"]
TAGS = ["red", "green", "blue"]


def reference_keyword(
    content: str, keywords: list[str], everything: list[str], mode: KeywordMode
) -> float:
    """Contract section 3's share; `idf` and `stems` weigh each keyword by BM25's IDF over all
    of the agent's memories (`stems` comparing Snowball stems instead of words)."""

    def words(text: str) -> set[str]:
        found = set(re.findall(r"\w+", text.casefold()))
        return {stem(w) for w in found} if mode == "stems" else found

    if mode == "stems":
        keywords = list(dict.fromkeys(stem(k) for k in keywords))
    if not keywords:
        return 0.0
    weights = dict.fromkeys(keywords, 1.0)
    if mode != "share":
        n = len(everything)
        for k in keywords:
            frequency = max(1, sum(1 for text in everything if k in words(text)))
            weights[k] = math.log((n - frequency + 0.5) / (frequency + 0.5) + 1.0)
    present = words(content)
    return sum(weights[k] for k in keywords if k in present) / sum(weights.values())


def searchable(memory: dict[str, object]) -> str:
    """What the keyword term reads: the content, and the summary's words as if the content's
    (contract section 17)."""
    summary = memory.get("summary")
    return str(memory["content"]) + ("" if summary is None else f" {summary}")


def reference_scores(
    memories: list[dict[str, object]],
    query: str,
    query_vector: list[float] | None,
    mode: KeywordMode = "share",
    everything: list[str] | None = None,
) -> dict[str, float]:
    found = list(dict.fromkeys(re.findall(r"\w+", query.casefold())))
    keywords = [w for w in found if w not in STOPWORDS] or found
    contents = everything if everything is not None else [searchable(m) for m in memories]
    scores = {}
    for memory in memories:
        keyword = reference_keyword(searchable(memory), keywords, contents, mode)
        cosine = 0.0
        vector = memory["vector"]
        if query_vector is not None and isinstance(vector, list):
            dot = sum(a * b for a, b in zip(query_vector, vector, strict=True))
            norms = math.sqrt(sum(a * a for a in query_vector)) * math.sqrt(
                sum(b * b for b in vector)
            )
            cosine = dot / norms if norms else 0.0
        age = max(0, NOW - int(str(memory["timestamp"])))
        recency = 0.5 ** (age / WEEK)
        scores[str(memory["id"])] = (
            0.50 * cosine
            + 0.25 * keyword
            + 0.10 * recency
            + 0.10 * float(str(memory["importance"]))
            + 0.05 * float(str(memory["confidence"]))
        )
    return scores


unit = st.floats(min_value=0.0, max_value=1.0)
memory_strategy = st.fixed_dictionaries(
    {
        "content": st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join),
        # A few shared timestamps make exact ties, so the id tie-break is exercised.
        "timestamp": st.sampled_from([NOW - WEEK, NOW - 2 * WEEK, NOW])
        | st.integers(NOW - 60 * WEEK, NOW + WEEK),
        "importance": st.sampled_from([0.1, 0.5, 0.5, 0.9]) | unit,
        "confidence": st.sampled_from([0.1, 1.0]) | unit,
        "role": st.sampled_from(ROLES),
        "summary": st.none()
        | st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
        "category": st.sampled_from(CATEGORIES),
        "sensitivity": st.sampled_from(SENSITIVITIES),
        "tags": st.lists(st.sampled_from(TAGS), max_size=3),
        "vector": st.none()
        | st.just([1.0, 0.0, 0.0, 0.0])
        | st.lists(st.floats(-1, 1), min_size=4, max_size=4),
    }
)


taxonomy_filters = st.fixed_dictionaries(
    {},
    optional={
        "category": st.sampled_from(CATEGORIES)
        | st.lists(st.sampled_from(CATEGORIES), min_size=1, max_size=3),
        "tags": st.lists(st.sampled_from(TAGS), min_size=1, max_size=2),
        "maxSensitivity": st.sampled_from(SENSITIVITIES),
    },
)


def passes(memory: dict[str, object], filters: dict[str, object]) -> bool:
    """The taxonomy filters of contract section 13, plainly: any of the categories, any of the
    tags, a sensitivity at most the one given."""
    wanted = filters.get("category")
    if isinstance(wanted, str) and memory["category"] != wanted:
        return False
    if isinstance(wanted, list) and memory["category"] not in wanted:
        return False
    tags, has = filters.get("tags"), memory["tags"]
    if isinstance(tags, list) and isinstance(has, list) and not set(tags) & set(has):
        return False
    ceiling = filters.get("maxSensitivity")
    level = SENSITIVITIES.index(str(memory["sensitivity"]))
    return ceiling is None or level <= SENSITIVITIES.index(str(ceiling))


@settings(max_examples=300, deadline=None)
@given(
    memories=st.lists(memory_strategy, min_size=1, max_size=40),
    query=st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join),
    query_vector=st.none() | st.lists(st.floats(-1, 1), min_size=4, max_size=4),
    limit=st.integers(1, 12),
    data=st.data(),
    roles=st.none() | st.lists(st.sampled_from(ROLES), min_size=1, max_size=3, unique=True),
    mode=st.sampled_from(["share", "idf", "stems"]),
)
def test_top_k_equals_the_plain_python_formula_in_every_keyword_mode(
    memories: list[dict[str, object]],
    query: str,
    query_vector: list[float] | None,
    limit: int,
    roles: list[str] | None,
    mode: KeywordMode,
    data: st.DataObject,
) -> None:
    """For random memories and queries, in each keyword mode, rank's top-k is the reference's,
    also after removals and with memories appended after the snapshot."""
    index = AgentIndex(anchor_ms=NOW - 3 * WEEK)
    # Ids in an order unrelated to insertion, so the id tie-break cannot pass by accident.
    names = data.draw(st.permutations([f"m{n:03d}" for n in range(len(memories))]))
    rows: list[Row] = []
    for name, memory in zip(names, memories, strict=True):
        memory["id"] = name
        vector = memory["vector"]
        blob = None
        if isinstance(vector, list):
            blob = normalise(vector)[0].tobytes()
            memory["vector"] = [float(v) for v in np.frombuffer(blob, dtype=np.float32)]
        rows.append(
            (
                str(memory["id"]), str(memory["role"]), None, int(str(memory["timestamp"])),
                float(str(memory["importance"])), float(str(memory["confidence"])),
                blob, None if blob is None else "test-model", str(memory["content"]), 0, None, 0,
                None if memory["summary"] is None else str(memory["summary"]),
                str(memory["category"]), str(memory["sensitivity"]),
                msgspec.json.encode(memory["tags"]).decode() if memory["tags"] else None,
            )
        )  # fmt: skip
    # Rows arrive as a load does them (postings in bulk), one by one as writes do, and in bulk
    # again onto postings that already hold rows.
    first, second = sorted(data.draw(st.lists(st.integers(0, len(rows)), min_size=2, max_size=2)))
    index.load(rows[:first])
    for row in rows[first:second]:
        index.upsert(row)
    index.load(rows[second:])
    qvec = None
    if query_vector is not None:
        qvec = ("test-model", normalise(query_vector)[0])
        query_vector = [float(v) for v in qvec[1]]
    filters: dict[str, object] = {"roles": roles} if roles else {}
    filters |= data.draw(taxonomy_filters)
    request = msgspec.convert(
        {"agentId": "a", "query": query, "limit": limit, **filters}, RecallRequest
    )
    # Removed memories and memories stored after the snapshot must not count, not even in IDF.
    removed = data.draw(st.sets(st.sampled_from(names)))
    for name in removed:
        index.remove(name)
    snapshot = index.columns()
    for n, late in enumerate(data.draw(st.lists(memory_strategy, max_size=5))):
        late_row: Row = (
            f"late{n}", "user", None, NOW, 0.5, 0.5, None, None, str(late["content"]), 0, None,
            0, None, "note", "public", None,
        )  # fmt: skip
        index.upsert(late_row)
    ours = rank(snapshot, request, now=NOW, query_vector=qvec, keyword_mode=mode)

    memories = [m for m in memories if m["id"] not in removed]
    eligible = [m for m in memories if roles is None or m["role"] in roles]
    eligible = [m for m in eligible if passes(m, filters)]
    everything = [searchable(m) for m in memories]
    reference = reference_scores(eligible, query, query_vector, mode, everything)
    timestamps = {str(m["id"]): int(str(m["timestamp"])) for m in eligible}
    expected = sorted(reference, key=lambda i: (-reference[i], -timestamps[i], i))[:limit]
    assert len(ours) == len(expected)
    for (memory_id, score), wanted in zip(ours, expected, strict=True):
        assert abs(score - reference[memory_id]) < 1e-6
        # Only float rounding may reorder: the k-th place is the reference's within 1e-9.
        assert abs(reference[memory_id] - reference[wanted]) < 1e-9
    gaps = sorted(reference.values())
    if all(b == a or b - a > 1e-9 for a, b in itertools.pairwise(gaps)):
        assert [memory_id for memory_id, _ in ours] == expected
