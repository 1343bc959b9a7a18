"""First-person statements found in a stored text (contract section 19), which memory::store
asserts as facts. This body knows only where the user lives; the full grammar replaces it."""

from __future__ import annotations

import re

import msgspec


class Statement(msgspec.Struct, frozen=True):
    predicate: str  # "lives_in", "likes", "favorite:ice_cream_flavor", ...
    object: str  # as written in the text, trimmed
    ends: bool = False  # True for an end ("I no longer live in X", "I don't like X anymore")


# The object runs to the end of its clause.
_OBJECT = r"(?P<object>[^.,;:!?]+?)\s*(?:[.,;:!?]|$)"
_LIVES = re.compile(rf"\bI (?:live in|moved to) {_OBJECT}", re.IGNORECASE)
_ENDS = re.compile(rf"\bI no longer live in {_OBJECT}", re.IGNORECASE)


def extract_statements(text: str) -> list[Statement]:
    """The statements of `text`, in the order they are written."""
    found = [
        (match.start(), Statement("lives_in", match["object"].strip(), ends=pattern is _ENDS))
        for pattern in (_LIVES, _ENDS)
        for match in pattern.finditer(text)
    ]
    return [statement for _, statement in sorted(found, key=lambda item: item[0])]
