"""Recall with a query vector without reading every float32 vector: sign codes, then an exact
re-score of a shortlist.

Each vector is kept beside its float32 row as one bit per dimension, set when the component is
positive (48 bytes for 384-d, against 1536 for the row). The share of bits two codes disagree on
estimates the angle between the vectors (angle ~ pi * hamming / dimensions), so a recall scores
every eligible memory with the contract's formula, the cosine term replaced by that estimate,
keeps the best `candidates` of those estimates, and ranks them by the exact formula over their
float32 rows. Only the shortlist's rows are read, so the float32 vectors need not be resident.

It is approximate: a memory that ends outside the shortlist, because its cosine was
underestimated or `candidates` others' were overestimated, while its exact score would have
placed it in the top `limit`, is missed (and the memory after it takes its place). Everything
ranked is ranked by its exact score, with the contract's tie-breaks.

Codes are laid out one 64-bit word per row and block of 64 dimensions, shape (words, rows): a
word's popcount over all rows is one numpy pass over contiguous memory, where counting along
rows of 6 words was ten times slower.

When a recall uses the codes, and the shortlist's exact scores: vector_index.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

# From this many rows (and 4 * COARSE_KEEP * candidates) the shortlist is picked in two passes.
COARSE_FROM = 200_000
COARSE_WORDS = 2
# 8: at a million, 1.2 ms faster than 16 for a top 10 recall of 0.998 against 1.000 (formula).
COARSE_KEEP = 8
# best_rows estimates its cut-off from every this-many-th value (at most; fewer in small sets).
SAMPLE_STEP = 32


def words_for(dimensions: int) -> int:
    return -(-dimensions // 64)


def sign_codes(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.uint64]:
    """(n, dimensions) vectors as their (words, n) sign codes; bits past the last dimension
    stay zero, so they never differ."""
    bits = np.packbits(vectors > 0, axis=1, bitorder="little")
    padded = np.zeros((len(vectors), 8 * words_for(vectors.shape[1])), dtype=np.uint8)
    padded[:, : bits.shape[1]] = bits
    return np.ascontiguousarray(padded.view(np.uint64).T)


def hamming(
    codes: npt.NDArray[np.uint64], query: npt.NDArray[np.uint64]
) -> npt.NDArray[np.uint8] | npt.NDArray[np.uint16]:
    """Bits each of the (words, n) codes differs in from the query's (words,) code, counted in
    one byte a row when at most 3 words (192 bits) are: the pass is bound by memory."""
    rows = codes.shape[1]
    total: npt.NDArray[np.uint8] | npt.NDArray[np.uint16] = (
        np.empty(rows, dtype=np.uint8) if codes.shape[0] <= 3 else np.empty(rows, dtype=np.uint16)
    )
    scratch = np.empty(rows, dtype=np.uint64)
    counts = np.empty(rows, dtype=np.uint8)
    for word in range(codes.shape[0]):
        np.bitwise_xor(codes[word], query[word], out=scratch)
        if word == 0:
            np.bitwise_count(scratch, out=total)
        else:
            np.bitwise_count(scratch, out=counts)
            np.add(total, counts, out=total)
    return total  # uint8 or uint16: both index the table


def cosine_of_hamming(dimensions: int) -> npt.NDArray[np.float32]:
    """0.50 * the cosine estimated from each possible hamming distance: the score's term; and
    at `dimensions + 1`, 0 for a row without a vector."""
    table = np.zeros(dimensions + 2, dtype=np.float32)
    table[:-1] = 0.50 * np.cos(math.pi * np.arange(dimensions + 1) / dimensions)
    return table


def best_rows(
    values: npt.NDArray[np.floating[Any]], count: int, finite: int | None = None
) -> npt.NDArray[np.int64]:
    """The rows of at least the `count` largest values (more when they tie or the cut-off
    estimate is generous), in ascending order; values of -inf are never returned. `finite`: how
    many values are above -inf, when the caller knows.

    A full partition of a million values took 25-45 ms; a cut-off read from every 32nd value,
    with a margin, finds them with one comparison pass, and falls back to the partition when the
    sample was unlucky."""
    if finite is None:
        finite = int(np.count_nonzero(values > -np.inf))
    if finite <= count:
        return np.flatnonzero(values > -np.inf)
    step = max(1, min(SAMPLE_STEP, len(values) // (4 * count)))
    sample = values[::step]
    rank = min(len(sample) - 1, count // step + 4 + int(2 * math.sqrt(count / step)))
    cutoff = np.partition(sample, len(sample) - 1 - rank)[len(sample) - 1 - rank]
    if cutoff > -np.inf:
        found = np.flatnonzero(values >= cutoff)
        if len(found) >= count:
            return found
    top = np.argpartition(values, len(values) - count)[len(values) - count :]
    return np.sort(top[values[top] > -np.inf])


def shortlist(
    base: npt.NDArray[np.floating[Any]],
    eligible: npt.NDArray[np.bool_],
    codes: npt.NDArray[np.uint64],
    has_vector: npt.NDArray[np.bool_],
    vector: npt.NDArray[np.float32],
    candidates: int,
    *,
    coarse_from: int = COARSE_FROM,
) -> npt.NDArray[np.int64]:
    """The eligible rows whose scores, with the cosine term estimated from the codes, are among
    the best `candidates`. `base` is every row's score without the cosine term (an estimate
    will do); it is overwritten.

    In a large agent a first pass estimates from the codes' first COARSE_WORDS words only and
    keeps COARSE_KEEP times `candidates` rows, which the whole codes then estimate: the codes
    pass reads a third of the bytes (the pass is bound by memory: 48 MB at a million)."""
    rows = len(base)
    query = sign_codes(vector[None])[:, 0]
    words, dimensions = codes.shape[0], len(vector)
    coarse = words > COARSE_WORDS and rows >= max(coarse_from, 4 * COARSE_KEEP * candidates)
    first = COARSE_WORDS if coarse else words
    bits = min(dimensions, 64 * first)
    distance = hamming(codes[:first, :rows], query[:first])
    without = np.count_nonzero(has_vector[:rows]) < rows
    if without:
        distance[~has_vector[:rows]] = bits + 1  # the table's 0
    # np.take: a gather from a small table, twice as fast as indexing with the distances.
    estimate = np.add(base, np.take(cosine_of_hamming(bits), distance), out=base)
    finite = int(np.count_nonzero(eligible))
    if finite < rows:
        estimate[~eligible] = -np.inf
    if not coarse:
        return best_rows(estimate, candidates, finite)
    picked = best_rows(estimate, COARSE_KEEP * candidates, finite)
    near = distance[picked]
    rest = base[picked] - np.take(cosine_of_hamming(bits), near)  # the estimate's base again
    distance = near.astype(np.uint16) + hamming(codes[first:][:, picked], query[first:])
    if without:
        distance[~has_vector[picked]] = dimensions + 1
    refined = rest + np.take(cosine_of_hamming(dimensions), distance)
    found: npt.NDArray[np.int64] = picked[best_rows(refined, candidates, len(picked))]
    return found
