"""One agent's scoring columns in memory: numpy arrays that recall ranks without SQLite.

Rows are appended, never moved, so that a snapshot (`columns()`) taken under the index lock stays
valid while later writes append past its `rows`; a deleted row is masked until the next load. A
rescore, a new vector and a deletion write a row's slots in place, under a snapshot in use:
worker/recall_index/index.py's `Snapshot` says what a ranking can see of that.

The columns may be memory-mapped copy-on-write from a persisted snapshot
(worker/recall_index/persist.py), with room for appends; the string lookups and the lists
(worker/recall_index/lookups.py, postings.py) are an unchanging base plus a tail in RAM. Access
counts are not kept per row: a memory's count is read from SQLite the first time a recall
returns it and counted here from then on (recall persists them behind its reply).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from handlers.recall.block_bounds import BlockBounds
from handlers.recall.codes import sign_codes, words_for
from handlers.recall.columns import ROLE_CODES, Columns, canonical_json, growth, static_part
from handlers.recall.runs import relink, run_at, runs_of
from handlers.taxonomy import CATEGORY_CODES, SENSITIVITY_CODES, string_list
from handlers.text import tokens
from worker.recall_index.changes import Mark
from worker.recall_index.lookups import Ids, MetadataLookup, SessionCodes, tag_key
from worker.recall_index.mapping import FileRows, mapped
from worker.recall_index.postings import Csr, Postings, SlotLists
from worker.recall_index.strings import Strings

ROW_SQL = (
    "SELECT id, role, session_id, timestamp, importance, confidence, embedding, "
    "embedding_model, content, access_count, metadata, pinned, summary, category, sensitivity, "
    "tags FROM memories"
)
Row = tuple[
    str, str, str | None, int, float, float, bytes | None, str | None, str, int, str | None, int,
    str | None, str, str, str | None,
]  # fmt: skip
# (tenant, agent_id): the same agentId in two tenants is two agents (contract section 15).
AgentKey = tuple[str, str]
COLUMNS = {
    "live": np.bool_, "timestamp": np.int64, "importance": np.float64, "confidence": np.float64,
    "role": np.int8, "session": np.int32, "static": np.float64, "growth": np.float64,
    "pinned": np.bool_, "category": np.int8, "sensitivity": np.int8,
}  # fmt: skip
# Bytes of an agent's Python objects beside its arrays' data (some 60 arrays' headers, the
# lookups' and lists' objects, dicts): 11.6 KB measured with tracemalloc for an agent of one
# memory (tests/test_index_memory.py checks the accounting against tracemalloc).
OVERHEAD = 14_000


def words(row: Row) -> set[str]:
    """The tokens a memory is found by: its content's and its summary's (section 17)."""
    found = set(tokens(row[8]))
    if row[12] is not None:
        found.update(tokens(row[12]))
    return found


def list_keys(row: Row) -> tuple[list[str], list[str]]:
    """The memory's tags and its metadata's `tag_key`s."""
    metadata = []
    if row[10] is not None:
        for key, value in msgspec.json.decode(row[10], type=dict[str, Any]).items():
            metadata.append(tag_key(key, canonical_json(value)))
    return string_list(row[15]), metadata


class AgentIndex:
    """Append-only arrays with a live mask; a deleted row's slot is dropped at the next load."""

    def __init__(self, anchor_ms: int, capacity: int = 64, *, codes: bool = False) -> None:
        self.anchor_ms = anchor_ms
        self.ids = Ids()
        self.live = np.zeros(capacity, dtype=np.bool_)
        self.timestamp = np.zeros(capacity, dtype=np.int64)
        self.importance = np.zeros(capacity, dtype=np.float64)
        self.confidence = np.zeros(capacity, dtype=np.float64)
        self.role = np.zeros(capacity, dtype=np.int8)
        self.session = np.full(capacity, -1, dtype=np.int32)
        self.static = np.zeros(capacity, dtype=np.float64)
        self.growth = np.zeros(capacity, dtype=np.float64)
        self.pinned = np.zeros(capacity, dtype=np.bool_)
        self.category = np.zeros(capacity, dtype=np.int8)
        self.sensitivity = np.zeros(capacity, dtype=np.int8)
        self.access: dict[int, int] = {}  # slot -> count, for the memories recall returned
        self.tag_slots = SlotLists()  # tag -> slots (the section-13 tag filter)
        self.metadata = SlotLists()  # tag_key(key, canonical value) -> slots
        self.tags = MetadataLookup(self.metadata)
        self.session_codes = SessionCodes()
        self.vectors: dict[str, np.ndarray] = {}
        self.has_vector: dict[str, np.ndarray] = {}
        self.postings = Postings()
        self.dead = 0
        self.live_count = 0
        # The change log position this index is complete through (None: unknown).
        self.complete: Mark | None = None
        # Sign codes of the vectors (handlers/recall/codes.py), kept in step with them when
        # recall may use them: model -> (words, capacity) uint64, or None when not kept.
        self.codes: dict[str, np.ndarray] | None = {} if codes else None
        # `static` and `growth` in float32 where codes are kept: the codes path estimates every
        # row's other terms from them, a pass reading half the bytes (Columns.estimates).
        self.estimates: tuple[np.ndarray, np.ndarray] | None = None
        if codes:
            self.estimates = (np.zeros(capacity, np.float32), np.zeros(capacity, np.float32))
        # model -> its vectors in the snapshot this index was opened from, read from the file
        # for a shortlist's re-score (worker/recall_index/mapping.py).
        self.file_rows: dict[str, FileRows] = {}
        # The prior's bounds per block of slots, for the ranking without a query vector.
        self.bounds = BlockBounds()
        # Where each slot's run begins (runs.py), kept in step with live, session and timestamp.
        self.runs = np.zeros(capacity, dtype=np.int32)
        # Rows below this may be in the agent's snapshot on disk (a removal of one is
        # rewritten out of it: worker/recall_index/saver.py).
        self.disk_rows = 0

    def column(self, name: str) -> np.ndarray:
        found: np.ndarray = getattr(self, name)
        return found

    def capacity(self) -> int:
        return len(self.live)

    def _set_scores(self, at: int, timestamp: int, importance: float, confidence: float) -> None:
        self.timestamp[at] = timestamp
        self.importance[at] = importance
        self.confidence[at] = confidence
        self.static[at] = static_part(importance, confidence)
        self.growth[at] = growth(timestamp, self.anchor_ms)
        estimates = self.estimates
        if estimates is not None:
            if at >= len(estimates[0]):  # sized to the rows, not to a snapshot's room
                more = np.zeros(max(16, len(estimates[0])), np.float32)
                estimates = self.estimates = (
                    np.concatenate([estimates[0], more]),
                    np.concatenate([estimates[1], more]),
                )
            estimates[0][at], estimates[1][at] = self.static[at], self.growth[at]

    def _grow(self) -> None:
        """Double every column into RAM (a memory-mapped one included)."""
        capacity = max(16, 2 * self.capacity())
        for name in COLUMNS:
            old = self.column(name)
            new = np.full(capacity, -1 if name == "session" else 0, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        for model, matrix in self.vectors.items():
            grown = np.zeros((capacity, matrix.shape[1]), dtype=np.float32)
            grown[: len(matrix)] = matrix
            self.vectors[model] = grown
            flags = np.zeros(capacity, dtype=np.bool_)
            flags[: len(self.has_vector[model])] = self.has_vector[model]
            self.has_vector[model] = flags
        self.runs = np.concatenate([self.runs, np.zeros(capacity - len(self.runs), np.int32)])
        for model, codes in (self.codes or {}).items():
            wider = np.zeros((codes.shape[0], capacity), dtype=np.uint64)
            wider[:, : codes.shape[1]] = codes
            self.codes[model] = wider  # type: ignore[index]

    def load(self, rows: Iterable[Row]) -> None:
        """Add many rows to an empty index at once: the lookups and lists are gathered in RAM
        and made arrays once (one numpy append per token occurrence was most of a first
        recall's time). Onto an index that holds rows already, they are added one by one."""
        if len(self.ids):
            for row in rows:
                self.upsert(row)
            return
        postings: dict[str, array[int]] = {}
        tag_slots: dict[str, array[int]] = {}
        metadata: dict[str, array[int]] = {}
        codes, self.codes = self.codes, None  # made at the end, all at once
        for row in rows:
            at = self._place(row, new=True, linked=False)  # the runs: made at the end
            if at is None:
                continue
            # get, then create: setdefault(token, array("i")) made an array per occurrence,
            # which cost a 100k load 0.5-0.7 s of CPU (20 occurrences a memory).
            for token in words(row):
                found = postings.get(token)
                if found is None:
                    postings[token] = found = array("i")
                found.append(at)
            tags, keys = list_keys(row)
            for tag in tags:
                tag_slots.setdefault(tag, array("i")).append(at)
            for key in keys:
                metadata.setdefault(key, array("i")).append(at)
        self.ids = Ids(Strings.build(self.ids.tail))
        self.session_codes = SessionCodes(Strings.build(self.session_codes.new_sessions()))
        self.postings = Postings.gathered(postings)
        self.tag_slots = SlotLists(Csr.gathered(tag_slots))
        self.metadata = SlotLists(Csr.gathered(metadata))
        self.tags = MetadataLookup(self.metadata)
        if codes is not None:
            self.keep_codes()
        self.rebuild_bounds()

    def rebuild_bounds(self) -> None:
        """The prior's bounds per block and the runs, over every row, and the float32 estimates
        where codes are kept (after a load or opening a snapshot, whose codes are settled)."""
        get = self.column
        self.bounds.rebuild(get("static"), get("growth"), get("timestamp"), len(self.ids))
        self.runs = runs_of(self.live, self.session, self.timestamp, len(self.ids), self.capacity())
        self.estimates = None
        if self.codes is not None:
            rows = len(self.ids)
            spare = rows + max(16, rows // 8)  # not a snapshot's room: they take RAM
            self.estimates = (np.zeros(spare, np.float32), np.zeros(spare, np.float32))
            self.estimates[0][:rows] = get("static")[:rows]
            self.estimates[1][:rows] = get("growth")[:rows]

    def keep_codes(self) -> None:
        """Make every vector's code (a zero row's is zero) and keep them in step from now on; in
        blocks: 0.25 s a million rows, where one row at a time took 3.4 s."""
        made = {}
        rows = len(self.ids)
        for model, matrix in self.vectors.items():
            codes = np.zeros((words_for(matrix.shape[1]), self.capacity()), dtype=np.uint64)
            for start in range(0, rows, 65_536):
                block = matrix[start : min(rows, start + 65_536)]
                codes[:, start : start + len(block)] = sign_codes(block)
            made[model] = codes
        self.codes = made

    def upsert(self, row: Row, *, new: bool = False) -> None:
        """Add or rescore the row's memory (`new`: the caller knows no slot held it)."""
        at = self._place(row, new=new)
        slot = self.slot_of(row[0]) if at is None else at
        if slot is not None:
            static, grown = float(self.column("static")[slot]), float(self.column("growth")[slot])
            self.bounds.widen(slot, static, grown, row[3])
        if at is None:
            return
        self.postings.add_all(words(row), at)
        tags, keys = list_keys(row)
        for tag in tags:
            self.tag_slots.add(tag, at)
        for key in keys:
            self.metadata.add(key, at)

    def slot_of(self, memory_id: str) -> int | None:
        """The memory's live slot, if it has one."""
        live = self.column("live")
        return next((at for at in self.ids.slots(memory_id) if live[at]), None)

    def _place(self, row: Row, *, new: bool = False, linked: bool = True) -> int | None:
        """Set the row's columns; the slot of a new memory, whose lists the caller adds (None:
        a memory already here, rescored). `new`: the caller knows it is not here (a load);
        not `linked`: the caller makes the runs afterwards."""
        memory_id, role, session_id, timestamp, importance, confidence = row[:6]
        existing = None if new else self.slot_of(memory_id)
        if existing is not None:
            self._set_scores(existing, timestamp, importance, confidence)
            relink(self.runs, self.live, self.session, self.timestamp, len(self.ids), existing)
            self._set_vector(existing, row[6], row[7])
            return None
        at = len(self.ids)
        if at == self.capacity():
            self._grow()
        self._set_scores(at, timestamp, importance, confidence)
        self.role[at] = ROLE_CODES[role]
        self.session[at] = -1 if session_id is None else self.session_codes.code(session_id)
        self._set_vector(at, row[6], row[7])
        self.pinned[at] = bool(row[11])
        self.category[at] = CATEGORY_CODES[row[13]]
        self.sensitivity[at] = SENSITIVITY_CODES[row[14]]
        self.live[at] = True
        self.live_count += 1
        if linked:
            self.runs[at] = run_at(self.runs, self.live, self.session, self.timestamp, at)
        self.ids.append(memory_id)  # last: a snapshot's `rows` counts it from now on
        return at

    def _set_vector(self, at: int, blob: bytes | None, model: str | None) -> None:
        if blob is None or model is None:
            return
        vector = np.frombuffer(blob, dtype=np.float32)
        if model not in self.vectors:
            self.vectors[model] = np.zeros((self.capacity(), len(vector)), dtype=np.float32)
            self.has_vector[model] = np.zeros(self.capacity(), dtype=np.bool_)
        if self.vectors[model].shape[1] == len(vector):
            self.vectors[model][at] = vector
            self.has_vector[model][at] = True
            if model in self.file_rows:
                self.file_rows[model].rewrote(at)
            if self.codes is not None:
                if model not in self.codes:
                    shape = (words_for(len(vector)), self.capacity())
                    self.codes[model] = np.zeros(shape, dtype=np.uint64)
                self.codes[model][:, at] = sign_codes(vector[None])[:, 0]

    def live_slot(self, memory_id: str, at: int) -> int | None:
        """The memory's live slot, given the slot a snapshot found it at: that one while it is
        live (a slot never holds another id), else a lookup (it moved, or was removed)."""
        return at if self.column("live")[at] else self.slot_of(memory_id)

    def unknown_access(self, ranked: list[tuple[str, int]]) -> list[str]:
        """The ids among these (id, slot) whose access count is not held here yet."""
        return [
            memory_id
            for memory_id, slot in ranked
            if (at := self.live_slot(memory_id, slot)) is not None and at not in self.access
        ]

    def count_access(self, ranked: list[tuple[str, int]], stored: dict[str, int]) -> dict[str, int]:
        """Add one access to each (live) memory, given as (id, slot); their counts after it.
        `stored` holds the counts SQLite had for those whose count is not held here yet."""
        counts = {}
        for memory_id, slot in ranked:
            at = self.live_slot(memory_id, slot)
            if at is not None:
                count = self.access.get(at)
                count = stored.get(memory_id, 0) if count is None else count
                self.access[at] = counts[memory_id] = count + 1
        return counts

    def remove(self, memory_id: str) -> bool:
        """Mask the memory's row; whether that row may be on disk (see `disk_rows`)."""
        at = self.slot_of(memory_id)
        if at is None:
            return False
        self.column("live")[at] = False
        relink(self.runs, self.live, self.session, self.timestamp, len(self.ids), at)
        self.access.pop(at, None)
        self.dead += 1
        self.live_count -= 1
        return at < self.disk_rows

    def columns(self) -> Columns:
        """A snapshot to rank without the lock: appends after it lie beyond its `rows`; rows
        below it share their slots with later in-place writes (worker/index.Snapshot)."""
        get = self.column
        return Columns(
            rows=len(self.ids),
            ids=self.ids,
            live=get("live"),
            timestamp=get("timestamp"),
            importance=get("importance"),
            confidence=get("confidence"),
            role=get("role"),
            session=get("session"),
            session_codes=self.session_codes,
            vectors=dict(self.vectors),
            has_vector=dict(self.has_vector),
            postings=self.postings,
            pinned=get("pinned"),
            tags=self.tags,
            category=get("category"),
            sensitivity=get("sensitivity"),
            tag_slots=self.tag_slots,
            static=get("static"),
            growth=get("growth"),
            anchor_ms=self.anchor_ms,
            codes=dict(self.codes or {}),
            slots_of=self.ids.slots,
            bounds=self.bounds,
            vector_rows=self.vector_rows if self.file_rows else None,
            estimates=self.estimates,
            runs=self.runs,
        )

    def vector_rows(self, model: str, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        matrix = self.vectors[model]
        found = self.file_rows.get(model)
        return matrix[slots] if found is None else found.read(slots, matrix)

    def arrays(self) -> Iterator[np.ndarray]:
        """Every array it holds (some may be a snapshot file's mapping)."""
        yield from (self.column(name) for name in COLUMNS)
        yield from self.vectors.values()
        yield from self.has_vector.values()
        yield from (self.codes or {}).values()
        yield from self.estimates or ()
        yield self.runs
        yield from (getattr(self.bounds, name) for name in self.bounds.NAMES)
        yield from self.ids.base.arrays().values()
        yield from self.session_codes.base.arrays().values()
        yield from (found.rewritten for found in self.file_rows.values())

    def recalled(self) -> tuple[int, int]:
        """What recalls add to it (access counts held, postings' lookups kept): while this stays
        the same, so does `nbytes` unless a write changed the agent."""
        return len(self.access), self.postings.kept()

    def nbytes(self) -> int:
        """What it holds in RAM, as the index's memory budget counts it: its arrays (a
        memory-mapped one's pages are the page cache's), lists and lookups, and OVERHEAD for
        its Python objects, so that a small agent is counted as what it costs."""
        size = sum(int(a.nbytes) for a in self.arrays() if not mapped(a))
        size += self.postings.nbytes() + self.tag_slots.nbytes() + self.metadata.nbytes()
        size += self.ids.nbytes() + self.session_codes.nbytes() + 100 * len(self.access)
        return int(size) + OVERHEAD
