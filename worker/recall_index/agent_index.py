"""One agent's scoring columns in memory: numpy arrays that recall ranks without SQLite.

Rows are appended, never moved, so that a snapshot (`columns()`) taken under the index lock stays
valid while later writes append past its `rows`; a deleted row is masked until the next load. A
rescore, a new vector and a deletion write a row's slots in place, under a snapshot in use:
worker/recall_index/index.py's `Snapshot` says what a ranking can see of that.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any

import msgspec
import numpy as np

from handlers.recall import ROLE_CODES, Columns, canonical_json, growth, static_part
from handlers.taxonomy import CATEGORY_CODES, SENSITIVITY_CODES, string_list
from handlers.text import tokens
from handlers.topk_rows import BlockBounds
from worker.recall_index.postings import GrowingPostings, PostingLists

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


def words(row: Row) -> set[str]:
    """The tokens a memory is found by: its content's and its summary's (section 17)."""
    found = set(tokens(row[8]))
    if row[12] is not None:
        found.update(tokens(row[12]))
    return found


class AgentIndex:
    """Append-only arrays with a live mask; a deleted row's slot is dropped at the next load."""

    def __init__(self, anchor_ms: int) -> None:
        self.anchor_ms = anchor_ms
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        capacity = 64
        self.live = np.zeros(capacity, dtype=np.bool_)
        self.timestamp = np.zeros(capacity, dtype=np.int64)
        self.importance = np.zeros(capacity, dtype=np.float64)
        self.confidence = np.zeros(capacity, dtype=np.float64)
        self.role = np.zeros(capacity, dtype=np.int8)
        self.session = np.full(capacity, -1, dtype=np.int32)
        self.static = np.zeros(capacity, dtype=np.float64)
        self.growth = np.zeros(capacity, dtype=np.float64)
        # Access counts live here first: a recall counts its accesses in memory and answers at
        # once; the database catches up in the writer's next batch.
        self.access = np.zeros(capacity, dtype=np.int64)
        self.pinned = np.zeros(capacity, dtype=np.bool_)
        # The taxonomy filters' columns (codes of handlers/taxonomy.py) and the tags' lookup:
        # tag -> slots, append-only like the metadata lookup below.
        self.category = np.zeros(capacity, dtype=np.int8)
        self.sensitivity = np.zeros(capacity, dtype=np.int8)
        self.tag_slots: dict[str, array[int]] = {}
        # The metadata filter's lookup: (top-level key, canonical JSON value) -> the slots of
        # the memories that have it. Append-only, like the slots, so that a ranking reading it
        # without the lock sees at worst slots beyond its snapshot, which it ignores.
        self.tags: dict[tuple[str, str], array[int]] = {}
        self.session_codes: dict[str, int] = {}
        self.vectors: dict[str, np.ndarray] = {}
        self.has_vector: dict[str, np.ndarray] = {}
        self.postings = GrowingPostings()
        self.dead = 0
        # The prior's bounds per block of slots, for the ranking without a query vector.
        self.bounds = BlockBounds()

    _COLUMNS = (
        "live", "timestamp", "importance", "confidence", "role", "session", "static", "growth",
        "access", "pinned", "category", "sensitivity",
    )  # fmt: skip

    def _set_scores(self, at: int, timestamp: int, importance: float, confidence: float) -> None:
        self.timestamp[at] = timestamp
        self.importance[at] = importance
        self.confidence[at] = confidence
        self.static[at] = static_part(importance, confidence)
        self.growth[at] = growth(timestamp, self.anchor_ms)

    def _grow(self) -> None:
        capacity = 2 * len(self.live)
        for name in self._COLUMNS:
            old = getattr(self, name)
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

    def load(self, rows: Iterable[Row]) -> None:
        """Add many rows at once, their postings gathered first and made arrays once: one
        numpy append per token occurrence was most of a first recall's time."""
        gathered: PostingLists = {}
        for row in rows:
            at = self._place(row)
            if at is None:
                continue
            for token in words(row):
                found = gathered.get(token)
                if found is None:
                    gathered[token] = found = array("i")
                found.append(at)
        self.postings.extend(gathered)
        self.bounds.rebuild(self.static, self.growth, self.timestamp, len(self.ids))

    def upsert(self, row: Row) -> None:
        at = self._place(row)
        if at is not None:
            for token in words(row):
                self.postings.add(token, at)
        slot = self.row_of[row[0]]
        self.bounds.widen(slot, float(self.static[slot]), float(self.growth[slot]), row[3])

    def _place(self, row: Row) -> int | None:
        """Set the row's columns; the slot of a new memory, whose postings the caller adds
        (None: a memory already here, rescored)."""
        memory_id, role, session_id, timestamp, importance, confidence = row[:6]
        existing = self.row_of.get(memory_id)
        if existing is not None:
            self._set_scores(existing, timestamp, importance, confidence)
            self._set_vector(existing, row[6], row[7])
            return None
        at = len(self.ids)
        if at == len(self.live):
            self._grow()
        self.ids.append(memory_id)
        self.row_of[memory_id] = at
        self.live[at] = True
        self._set_scores(at, timestamp, importance, confidence)
        self.access[at] = row[9]
        self.role[at] = ROLE_CODES[role]
        if session_id is not None:
            code = self.session_codes.setdefault(session_id, len(self.session_codes))
            self.session[at] = code
        self._set_vector(at, row[6], row[7])
        self.pinned[at] = bool(row[11])
        self.category[at] = CATEGORY_CODES[row[13]]
        self.sensitivity[at] = SENSITIVITY_CODES[row[14]]
        for tag in string_list(row[15]):
            self.tag_slots.setdefault(tag, array("i")).append(at)
        if row[10] is not None:
            for key, value in msgspec.json.decode(row[10], type=dict[str, Any]).items():
                self.tags.setdefault((key, canonical_json(value)), array("i")).append(at)
        return at

    def _set_vector(self, at: int, blob: bytes | None, model: str | None) -> None:
        if blob is None or model is None:
            return
        vector = np.frombuffer(blob, dtype=np.float32)
        if model not in self.vectors:
            self.vectors[model] = np.zeros((len(self.live), len(vector)), dtype=np.float32)
            self.has_vector[model] = np.zeros(len(self.live), dtype=np.bool_)
        if self.vectors[model].shape[1] == len(vector):
            self.vectors[model][at] = vector
            self.has_vector[model][at] = True

    def count_access(self, memory_ids: list[str]) -> dict[str, int]:
        """Add one access to each (live) memory; their counts after it."""
        counts = {}
        for memory_id in memory_ids:
            at = self.row_of.get(memory_id)
            if at is not None:
                self.access[at] += 1
                counts[memory_id] = int(self.access[at])
        return counts

    def remove(self, memory_id: str) -> None:
        at = self.row_of.pop(memory_id, None)
        if at is not None:
            self.live[at] = False
            self.dead += 1

    def columns(self) -> Columns:
        """A snapshot to rank without the lock: appends after it lie beyond its `rows`; rows
        below it share their slots with later in-place writes (worker/index.Snapshot)."""
        return Columns(
            rows=len(self.ids),
            ids=self.ids,
            live=self.live,
            timestamp=self.timestamp,
            importance=self.importance,
            confidence=self.confidence,
            role=self.role,
            session=self.session,
            session_codes=self.session_codes,
            vectors=dict(self.vectors),
            has_vector=dict(self.has_vector),
            postings=self.postings,
            pinned=self.pinned,
            tags=self.tags,
            category=self.category,
            sensitivity=self.sensitivity,
            tag_slots=self.tag_slots,
            static=self.static,
            growth=self.growth,
            anchor_ms=self.anchor_ms,
            row_of=self.row_of,
            bounds=self.bounds,
        )

    def nbytes(self) -> int:
        size = sum(getattr(self, name).nbytes for name in self._COLUMNS)
        size += sum(m.nbytes for m in self.vectors.values())
        size += self.postings.nbytes()
        size += sum(100 + 4 * len(slots) for slots in self.tags.values())
        size += sum(100 + 4 * len(slots) for slots in self.tag_slots.values())
        return int(size) + 120 * len(self.ids)
