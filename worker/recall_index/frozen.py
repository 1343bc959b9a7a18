"""What a snapshot of an agent's index writes (worker/recall_index/persist.py), taken under the
index lock, and what writing it keeps alive and allocates: the index's memory budget counts
both while the saver writes (worker/recall_index/index.py `saving`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from worker.recall_index.agent_index import COLUMNS, AgentIndex, AgentKey
from worker.recall_index.changes import Mark
from worker.recall_index.compact import CHUNK_BYTES
from worker.recall_index.mapping import FileRows, mapped
from worker.recall_index.postings import Csr, Slots
from worker.recall_index.strings import Strings

CHUNK = CHUNK_BYTES  # bytes written at a time
# What a token takes while the stems of a snapshot's tokens are made (compact.stems_of: a dict
# of lists, then an array per stem): 730 bytes measured with tracemalloc.
STEM_BYTES = 800


@dataclass
class Frozen:
    """What a snapshot writes, taken under the index lock in a few microseconds per tail entry:
    references to the columns (rows below `rows` may change in place while they are written:
    each such change is logged after `mark` and replayed when the snapshot is opened), the
    bases (never changed) and copies of the tails."""

    key: AgentKey
    mark: Mark
    rows: int
    anchor_ms: int
    live: np.ndarray  # a copy of the live mask's first `rows`: which rows are written
    columns: dict[str, np.ndarray]
    vectors: dict[str, tuple[np.ndarray, np.ndarray]]
    ids: tuple[Strings, list[str]]
    sessions: tuple[Strings, list[str]]
    postings: tuple[Csr, Csr, dict[str, Slots]]
    lists: dict[str, tuple[Csr, dict[str, Slots]]] = field(default_factory=dict)
    codes: dict[str, np.ndarray] = field(default_factory=dict)  # model -> (words, capacity)
    # model -> the vectors of the snapshot the agent was opened from, read from that file
    # rather than through its mapping (mapping.py `FileRows.blocks`).
    file_rows: dict[str, FileRows] = field(default_factory=dict)

    def _lists(self) -> Iterator[np.ndarray]:
        """The arrays of its strings and lists, bases and tails."""
        for strings in (self.ids[0], self.sessions[0], self.postings[0].keys):
            yield from strings.arrays().values()
        for base, tail in ((self.postings[0], self.postings[2]), *self.lists.values()):
            yield from (*base.keys.arrays().values(), base.starts, base.values, *tail.values())
        yield from (*self.postings[1].keys.arrays().values(), self.postings[1].values)

    def nbytes(self) -> int:
        """What it keeps alive in RAM (a memory-mapped array's pages are the page cache's)."""
        arrays = [*self.columns.values(), *self.codes.values(), *self._lists(), self.live]
        arrays += [array for pair in self.vectors.values() for array in pair]
        tails = 100 * (len(self.ids[1]) + len(self.sessions[1]))
        return sum(int(a.nbytes) for a in arrays if not mapped(a)) + tails

    def transient(self) -> int:
        """About the most that writing it allocates at once (`_arrays`): merged copies of its
        strings and lists where they have a tail, twice where dead rows are compacted away,
        with the stems made again from every token (Python objects, STEM_BYTES a token); the
        renumbering, and the chunks of the rows kept. Columns, vectors and codes are streamed
        from where they are: nothing of them is copied without dead rows."""
        dead = not bool(self.live.all())
        copies = 2 if dead else 1
        size = 0
        for strings, added in (self.ids, self.sessions):
            if added or dead:
                size += copies * (_bytes(strings.arrays().values()) + 100 * len(added))
        tokens, stems, tail = self.postings
        for base, slots in ((tokens, tail), *self.lists.values()):
            if slots or dead:
                size += copies * (_bytes(base.arrays("").values()) + _bytes(slots.values()))
                size += 200 * len(slots)
        if tail or dead:  # the stems of the new tokens, or of every token when compacted
            made = len(tail) + (len(tokens.keys) if dead else 0)
            size += _bytes(stems.arrays("").values()) + STEM_BYTES * made
        if dead:
            rows = [*self.columns.values(), *(matrix for matrix, _ in self.vectors.values())]
            chunk = min(CHUNK, max((int(a[: self.rows].nbytes) for a in rows), default=0))
            size += 12 * self.rows + chunk
        return size


def _bytes(arrays: Iterable[np.ndarray]) -> int:
    return sum(int(array.nbytes) for array in arrays)


def freeze(key: AgentKey, index: AgentIndex, mark: Mark) -> Frozen:
    rows = len(index.ids)
    return Frozen(
        key=key,
        mark=mark,
        rows=rows,
        anchor_ms=index.anchor_ms,
        live=index.column("live")[:rows].copy(),
        columns={name: index.column(name) for name in COLUMNS},
        vectors={m: (v, index.has_vector[m]) for m, v in index.vectors.items()},
        ids=(index.ids.base, list(index.ids.tail)),
        sessions=(index.session_codes.base, index.session_codes.new_sessions()),
        postings=(index.postings.base, index.postings.stems, index.postings.tail.frozen()),
        lists={
            "tag_slots": (index.tag_slots.base, index.tag_slots.tail.frozen()),
            "metadata": (index.metadata.base, index.metadata.tail.frozen()),
        },
        codes=dict(index.codes or {}),
        file_rows=dict(index.file_rows),
    )
