"""The contract's score of a memory for a query: its prior, recency * 0.10 + importance * 0.10 +
confidence * 0.05 (the last two precomputed as `static`), plus 0.25 * the keyword term and 0.50 *
the cosine with the query's vector. `scores` gives every row's; `prior` its first steps on given
rows, which the other rankings (topk.py, the codes' shortlist) start from so that their scores
are the same operations, in the same order, and equal bit for bit.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from handlers.recall.columns import WEEK_MS, Columns
from handlers.recall.keywords import KeywordMode, Terms, keyword_weights
from handlers.recall.slots import Rows, Scores
from handlers.text import query_keywords


def scores(
    columns: Columns,
    query: str,
    *,
    now: int,
    query_vector: tuple[str, npt.NDArray[np.float32]] | None,
    keyword_mode: KeywordMode = "share",
    terms: Terms | None = None,
) -> npt.NDArray[np.float64]:
    """Every row's score; `terms`: the query's `keyword_weights`, when the caller has them."""
    rows = columns.rows
    if terms is None:
        terms = keyword_weights(columns, query_keywords(query), keyword_mode)
    recency = columns.growth[:rows] * 0.5 ** ((now - columns.anchor_ms) / WEEK_MS)
    np.minimum(recency, 1.0, out=recency)
    recency *= 0.10
    total: npt.NDArray[np.float64] = recency
    total += columns.static[:rows]
    for posting, weight, _ in terms:
        if posting is not None:  # a posting holds a row once: `total[posting] +=`, 3x faster
            np.add.at(total, posting, 0.25 * weight)
    if query_vector is not None and query_vector[0] in columns.vectors:
        model, vector = query_vector
        matrix = columns.vectors[model][:rows]
        if matrix.shape[1] == vector.shape[0]:
            cosine = (matrix @ vector).astype(np.float64)
            cosine[~columns.has_vector[model][:rows]] = 0.0
            total += 0.50 * cosine
    return total


def prior(columns: Columns, rows: Rows, c: float) -> Scores:
    """`scores`'s first steps, on these rows only (the same operations, in order)."""
    total: Scores = columns.growth[rows] * c
    np.minimum(total, 1.0, out=total)
    total *= 0.10
    total += columns.static[rows]
    return total
