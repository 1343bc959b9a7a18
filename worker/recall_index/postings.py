"""Keyword postings of one agent's index: per token, the rows whose content has it."""

from __future__ import annotations

from array import array

import numpy as np
import numpy.typing as npt

from handlers.text import stem

# Rows per token gathered by a bulk load before they become numpy arrays.
PostingLists = dict[str, "array[int]"]


class GrowingPostings:
    """Each token's rows in a numpy array grown by doubling, so that appending is cheap and a
    reader's view of the first `count` entries stays valid (growth copies, never overwrites)."""

    def __init__(self) -> None:
        self._arrays: dict[str, npt.NDArray[np.int64]] = {}
        self._counts: dict[str, int] = {}
        self._variants: dict[str, list[str]] = {}

    def add(self, token: str, row: int) -> None:
        found = self._arrays.get(token)
        count = self._counts.get(token, 0)
        if found is None:
            found = np.empty(4, dtype=np.int64)
            self._variants.setdefault(stem(token), []).append(token)
        elif count == len(found):
            grown = np.empty(2 * count, dtype=np.int64)
            grown[:count] = found
            found = grown
        found[count] = row
        # The count before the array: a reader (without the lock) never finds an array whose
        # count is missing, and a count ahead of its array only slices what is there.
        self._counts[token] = count + 1
        self._arrays[token] = found

    def extend(self, gathered: PostingLists) -> None:
        """Append many rows per token at once (rows above every row already added)."""
        for token, rows in gathered.items():
            added = np.frombuffer(rows, dtype=np.intc).astype(np.int64)
            count = self._counts.get(token, 0)
            if count == 0:
                self._variants.setdefault(stem(token), []).append(token)
                joined = added
            else:
                joined = np.concatenate([self._arrays[token][:count], added])
            self._counts[token] = len(joined)
            self._arrays[token] = joined

    def get(self, token: str) -> npt.NDArray[np.int64] | None:
        found = self._arrays.get(token)
        return None if found is None else found[: self._counts[token]]

    def variants(self, stemmed: str) -> tuple[str, ...]:
        """The tokens seen with this stem (for the `stems` keyword mode)."""
        return tuple(self._variants.get(stemmed, ()))

    def nbytes(self) -> int:
        return sum(found.nbytes + 160 for found in self._arrays.values())
