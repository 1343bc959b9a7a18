"""A user's agent grants as SQL: the rows a request over many agents may choose.

Grants (MEMORY_WORKER_GRANTS) are fnmatch patterns over agent ids; worker/tenancy.py checks an
agent a request names with `fnmatchcase`. A request over every agent of its tenant (evict,
consolidate, stats, audit, the task board's listing, usage totals) instead carries its caller's
patterns as data (`grants`), and its handler adds them to the SQL that chooses rows, so nothing
outside them is read, counted or changed.

SQLite's GLOB is fnmatch's `*`, `?` and literals, but its sets differ (`[^a]`, not `[!a]`; no
way to write `]` or `-` but by position; fnmatch drops reversed ranges and reads `[` without a
closing `]` as a literal). So each set is translated by what it accepts: fnmatch's own regular
expression for the set is asked about each character the set names and one character between
each two of them (the answer cannot change between two characters the set does not name), and
the ranges it accepts are written in GLOB's syntax. tests/test_grants.py compares the two on
generated patterns.
"""

from __future__ import annotations

import fnmatch
import re
import warnings
from collections.abc import Sequence
from functools import lru_cache

from msgspec import UnsetType

MAX_CHAR = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)  # never in a stored (UTF-8) id: not written into a pattern
GLOB_SPECIAL = "*?["


@lru_cache(maxsize=1024)
def glob_of(pattern: str) -> str | None:
    """The GLOB pattern that matches the agent ids `fnmatchcase(name, pattern)` matches, or
    None when it matches none (a set that accepts no character, a NUL)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c in "*?":
            out.append(c)
            continue
        if c != "[":
            if not _storable(ord(c)):
                return None  # no id holds it
            out.append(_literal(c))
            continue
        # Where fnmatch ends a set: a `]` right after `[` or `[!` belongs to it.
        j = i
        if j < n and pattern[j] == "!":
            j += 1
        if j < n and pattern[j] == "]":
            j += 1
        while j < n and pattern[j] != "]":
            j += 1
        if j >= n:
            out.append(_literal("["))  # no closing `]`: a literal `[`
            continue
        ranges = _accepted(pattern[i - 1 : j + 1])
        i = j + 1
        written = _set(ranges)
        if written is None:
            return None
        out.append(written)
    return "".join(out)


def grants_clause(
    grants: Sequence[str] | UnsetType, column: str = "agent_id"
) -> tuple[str, tuple[str, ...]]:
    """` AND (column GLOB ? OR ...)` and its parameters for a request's `grants`; nothing when
    it has none (a caller without an entry, an operator)."""
    if isinstance(grants, UnsetType):
        return "", ()
    sql, params = matches_clause(grants, column)
    return f" AND {sql}", params


def matches_clause(grants: Sequence[str], column: str) -> tuple[str, tuple[str, ...]]:
    """`(column GLOB ? OR ...)`, or `0` when no pattern can match, and its parameters."""
    globs = tuple(glob for glob in map(glob_of, grants) if glob is not None)
    if not globs:
        return "0", ()
    return "(" + " OR ".join(f"{column} GLOB ?" for _ in globs) + ")", globs


def can_match(grants: Sequence[str]) -> bool:
    """Whether any agent id could match one of the patterns."""
    return any(glob_of(pattern) is not None for pattern in grants)


def _storable(point: int) -> bool:
    return point != 0 and not SURROGATES[0] <= point <= SURROGATES[1]


def _literal(c: str) -> str:
    return f"[{c}]" if c in GLOB_SPECIAL else c


def _accepted(bracket: str) -> list[tuple[int, int]]:
    """The code point ranges (inclusive) that fnmatch's set `bracket` accepts."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "possible nested set" and the like: still a set
        one = re.compile(fnmatch.translate(bracket)).match
    named = sorted({ord(c) for c in bracket})
    # The named characters, and one character between each two of them and at either end.
    bounds = zip([-1, *named], [*named, MAX_CHAR + 1], strict=True)
    probes = sorted({*named, *(low + 1 for low, high in bounds if high > low + 1)})
    edges = [*probes[1:], MAX_CHAR + 1]
    ranges: list[tuple[int, int]] = []
    for probe, following in zip(probes, edges, strict=True):
        if not one(chr(probe)):
            continue
        # The answer holds up to the next probe: a named character ends the run before it.
        high = following - 1
        if ranges and ranges[-1][1] == probe - 1:
            ranges[-1] = (ranges[-1][0], high)
        else:
            ranges.append((probe, high))
    return ranges


def _set(ranges: list[tuple[int, int]]) -> str | None:
    """GLOB for the characters in `ranges` (None: none an id may hold): `?` for all of them,
    the character itself for one, else a `[...]` with `]` first and `-` next (where GLOB reads
    them as themselves) and never `^` first. NUL (it would end the pattern) and the surrogates
    are left out: no stored id holds them."""
    if ranges == [(0, MAX_CHAR)]:
        return "?"
    head = "".join(c for c in "]-" if any(lo <= ord(c) <= hi for lo, hi in ranges))
    pieces = _without(ranges, [(0, 0), (ord("]"), ord("]")), (ord("-"), ord("-")), SURROGATES])
    if not head and pieces and pieces[0][0] == ord("^"):
        # `[^` would invert the set: `^` goes last, where GLOB reads it as itself.
        lo, hi = pieces[0]
        pieces = ([] if lo == hi else [(lo + 1, hi)]) + pieces[1:]
        tail = "^"
    else:
        tail = ""
    body = "".join(chr(lo) if lo == hi else f"{chr(lo)}-{chr(hi)}" for lo, hi in pieces)
    members = head + body + tail
    if len(members) <= 1:  # one character (or none an id may hold): no set needed
        return _literal(members) if members else None
    return f"[{members}]"


def _without(ranges: list[tuple[int, int]], cuts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges with the cut ranges taken out."""
    pieces = list(ranges)
    for cut_lo, cut_hi in cuts:
        kept: list[tuple[int, int]] = []
        for lo, hi in pieces:
            if hi < cut_lo or lo > cut_hi:
                kept.append((lo, hi))
                continue
            if lo < cut_lo:
                kept.append((lo, cut_lo - 1))
            if hi > cut_hi:
                kept.append((cut_hi + 1, hi))
        pieces = kept
    return pieces
