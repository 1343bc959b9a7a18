"""A snapshot without its dead rows: what persist.py writes when an agent's index holds rows of
memories that were deleted, forgotten, moved, re-indexed or hidden since they were added.

In memory a removed row is only masked (rows never move while a ranking may read them); on disk
nothing of it may stay: not its columns, not its id, not its vector, not its slot in a keyword's,
tag's or metadata key's list, and not a token, stem, tag or key that no live row holds any more
(a token is a word of the memory's content). So a snapshot of an index with dead rows renumbers
the live ones 0..n-1 in their order, and every list is mapped through that renumbering.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from handlers.text import stem
from worker.recall_index.postings import Csr
from worker.recall_index.strings import Strings, all_hashes

CHUNK_ROWS = 1 << 16  # strings gathered at a time
CHUNK_BYTES = 1 << 22  # bytes of rows gathered at a time (a vector matrix is never copied whole)


def renumbering(live: npt.NDArray[np.bool_]) -> npt.NDArray[np.int32]:
    """Old slot -> new slot, -1 for a dead row."""
    new = np.full(len(live), -1, dtype=np.int32)
    kept = np.flatnonzero(live)
    new[kept] = np.arange(len(kept), dtype=np.int32)
    return new


def row_chunks(array: np.ndarray, kept: npt.NDArray[np.int64]) -> Iterator[np.ndarray]:
    """array[kept] a chunk of rows at a time, of CHUNK_BYTES at most (one row at least)."""
    row_bytes = max(1, array.itemsize * int(np.prod(array.shape[1:], dtype=np.int64)))
    step = max(1, CHUNK_BYTES // row_bytes)
    for start in range(0, len(kept), step):
        yield np.ascontiguousarray(array[kept[start : start + step]])


def subset(strings: Strings, positions: npt.NDArray[np.int64]) -> Strings:
    """Only the strings at these positions, in this order."""
    starts = strings.offsets[positions]
    lengths = strings.offsets[positions + 1] - starts
    offsets = np.zeros(len(positions) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    blob = np.empty(int(offsets[-1]), dtype=np.uint8)
    for start in range(0, len(positions), CHUNK_ROWS):
        end = min(start + CHUNK_ROWS, len(positions))
        low, high = int(offsets[start]), int(offsets[end])
        shift = starts[start:end] - offsets[start:end]
        gather = np.repeat(shift, lengths[start:end]) + np.arange(low, high, dtype=np.int64)
        blob[low:high] = strings.blob[gather]
    hashes = all_hashes(blob, offsets)
    order = np.argsort(hashes, kind="stable")
    return Strings(blob, offsets, hashes[order], order)


def compacted(lists: Csr, new_slot: npt.NDArray[np.int32]) -> Csr:
    """The lists with each slot renumbered, dead slots dropped, and keys left empty dropped."""
    count = len(lists.keys)
    mapped = new_slot[lists.values]
    kept = mapped >= 0
    owner = np.repeat(np.arange(count, dtype=np.int64), np.diff(lists.starts))
    sizes = np.bincount(owner[kept], minlength=count)
    used = np.flatnonzero(sizes)
    starts = np.zeros(len(used) + 1, dtype=np.int64)
    np.cumsum(sizes[used], out=starts[1:])
    values = np.ascontiguousarray(mapped[kept], dtype=np.int32)
    return Csr(subset(lists.keys, used), starts, values)


def stems_of(tokens: Strings) -> Csr:
    """stem -> positions of its tokens (the `stems` keyword mode), for a new token list."""
    variants: dict[str, list[int]] = {}
    for position, token in enumerate(tokens):
        variants.setdefault(stem(token), []).append(position)
    return Csr.gathered(variants)
