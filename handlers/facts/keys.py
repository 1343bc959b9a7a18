"""How facts are compared and named: the compared form of a subject or object, which timeline
(`line`) a fact belongs to, and the statement a reply shows."""

from __future__ import annotations

SINGLE_VALUED = frozenset(
    ("name", "age", "birthday", "lives_in", "from", "works_at", "job", "studies_at", "partner")
)
# Predicates that end each other: a subject's stance on one object is one timeline.
OPPOSITES = {"likes": "dislikes", "dislikes": "likes"}
# A line's facts, in SQL. The unary plus leaves the index and the plan as they are, but stops
# SQLite (built with STAT4) from preparing a query that orders or bounds a line's facts again
# at every execution: about 6 µs of its 9, and a store that states a fact runs two or three.
ON_LINE = "tenant = +? AND agent_id = +? AND line = +?"
_SEPARATOR = "\x1f"


def compared(text: str) -> str:
    """Case folded, spaces collapsed, a leading "the" dropped: "The  Hague" == "hague"."""
    key = " ".join(text.split()).casefold()  # str.split's spaces are `\s`'s, without a regex
    if key.startswith("the ") and len(key) > 4:
        key = key[4:]
    return key


def single_valued(predicate: str) -> bool:
    return predicate in SINGLE_VALUED or predicate.startswith("favorite:")


def line_of(subject_key: str, predicate: str, object_key: str) -> str:
    """The timeline a fact is in: a single-valued predicate's values follow one another; a
    multi-valued one's object is a timeline of its own, shared by `likes` and `dislikes`."""
    if single_valued(predicate):
        return _SEPARATOR.join((subject_key, predicate))
    group = "likes" if predicate in OPPOSITES else predicate
    return _SEPARATOR.join((subject_key, group, object_key))


def statement(subject: str, predicate: str, obj: str) -> str:
    """`Maria lives in Lisbon`: the predicate's `_` and `:` as spaces."""
    return f"{subject} {predicate.replace('_', ' ').replace(':', ' ')} {obj}"
