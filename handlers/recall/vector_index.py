"""When and how recall ranks with the sign codes (codes.py) instead of every float32 vector:
the operator's setting (MEMORY_WORKER_VECTOR_INDEX) and the `VectorIndex` it means for each
recall mode, whether a recall uses it (`approximate`), and the exact scores of the shortlist
the codes pick (`shortlist_scores`), which rank.py then orders as it orders a full scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from handlers.recall.codes import shortlist
from handlers.recall.columns import WEEK_MS, Columns
from handlers.recall.formula import prior
from handlers.recall.keywords import Terms
from handlers.recall.slots import member

VectorIndexMode = Literal["auto", "exact", "codes"]
# `auto` ranks with the codes from this many vectors of the query's model in the agent: below
# it, the exact scan takes a few milliseconds at most and nothing is missed.
AUTO_THRESHOLD = 50_000
# A keyword worth less than this in the score is left out of the estimate that picks a vector
# index's shortlist (not out of the scores): it moves the estimate less than the codes' own error
# on the cosine does, and a common word's million-row posting cost the estimate 1 ms.
NEGLIGIBLE = 0.01


@dataclass(frozen=True)
class VectorIndex:
    """How recall uses the codes: `exact` never, `codes` always, `auto` from AUTO_THRESHOLD
    vectors of the query's model; `candidates` is the shortlist re-scored exactly, picked with
    the keyword term weighed `keyword_weight` in its estimate (the formula's 0.25; the expanded
    mode weighs it more, expand.py)."""

    mode: VectorIndexMode = "exact"
    candidates: int = 1000
    threshold: int = AUTO_THRESHOLD
    keyword_weight: float = 0.25

    def applies(self, vectors: int) -> bool:
        return self.mode == "codes" or (self.mode == "auto" and vectors >= self.threshold)


EXACT = VectorIndex()
# MEMORY_WORKER_VECTOR_INDEX: what the operator names (`chosen` maps it to a VectorIndex).
VectorIndexSetting = Literal["auto", "exact", "codes", "approximate"]


def chosen(
    setting: VectorIndexSetting, recall: Literal["formula", "expanded"], candidates: int
) -> VectorIndex:
    """The vector index a recall of this mode uses. `exact` never uses the codes; `codes`
    always does and `approximate` from AUTO_THRESHOLD vectors, in both modes: the operator
    named an approximate index. `auto` (the default) uses them from AUTO_THRESHOLD vectors in
    the expanded mode only, whose ranking is not the formula's anyway; `formula` is then always
    the exact top k, as contract section 3 has it unless an approximate index is named."""
    if setting == "exact" or (setting == "auto" and recall == "formula"):
        return VectorIndex("exact", candidates)
    return VectorIndex("codes" if setting == "codes" else "auto", candidates)


def keeps_codes(setting: VectorIndexSetting, recall: Literal["formula", "expanded"]) -> bool:
    """Whether an agent's index keeps its vectors' sign codes: only where a recall may use them
    (48 bytes a 384-d vector, and a float32 copy of two columns)."""
    return chosen(setting, recall, 1).mode != "exact"


def approximate(
    columns: Columns,
    query_vector: tuple[str, npt.NDArray[np.float32]] | None,
    vector_index: VectorIndex,
) -> bool:
    """Whether this recall ranks a shortlist picked with the codes (codes.py)."""
    if query_vector is None or vector_index.mode == "exact":
        return False
    model, vector = query_vector
    codes = columns.codes.get(model)
    if codes is None or columns.vectors[model].shape[1] != len(vector):
        return False
    return vector_index.applies(int(np.count_nonzero(columns.has_vector[model][: columns.rows])))


def shortlist_scores(
    columns: Columns,
    terms: Terms,
    eligible: npt.NDArray[np.bool_],
    *,
    now: int,
    query_vector: tuple[str, npt.NDArray[np.float32]],
    candidates: int,
    keyword_weight: float = 0.25,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The shortlist's rows and their exact scores, the cosine from their float32 rows alone.

    The shortlist is picked on an estimate of every row's other terms in fewer passes than
    `scores` takes (the passes over a million rows are most of the cost), the keyword term
    weighed `keyword_weight` (the formula's 0.25, or more for a ranking that will weigh it
    more); the shortlist's own scores are then the same operations as `scores`, in the same
    order, on its rows only."""
    model, vector = query_vector
    rows = columns.rows
    c = 0.5 ** ((now - columns.anchor_ms) / WEEK_MS)
    static, grown = (
        (columns.static, columns.growth) if columns.estimates is None else columns.estimates
    )
    kind = static.dtype.type  # float32 where the index keeps the estimates: half the bytes
    estimate = np.multiply(grown[:rows], kind(0.10 * c))
    np.minimum(estimate, kind(0.10), out=estimate)
    estimate += static[:rows]
    for posting, weight, _ in terms:
        if posting is not None and keyword_weight * weight >= NEGLIGIBLE:
            np.add.at(estimate, posting, kind(keyword_weight * weight))
    has_vector = columns.has_vector[model]
    picked = shortlist(estimate, eligible, columns.codes[model], has_vector, vector, candidates)
    score = prior(columns, picked, c)
    for posting, weight, bits in terms:
        if posting is not None:
            score[member(posting, picked, ascending=True, dense=bits)] += 0.25 * weight
    # Not `@`: BLAS hands a thousand rows to its threads, whose wake-up cost 5-12 ms on a busy
    # machine against 0.1 ms for this single-threaded loop.
    if columns.vector_rows is None:
        matrix = columns.vectors[model][picked]
    else:
        matrix = columns.vector_rows(model, picked)
    cosine = np.einsum("ij,j->i", matrix, vector).astype(np.float64)
    cosine[~has_vector[picked]] = 0.0
    score += 0.50 * cosine
    return picked, score
