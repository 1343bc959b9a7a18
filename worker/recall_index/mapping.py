"""Arrays opened from a snapshot's files (worker/recall_index/persist.py) are plain ndarrays over
the file's mapping, not np.memmap: every slice or gather of an np.memmap makes another memmap,
whose Python-level set-up cost a million-memory recall 1.4 ms over its ~10 000 array operations.
What np.memmap told apart is asked here instead."""

from __future__ import annotations

import mmap

import numpy as np


def mapping_of(array: np.ndarray) -> mmap.mmap | None:
    """The file mapping the array's memory is part of, if any."""
    base = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    return base if isinstance(base, mmap.mmap) else None


def mapped(array: np.ndarray) -> bool:
    """Whether the array's pages are a file's (the page cache's), not the process's own."""
    return mapping_of(array) is not None


def read_at_random(matrix: np.ndarray) -> None:
    """Tell the kernel a mapped vector matrix is read a row here and there (the re-score of a
    shortlist picked with the codes), so that a page fault reads that page, not the 128 KiB
    around it: read-ahead made most of a million vectors resident after a few hundred recalls."""
    found = mapping_of(matrix)
    if found is not None and hasattr(mmap, "MADV_RANDOM"):
        found.madvise(mmap.MADV_RANDOM)
