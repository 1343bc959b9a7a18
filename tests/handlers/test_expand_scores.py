"""Recall's expanded mode reports scores in 0-1 (contract section 12: `minScore` is 0-1) by
giving the stage score over the highest it can reach; its ranking is the one it always was."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest

from handlers.recall.columns import Columns
from handlers.recall.expand import Expansion, expanded_rank
from handlers.recall.keywords import KeywordMode
from schema.memory import RecallRequest
from worker.embedders import normalise
from worker.recall_index.agent_index import AgentIndex

NOW = 1_800_000_000_000
WORDS = [
    "paint", "lake", "heron", "dawn", "reeds", "boat", "garden", "winter", "music", "bread",
    "river", "kite",
]  # fmt: skip
# The expanded order of every memory of `corpus()` (m<n>, best first), recorded before scores
# were scaled (commit 7d35776): the stage score of the best reached 1.33, of the worst -0.05.
ORDERS = {
    ("stems", "paint lake heron"): (
        "022 058 049 061 091 023 057 071 065 050 056 045 017 015 046 070 044 043 021 034 018 "
        "062 059 019 032 007 053 005 078 008 077 030 035 092 004 041 063 009 039 093 016 051 "
        "038 075 020 084 067 012 033 083 088 089 086 081 003 090 013 036 011 072 060 031 047 "
        "068 052 074 014 037 082 054 080 010 042 069 064 029 076 066 040 002 079 085 026 025 "
        "028 001 073 055 024 006 087 027 000 048"
    ),
    ("stems", "winter bread"): (
        "030 088 032 078 074 017 086 058 031 061 051 070 034 080 062 059 029 069 075 053 085 "
        "026 019 037 057 089 003 077 049 072 002 038 090 033 087 056 010 018 067 050 079 060 "
        "071 081 022 000 073 015 045 013 036 035 025 024 068 023 012 041 009 076 043 084 021 "
        "082 091 027 007 092 083 008 001 005 054 028 039 065 014 006 048 063 040 004 016 020 "
        "011 046 047 044 042 052 093 064 066 055"
    ),
    ("share", "paint lake heron"): (
        "022 058 049 061 091 023 057 071 056 065 050 015 045 017 070 046 044 034 043 018 021 "
        "062 007 032 059 019 008 005 078 092 053 030 035 077 041 063 093 009 004 016 084 051 "
        "039 075 020 033 003 067 089 038 086 083 088 081 090 013 036 072 011 074 012 060 014 "
        "031 068 047 080 082 042 052 054 037 010 069 076 064 002 029 066 040 085 079 026 025 "
        "055 001 073 028 006 024 087 027 000 048"
    ),
    ("share", "winter bread"): (
        "030 088 032 078 074 017 058 061 086 034 031 051 062 070 075 059 029 080 069 053 085 "
        "026 019 037 057 077 002 089 049 010 056 003 038 090 033 087 072 018 067 050 000 060 "
        "071 079 022 081 073 015 013 036 035 045 024 025 023 068 012 009 041 076 043 084 021 "
        "092 091 082 007 027 083 001 008 005 054 028 039 048 006 065 014 063 040 004 016 011 "
        "020 047 046 044 042 052 093 064 066 055"
    ),
}


def corpus() -> tuple[Columns, Any]:
    """94 memories in 20 conversations (every fifth without a session) over 30 days, their
    vectors from opposed to close to the query's, 2-5 of WORDS each, importance 0.2 to 1."""
    rng = np.random.default_rng(30)
    query = normalise(rng.standard_normal(32).tolist())[0]
    index = AgentIndex(anchor_ms=NOW - 7 * 86_400_000)
    number = 0
    for session in range(20):
        start = NOW - int(rng.integers(0, 30 * 86_400_000))
        for turn in range(int(rng.integers(1, 9))):
            vector = rng.uniform(-3.0, 2.5) * np.asarray(query) + rng.standard_normal(32) * 0.6
            blob = normalise(vector.tolist())[0].tobytes()
            words = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 6))))
            name = f"m{number:03d}"
            index.upsert((
                name, "user", None if session % 5 == 0 else f"s{session}", start + turn * 60_000,
                float(rng.choice([0.2, 0.5, 0.9, 1.0])), 0.8, blob, "m", f"{name} {words}", 0,
                None, 0, None, "note", "public", None,
            ))  # fmt: skip
            number += 1
    return index.columns(), query


def recall(
    columns: Columns, vector: Any, query: str, mode: KeywordMode, **fields: Any
) -> list[tuple[str, float]]:
    req = msgspec.convert({"agentId": "a", "query": query, "limit": 100, **fields}, RecallRequest)
    return expanded_rank(columns, req, now=NOW, query_vector=("m", vector), keyword_mode=mode)


@pytest.mark.parametrize(("mode", "query"), list(ORDERS))
def test_expanded_scores_lie_in_0_1_and_the_order_is_unchanged(
    mode: KeywordMode, query: str
) -> None:
    """On a corpus whose stage scores reach 1.33 and fall below 0, every memory comes back in
    the order recorded before the scaling, with scores from 0 to 1, best first."""
    columns, vector = corpus()
    found = recall(columns, vector, query, mode)
    assert " ".join(memory_id[1:] for memory_id, _ in found) == ORDERS[mode, query]
    scores = [score for _, score in found]
    assert all(0.0 <= score <= 1.0 for score in scores), (min(scores), max(scores))
    assert scores == sorted(scores, reverse=True)


def test_this_corpus_scored_above_1_before_the_scaling() -> None:
    """The scaled best of "winter bread" times the ceiling is the stage score: above 1."""
    columns, vector = corpus()
    best = recall(columns, vector, "winter bread", "stems")[0][1]
    assert best * Expansion().ceiling > 1.3


def test_a_memory_perfect_on_every_term_scores_exactly_1() -> None:
    """The ceiling is the largest stage score there is, not a bound above it: cosine 1, every
    keyword, stored now, importance and confidence 1 give 1.0 (1.55 before the scaling)."""
    assert Expansion().ceiling == pytest.approx(1.55)
    vector = normalise([1.0] * 8)[0]
    index = AgentIndex(anchor_ms=NOW)
    index.upsert((
        "best", "user", "s", NOW, 1.0, 1.0, vector.tobytes(), "m", "heron at dawn", 0, None, 0,
        None, "note", "public", None,
    ))  # fmt: skip
    [(_, score)] = recall(index.columns(), vector, "heron dawn", "stems")
    assert score == pytest.approx(1.0, abs=1e-6) and score <= 1.0


def test_min_score_applies_to_the_reported_score() -> None:
    """minScore 0.5 keeps exactly the memories reported at 0.5 or more, in the same order; 0.9
    keeps none here, as the best is reported at 0.86 (its stage score, 1.33, passed before)."""
    columns, vector = corpus()
    every = recall(columns, vector, "winter bread", "stems")
    kept = recall(columns, vector, "winter bread", "stems", minScore=0.5)
    assert kept == [(memory_id, score) for memory_id, score in every if score >= 0.5]
    assert 0 < len(kept) < len(every)
    assert every[0][1] == pytest.approx(0.856, abs=0.001)
    assert recall(columns, vector, "winter bread", "stems", minScore=0.9) == []
