"""Limits that the struct types cannot express: how deep metadata may nest, how large it may
be. They live beside the wire structs so that every trigger refuses the same way."""

from __future__ import annotations

from typing import Any

from schema.errors import InvalidRequest

MAX_METADATA_BYTES = 16 * 1024
MAX_NESTING = 64


def nesting_depth(value: Any) -> int:
    """How deeply objects and arrays nest in a decoded JSON value (a scalar is 0)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_nesting(value: Any, field: str) -> None:
    """A fixed, documented limit rather than wherever the decoder's recursion gives out."""
    if nesting_depth(value) > MAX_NESTING:
        raise InvalidRequest(f"nested deeper than {MAX_NESTING} levels (at `{field}`)")
