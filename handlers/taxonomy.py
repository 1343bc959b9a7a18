"""A memory's summary and taxonomy (contract sections 13 and 17): the checks its types cannot
say, how tags and flags are stored, and what the filters over them pass.

`tags` and `flags` are JSON arrays of strings in their columns, NULL when empty; replies show
`[]` then. The recall index (worker/recall_index/) holds the taxonomy as small integer codes,
in the orders below, so that a filter is an array mask.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
from msgspec import UNSET, UnsetType

from schema.errors import InvalidRequest, PayloadTooLarge
from schema.life import Filters
from schema.taxonomy import CATEGORIES, MAX_SUMMARY_BYTES, SENSITIVITIES

CATEGORY_CODES: dict[str, int] = {name: code for code, name in enumerate(CATEGORIES)}
SENSITIVITY_CODES: dict[str, int] = {name: code for code, name in enumerate(SENSITIVITIES)}


def check_summary(summary: str | UnsetType, *, clears: bool = False) -> None:
    """At most 1024 bytes of UTF-8 and not blank; `clears`: the empty string is allowed (an
    update's way to remove the summary)."""
    if summary is UNSET or (clears and summary == ""):
        return
    if not summary.strip():
        hint = ' (`""` removes it)' if clears else ""
        raise InvalidRequest(f"summary must not be blank{hint} (at `$.summary`)")
    size = len(summary.encode("utf-8", errors="surrogatepass"))
    if size > MAX_SUMMARY_BYTES:
        raise PayloadTooLarge(
            f"summary is {size} bytes, more than the limit of {MAX_SUMMARY_BYTES} (at `$.summary`)"
        )


def tags_column(tags: list[str] | UnsetType) -> str | None:
    """The column's value: repeats collapse (first place kept); NULL when there are none."""
    if tags is UNSET or not tags:
        return None
    return msgspec.json.encode(list(dict.fromkeys(tags))).decode()


def string_list(column: Any) -> list[str]:
    """A tags or flags column as the list replies carry (`[]` for NULL)."""
    if column is None:
        return []
    return msgspec.json.decode(str(column), type=list[str])


def categories_of(req: Filters) -> list[str] | None:
    """The categories a filter passes (one or a list given), or None: every category."""
    if req.category is UNSET:
        return None
    return [req.category] if isinstance(req.category, str) else list(req.category)


def sensitivities_of(req: Filters) -> list[str] | None:
    """The sensitivities up to `maxSensitivity`, or None: every one."""
    if req.max_sensitivity is UNSET:
        return None
    return list(SENSITIVITIES[: SENSITIVITY_CODES[req.max_sensitivity] + 1])


def taxonomy_sql(req: Filters) -> tuple[str, list[Any]]:
    """The taxonomy filters as SQL (` AND ...`) and parameters: category, tags (any of),
    maxSensitivity."""
    where, params = "", list[Any]()
    categories = categories_of(req)
    if categories is not None:
        where += f" AND category IN ({','.join('?' * len(categories))})"
        params += categories
    if req.tags is not UNSET:
        where += (
            " AND tags IS NOT NULL AND EXISTS (SELECT 1 FROM json_each(tags) "
            f"WHERE value IN ({','.join('?' * len(req.tags))}))"
        )
        params += req.tags
    allowed = sensitivities_of(req)
    if allowed is not None:
        where += f" AND sensitivity IN ({','.join('?' * len(allowed))})"
        params += allowed
    return where, params


def taxonomy_mask(
    req: Filters,
    rows: int,
    category: npt.NDArray[np.int8],
    sensitivity: npt.NDArray[np.int8],
    tag_slots: Mapping[str, Sequence[int] | npt.NDArray[np.int32]],
) -> npt.NDArray[np.bool_] | None:
    """The rows of the recall index's columns that pass the taxonomy filters; None when none
    is given."""
    mask: npt.NDArray[np.bool_] | None = None

    def narrow(passing: npt.NDArray[np.bool_]) -> None:
        nonlocal mask
        mask = passing if mask is None else mask & passing

    categories = categories_of(req)
    if categories is not None:
        narrow(np.isin(category[:rows], [CATEGORY_CODES[name] for name in categories]))
    if req.max_sensitivity is not UNSET:
        narrow(sensitivity[:rows] <= SENSITIVITY_CODES[req.max_sensitivity])
    if req.tags is not UNSET:
        tagged = np.zeros(rows, dtype=np.bool_)
        for tag in req.tags:
            slots = np.asarray(tag_slots.get(tag, ()), dtype=np.int64)
            tagged[slots[slots < rows]] = True
        narrow(tagged)
    return mask
