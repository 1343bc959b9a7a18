"""The cut of a ranking to the scores at least the k-th best (handlers/recall/order.py
`at_least_kth`), which partitions only the scores not below a sample's when there are many,
finds exactly the rows that np.partition's k-th finds over all of them: with scores tied in
long runs, in slot order or against it, repeating with the sample's period (so that the sample
sees only the best or only the worst), and with NaN and infinities among them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.recall.order import SAMPLE_FROM, SAMPLE_STEP, at_least_kth


def scores_of(seed: int, count: int, shape: str, odd: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if shape == "ties":
        score = rng.choice([0.1, 0.2, 0.25, 0.7], size=count)
    elif shape == "ascending":
        score = np.sort(rng.random(count))
    elif shape == "descending":
        score = np.sort(rng.random(count))[::-1].copy()
    elif shape == "periodic":  # the sample (every SAMPLE_STEP-th) holds only one phase
        phase = np.arange(count) % SAMPLE_STEP
        score = np.where(phase == rng.integers(SAMPLE_STEP), 1.0, 0.0) + rng.random(count) * 0.1
    else:
        score = rng.random(count)
    odd_rows = rng.random(count) < odd
    score[odd_rows] = rng.choice([np.nan, np.inf, -np.inf], size=int(odd_rows.sum()))
    return score


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    count=st.integers(SAMPLE_FROM - 5, 3 * SAMPLE_FROM),
    limit=st.sampled_from([1, 2, 10, 100, 500, 511]),
    shape=st.sampled_from(["random", "ties", "ascending", "descending", "periodic"]),
    odd=st.sampled_from([0.0, 0.0, 0.001, 0.2]),
)
def test_the_cut_finds_the_rows_at_least_the_kth_best_as_a_full_partition_does(
    seed: int, count: int, limit: int, shape: str, odd: float
) -> None:
    score = scores_of(seed, count, shape, odd)
    kth = np.partition(score, count - limit)[count - limit]
    expected = np.flatnonzero(score >= kth)
    found = at_least_kth(score, limit)
    assert found.dtype == np.int64
    assert found.tolist() == expected.tolist()
