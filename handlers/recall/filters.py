"""Recall's filters (pinned, metadata, the taxonomy, since/until, roles, session, and the ids
left out), two ways: `filter_mask` over every row of a snapshot, for the rankings that score
them all, and `Filter` on given rows, for the ranking that reads only the rows that can win
(topk.py). The two must keep the same rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from msgspec import UNSET

from handlers.recall.columns import ROLE_CODES, Columns, canonical_json
from handlers.recall.slots import Rows, member, slot_array
from handlers.taxonomy import CATEGORY_CODES, SENSITIVITY_CODES, categories_of, taxonomy_mask
from schema.memory import RecallRequest


def tag_mask(columns: Columns, metadata: dict[str, Any]) -> npt.NDArray[np.bool_]:
    """The rows whose metadata has every key of the filter with an equal value."""
    rows = columns.rows
    mask = np.ones(rows, dtype=np.bool_)
    for key, value in metadata.items():
        slots = np.asarray(columns.tags.get((key, canonical_json(value)), ()), dtype=np.int64)
        has = np.zeros(rows, dtype=np.bool_)
        has[slots[slots < rows]] = True
        mask &= has
    return mask


def filter_mask(
    columns: Columns, req: RecallRequest, excluded: set[str] | frozenset[str]
) -> npt.NDArray[np.bool_] | None:
    """Which of the snapshot's rows pass the request's filters and are not `excluded` (ids);
    None when none can (a session the agent has no memory in)."""
    rows = columns.rows
    eligible = columns.live[:rows].copy()
    if req.pinned is not UNSET:
        eligible &= columns.pinned[:rows] == req.pinned
    if req.metadata is not UNSET:
        eligible &= tag_mask(columns, req.metadata)
    taxonomy = taxonomy_mask(req, rows, columns.category, columns.sensitivity, columns.tag_slots)
    if taxonomy is not None:
        eligible &= taxonomy
    if excluded:
        eligible[excluded_slots(columns, excluded)] = False
    if req.since is not UNSET:
        eligible &= columns.timestamp[:rows] >= req.since
    if req.until is not UNSET:
        eligible &= columns.timestamp[:rows] < req.until
    if req.roles is not UNSET:
        eligible &= np.isin(columns.role[:rows], [ROLE_CODES[role] for role in req.roles])
    if req.session_id is not UNSET:
        code = columns.session_codes.get(req.session_id)
        if code is None:
            return None
        eligible &= columns.session[:rows] == code
    return eligible


def excluded_slots(columns: Columns, excluded: set[str] | frozenset[str]) -> npt.NDArray[np.int64]:
    """The slots of the excluded ids in this snapshot, ascending."""
    if not excluded:
        return np.zeros(0, dtype=np.int64)
    if columns.slots_of is not None:
        slots_of = columns.slots_of
        found = [at for memory_id in excluded for at in slots_of(memory_id)]
    else:
        found = [
            at for at, memory_id in enumerate(columns.ids[: columns.rows]) if memory_id in excluded
        ]
    slots = np.array(sorted(found), dtype=np.int64)
    return slots[slots < columns.rows]


class Filter:
    """`filter_mask`'s filters, applied to the rows given rather than to the whole agent (the
    excluded as slots, the session as its code)."""

    def __init__(
        self,
        columns: Columns,
        req: RecallRequest,
        excluded: Rows,
        session_code: int | None,
    ) -> None:
        self.columns, self.req = columns, req
        self.excluded, self.session_code = excluded, session_code
        rows = columns.rows
        self.metadata: list[Rows] = []
        if req.metadata is not UNSET:
            tags: Mapping[tuple[str, str], Sequence[int] | npt.NDArray[np.int32]] = columns.tags
            for key, value in req.metadata.items():
                self.metadata.append(slot_array(tags.get((key, canonical_json(value)), ()), rows))
        self.tagged: Rows | None = None
        if req.tags is not UNSET:
            found = [slot_array(columns.tag_slots.get(tag, ()), rows) for tag in req.tags]
            self.tagged = np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)
        categories = categories_of(req)
        self.categories = None if categories is None else [CATEGORY_CODES[c] for c in categories]

    def driver(self) -> Rows | None:
        """The only rows that can pass, when a slot-list filter names them (else None)."""
        lists = self.metadata + ([] if self.tagged is None else [self.tagged])
        if not lists:
            return None
        smallest = min(lists, key=len)
        return smallest

    def passing(self, rows: Rows) -> npt.NDArray[np.bool_]:
        c, req = self.columns, self.req
        keep: npt.NDArray[np.bool_] = c.live[rows]
        if req.pinned is not UNSET:
            keep &= c.pinned[rows] == req.pinned
        for slots in self.metadata:
            keep &= member(slots, rows, ascending=True)
        if self.categories is not None:
            keep &= np.isin(c.category[rows], self.categories)
        if req.max_sensitivity is not UNSET:
            keep &= c.sensitivity[rows] <= SENSITIVITY_CODES[req.max_sensitivity]
        if self.tagged is not None:
            keep &= member(self.tagged, rows, ascending=True)
        if len(self.excluded):
            keep &= ~member(self.excluded, rows, ascending=True)
        if req.since is not UNSET or req.until is not UNSET:
            timestamp = c.timestamp[rows]
            if req.since is not UNSET:
                keep &= timestamp >= req.since
            if req.until is not UNSET:
                keep &= timestamp < req.until
        if req.roles is not UNSET:
            keep &= np.isin(c.role[rows], [ROLE_CODES[role] for role in req.roles])
        if self.session_code is not None:
            keep &= c.session[rows] == self.session_code
        return keep
