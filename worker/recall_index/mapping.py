"""Arrays opened from a snapshot's files (worker/recall_index/persist.py) are plain ndarrays over
the file's mapping, not np.memmap: every slice or gather of an np.memmap makes another memmap,
whose Python-level set-up cost a million-memory recall 1.4 ms over its ~10 000 array operations.
What np.memmap told apart is asked here instead. A large snapshot's vectors are also read with
pread where a recall re-scores a shortlist (`FileRows`)."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt


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


class FileRows:
    """A snapshot's vector rows read with pread, for the re-score of a shortlist: rows a recall
    touched through the mapping stayed mapped, in the worker's RSS, which after a few hundred
    recalls held most of a million vectors (1.7 GB); a pread copies the row from the page cache
    and leaves nothing mapped, at the same cost (2.5 ms a thousand rows against 2.7 ms gathered
    through the mapping, page cache warm). A row whose vector was written since the snapshot
    was opened is not the file's any more: `rewrote` marks it, and `read` takes it from the
    index's own matrix."""

    def __init__(self, path: Path, rows: int, dimensions: int) -> None:
        with open(path, "rb") as file:
            version = np.lib.format.read_magic(file)
            if version == (1, 0):
                np.lib.format.read_array_header_1_0(file)
            else:
                np.lib.format.read_array_header_2_0(file)
            self._offset = file.tell()
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115  # closed with this object
        self.rows, self.dimensions = rows, dimensions
        self._row_bytes = 4 * dimensions
        self.rewritten = np.zeros(rows, dtype=np.bool_)

    def rewrote(self, at: int) -> None:
        if at < self.rows:
            self.rewritten[at] = True

    def read(self, slots: npt.NDArray[np.int64], matrix: np.ndarray) -> npt.NDArray[np.float32]:
        """matrix[slots], the rows the file holds as they are read from it."""
        on_file = slots < self.rows
        on_file[on_file] = ~self.rewritten[slots[on_file]]
        found = np.empty((len(slots), self.dimensions), dtype=np.float32)
        if not on_file.all():
            found[~on_file] = matrix[slots[~on_file]]
        descriptor, size = self._file.fileno(), self._row_bytes
        where = (self._offset + slots[on_file] * size).tolist()
        chunks = [os.pread(descriptor, size, at) for at in where]
        if chunks:
            read = np.frombuffer(b"".join(chunks), dtype=np.float32)
            if len(read) != int(on_file.sum()) * self.dimensions:
                raise OSError("a snapshot's vector file is shorter than it was written")
            found[on_file] = read.reshape(-1, self.dimensions)
        return found

    def span(self, start: int, stop: int, matrix: np.ndarray) -> npt.NDArray[np.float32]:
        """matrix[start:stop], the rows the file holds (and were not rewritten) read with one
        pread, so that writing a snapshot leaves nothing of them mapped in the process."""
        found = np.empty((stop - start, self.dimensions), dtype=np.float32)
        end = max(start, min(stop, self.rows))
        if end > start:
            size = (end - start) * self._row_bytes
            data = os.pread(self._file.fileno(), size, self._offset + start * self._row_bytes)
            if len(data) != size:
                raise OSError("a snapshot's vector file is shorter than it was written")
            found[: end - start] = np.frombuffer(data, dtype=np.float32).reshape(
                -1, self.dimensions
            )
            again = np.flatnonzero(self.rewritten[start:end]) + start
            found[again - start] = matrix[again]
        found[end - start :] = matrix[end:stop]
        return found

    def blocks(
        self, matrix: np.ndarray, rows: int, kept: npt.NDArray[np.int64] | None, size: int
    ) -> Iterator[npt.NDArray[np.float32]]:
        """matrix[:rows] (its rows `kept`, when given) in blocks of about `size` bytes."""
        step = max(1, size // self._row_bytes)
        if kept is None:
            for start in range(0, rows, step):
                yield self.span(start, min(rows, start + step), matrix)
            return
        for start in range(0, len(kept), step):
            slots = kept[start : start + step]
            low = int(slots[0])
            yield self.span(low, int(slots[-1]) + 1, matrix)[slots - low]
