"""The index's string arrays (worker/recall_index/strings.py): hashes made in chunks and merged
as strings are added give what one pass over them all gives, so that snapshots written before
and after still open and find the same positions."""

from __future__ import annotations

import random

import numpy as np
import pytest

from worker.recall_index import strings
from worker.recall_index.strings import Strings, encode, one_hash


def test_strings_extended_in_parts_hash_and_order_as_one_stable_sort_of_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Strings added in three parts (ASCII, accents, emoji, empty ones and repeats), hashed a
    few bytes at a time, hold the hashes `one_hash` gives each, ordered as one stable sort; a
    lookup finds every position of a string, and `holding` tells which strings are there."""
    monkeypatch.setattr(strings, "HASH_BYTES", 100)
    rng = random.Random(1)
    items = ["".join(rng.choice("ab\u00e9\U0001f600xyz") for _ in range(rng.randint(0, 40)))
             for _ in range(3000)] + ["repeated"] * 5  # fmt: skip
    found = Strings.build(items[:1000]).extended(items[1000:2000]).extended([])
    found = found.extended(items[2000:])
    hashes = np.array([one_hash(encode(item)) for item in items], dtype=np.uint64)
    order = np.argsort(hashes, kind="stable")
    assert np.array_equal(found.hashes, hashes[order])
    assert np.array_equal(found.order, order)
    for item in [*items[::37], "repeated"]:
        assert found.positions(item) == [at for at, other in enumerate(items) if other == item]
    assert found.holding([items[3], "absent", "repeated", ""]) == [True, False, True, "" in items]
