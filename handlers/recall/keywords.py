"""A query's keywords as the score's keyword term weighs them: each keyword's posting in the
agent's columns and its share of the term (`share`, `idf` or `stems`: MEMORY_WORKER_KEYWORD)."""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import numpy as np

from handlers.recall.columns import Columns, Posting, Postings
from handlers.recall.slots import Dense, member
from handlers.text import stem

KeywordMode = Literal["share", "idf", "stems"]


class Term(NamedTuple):
    """A query keyword as `keyword_weights` gives it: its posting (None: no memory has it), its
    share of the keyword term, and the posting's bits where the index keeps them."""

    posting: Posting | None
    weight: float
    dense: Dense | None = None


Terms = list[Term]


def idf(rows: int, frequency: int) -> float:
    """BM25's inverse document frequency; a word no memory has counts as the rarest (1)."""
    frequency = max(1, frequency)
    return math.log((rows - frequency + 0.5) / (frequency + 0.5) + 1.0)


def stem_posting(postings: Postings, stemmed: str) -> tuple[Posting | None, str | None]:
    """Rows having any word with this stem, each once, and that word when it is the only one."""
    found = [
        (p, token) for token in postings.variants(stemmed) if (p := postings.get(token)) is not None
    ]
    if len(found) <= 1:
        return found[0] if found else (None, None)
    return np.unique(np.concatenate([p for p, _ in found])), None


def keyword_weights(columns: Columns, keywords: list[str], mode: KeywordMode) -> Terms:
    """Each query keyword's posting (its rows in this snapshot) and its share of the keyword term.

    `share` weighs every keyword alike, as the contract says; `idf` weighs rare ones more (a
    keyword no memory has weighs as much as the rarest one, so an unmatched query word still
    lowers every memory's share); `stems` is `idf` over Snowball stems, so "painted" finds
    "painting". With equal weights and no stemming all give the contract's value.

    A posting is cut at `rows` (rows appended after the snapshot) but keeps the rows of removed
    memories, which no ranking lets compete: filtering a common word's posting by the live mask
    cost a million-memory recall 3-5 ms. IDF counts live rows only, through the removed slots,
    which are few.
    """
    if mode == "stems":
        stems = list(dict.fromkeys(stem(keyword) for keyword in keywords))
        pairs = [stem_posting(columns.postings, stemmed) for stemmed in stems]
    else:
        pairs = [(columns.postings.get(keyword), keyword) for keyword in keywords]
    if not pairs:
        return []
    found = [posting for posting, _ in pairs]
    dense = [
        None if posting is None or token is None else columns.postings.dense(token)
        for posting, token in pairs
    ]
    rows = columns.rows
    # The bound in the posting's own type: numpy would copy the posting to a Python int's.
    postings = [
        p
        if p is None or len(p) == 0 or p[-1] < rows  # no slot appended since: as it is
        else p[: int(np.searchsorted(p, p.dtype.type(rows)))]
        for p in found
    ]
    if mode == "share":
        weights = [1.0] * len(postings)
    else:
        live = columns.live[:rows]
        alive = int(np.count_nonzero(live))
        dead = np.flatnonzero(~live) if alive < rows else np.zeros(0, dtype=np.int64)

        def live_count(posting: Posting) -> int:
            if len(dead) == 0:
                return len(posting)
            if len(dead) < len(posting):
                return len(posting) - int(np.count_nonzero(member(posting, dead, ascending=True)))
            return int(np.count_nonzero(live[posting]))

        memories = max(1, alive)
        weights = [idf(memories, 0 if p is None else live_count(p)) for p in postings]
    total = sum(weights)
    return [
        Term(posting, weight / total, bits)
        for posting, weight, bits in zip(postings, weights, dense, strict=True)
    ]
