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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

VectorIndexMode = Literal["auto", "exact", "codes"]
# `auto` ranks with the codes from this many vectors of the query's model in the agent: below
# it, the exact scan takes a few milliseconds at most and nothing is missed.
AUTO_THRESHOLD = 50_000


def words_for(dimensions: int) -> int:
    return -(-dimensions // 64)


def sign_codes(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.uint64]:
    """(n, dimensions) vectors as their (words, n) sign codes; bits past the last dimension
    stay zero, so they never differ."""
    bits = np.packbits(vectors > 0, axis=1, bitorder="little")
    padded = np.zeros((len(vectors), 8 * words_for(vectors.shape[1])), dtype=np.uint8)
    padded[:, : bits.shape[1]] = bits
    return np.ascontiguousarray(padded.view(np.uint64).T)


def hamming(codes: npt.NDArray[np.uint64], query: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint16]:
    """Bits each of the (words, n) codes differs in from the query's (words,) code."""
    rows = codes.shape[1]
    total = np.zeros(rows, dtype=np.uint16)
    scratch = np.empty(rows, dtype=np.uint64)
    counts = np.empty(rows, dtype=np.uint8)
    for word in range(codes.shape[0]):
        np.bitwise_xor(codes[word], query[word], out=scratch)
        np.bitwise_count(scratch, out=counts)
        total += counts
    return total


def cosine_of_hamming(dimensions: int) -> npt.NDArray[np.float64]:
    """0.50 * the cosine estimated from each possible hamming distance: the score's term."""
    return 0.50 * np.cos(math.pi * np.arange(dimensions + 1) / dimensions)


def best_rows(values: npt.NDArray[np.float64], count: int) -> npt.NDArray[np.int64]:
    """The rows of at least the `count` largest values (more when they tie or the cut-off
    estimate is generous), in ascending order; values of -inf are never returned.

    A full partition of a million values took 25-45 ms; a cut-off read from every 8th value,
    with a margin, finds them with one comparison pass, and falls back to the partition when the
    sample was unlucky."""
    finite = int(np.count_nonzero(values > -np.inf))
    if finite <= count:
        return np.flatnonzero(values > -np.inf)
    sample = values[::8]
    rank = min(len(sample) - 1, count // 8 + 4 + int(2 * math.sqrt(count / 8)))
    cutoff = np.partition(sample, len(sample) - 1 - rank)[len(sample) - 1 - rank]
    if cutoff > -np.inf:
        found = np.flatnonzero(values >= cutoff)
        if len(found) >= count:
            return found
    top = np.argpartition(values, len(values) - count)[len(values) - count :]
    return np.sort(top[values[top] > -np.inf])


@dataclass(frozen=True)
class VectorIndex:
    """How recall uses the codes: `exact` never, `codes` always, `auto` from AUTO_THRESHOLD
    vectors of the query's model; `candidates` is the shortlist re-scored exactly."""

    mode: VectorIndexMode = "exact"
    candidates: int = 1000
    threshold: int = AUTO_THRESHOLD

    def applies(self, vectors: int) -> bool:
        return self.mode == "codes" or (self.mode == "auto" and vectors >= self.threshold)


EXACT = VectorIndex()


def shortlist(
    base: npt.NDArray[np.float64],
    eligible: npt.NDArray[np.bool_],
    codes: npt.NDArray[np.uint64],
    has_vector: npt.NDArray[np.bool_],
    vector: npt.NDArray[np.float32],
    candidates: int,
) -> npt.NDArray[np.int64]:
    """The eligible rows whose scores, with the cosine term estimated from the codes, are among
    the best `candidates`. `base` is every row's score without the cosine term."""
    rows = len(base)
    distance = hamming(codes[:, :rows], sign_codes(vector[None])[:, 0])
    estimate = cosine_of_hamming(len(vector))[distance]
    estimate[~has_vector[:rows]] = 0.0
    estimate += base
    estimate[~eligible] = -np.inf
    return best_rows(estimate, candidates)
