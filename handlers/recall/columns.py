"""What the ranking engine reads of one agent: its memories as parallel columns (`Columns`), and
what describes a row in them, the score's constant part and its growth with time, the role codes
and the canonical JSON of a metadata value.

The recall index (worker/recall_index/) builds and keeps these columns in step with the writer;
everything in handlers/recall/ ranks on them without a database.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from handlers.recall.block_bounds import BlockBounds
from handlers.recall.slots import Dense

WEEK_MS = 604_800_000.0
ROLE_CODES = {"user": 0, "assistant": 1, "system": 2}

# Rows of a posting: int32 in the recall index (worker/recall_index/postings.py).
Posting = npt.NDArray[np.int32]


class Postings(Protocol):
    """An agent's keyword postings: a token's rows (ascending), the tokens sharing a stem, and a
    long posting's packed bits (worker/recall_index/postings.py)."""

    def get(self, token: str) -> Posting | None: ...

    def variants(self, stemmed: str) -> Sequence[str]: ...

    def dense(self, token: str) -> Dense | None: ...


@dataclass
class Columns:
    """A snapshot of one agent's memories as parallel arrays: the first `rows` entries count,
    and rows with live False are deleted. The writer may append beyond `rows` meanwhile."""

    rows: int
    ids: Sequence[str]
    live: npt.NDArray[np.bool_]
    timestamp: npt.NDArray[np.int64]
    importance: npt.NDArray[np.float64]
    confidence: npt.NDArray[np.float64]
    role: npt.NDArray[np.int8]
    session: npt.NDArray[np.int32]
    session_codes: Mapping[str, int]
    vectors: dict[str, npt.NDArray[np.float32]]
    has_vector: dict[str, npt.NDArray[np.bool_]]
    postings: Postings
    # Precomputed per row so that a recall costs a few vector operations: the score's constant
    # part, 0.10 * importance + 0.05 * confidence, and 2 ** ((timestamp - anchor_ms) / week),
    # which times 0.5 ** ((now - anchor_ms) / week) is the recency 0.5 ** ((now - timestamp) /
    # week) (capped at 1 for timestamps in the future).
    static: npt.NDArray[np.float64]
    growth: npt.NDArray[np.float64]
    anchor_ms: int
    pinned: npt.NDArray[np.bool_]
    # (top-level metadata key, canonical JSON value) -> slots: the metadata filter's lookup.
    tags: Mapping[tuple[str, str], Sequence[int] | npt.NDArray[np.int32]]
    # The taxonomy (handlers/taxonomy.py codes) and tag -> slots, the section-13 filters' own.
    category: npt.NDArray[np.int8]
    sensitivity: npt.NDArray[np.int8]
    tag_slots: Mapping[str, Sequence[int] | npt.NDArray[np.int32]]
    # Sign codes of the vectors, per model (codes.py): only where the worker
    # keeps them (MEMORY_WORKER_VECTOR_INDEX other than `exact`).
    codes: dict[str, npt.NDArray[np.uint64]] = field(default_factory=dict)
    # What the ranking without a query vector (topk.py) reads besides: id -> its
    # slots (to find the excluded ids' slots), and the prior's bounds per block of slots.
    slots_of: Callable[[str], Iterable[int]] | None = None
    bounds: BlockBounds | None = None
    # (model, slots) -> those rows of the model's vectors, read without mapping them in (a
    # snapshot's file: worker/recall_index/mapping.py FileRows); None: index `vectors`.
    vector_rows: Callable[[str, npt.NDArray[np.int64]], npt.NDArray[np.float32]] | None = None
    # `static` and `growth` as float32, where the index keeps them for the codes path's estimate.
    estimates: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]] | None = None
    # Where each slot's run of memories stored as they were said begins (runs.py), where the
    # index keeps them; None: the expanded mode finds them itself.
    runs: npt.NDArray[np.int32] | None = None


def canonical_json(value: Any) -> str:
    """One spelling per JSON value as the metadata filter compares them (handlers/listing.py
    same_json): object keys sorted, integral numbers as integers, `true` apart from `1`."""

    def normal(item: Any) -> Any:
        if isinstance(item, float) and item.is_integer():
            return int(item)
        if isinstance(item, dict):
            return {key: normal(v) for key, v in item.items()}
        if isinstance(item, list):
            return [normal(v) for v in item]
        return item

    return msgspec.json.encode(normal(value), order="sorted").decode()


def static_part(importance: float, confidence: float) -> float:
    """A row's `static` column: the score's part that does not change with time."""
    return 0.10 * importance + 0.05 * confidence


def growth(timestamp: int, anchor_ms: int) -> float:
    """A row's `growth` column, infinite where 2 ** exponent would overflow a float."""
    exponent = (timestamp - anchor_ms) / WEEK_MS
    return math.inf if exponent > 1023 else 2.0**exponent
