"""The heads tried at an "I", "my" or "call": only those whose words the text holds and that can
start with that word, each compiled once, tried in PHRASINGS' order.

Every head holds a word that each of its matches contains ("moved" or "relocated", "fan",
"longer"...), found from the head's regular expression itself: a text that holds none of a
head's words cannot match that head anywhere. And every head starts with "I" (I, I'm, I've, I
was...), "my" or "call": at a cue only the heads that start with its first letter can match.
The first of the heads left that matches at the cue is what the pattern joining all 52 heads
(`(?P<p0>...)|(?P<p1>...)|...`) matches there, at the same span: an alternation at one place
tries its alternatives in order and takes the first that matches, as trying them one by one
does. Each head is compiled once, at import: joining the heads a text holds into one pattern
compiled a new pattern (several milliseconds) for each new set of words met.
"""

from __future__ import annotations

import re
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]
from typing import Any

from handlers.facts.phrasings import PHRASINGS

# Under IGNORECASE every character a lowercase letter matches folds to that letter, except
# the dotted capital I and the dotless small i, which match "i": they are made "i" first.
_DOTTED_I = str.maketrans({"\u0130": "i", "\u0131": "i"})
_CACHED = 512  # candidate lists kept, one for each set of words seen
Head = tuple[int, re.Pattern[str], frozenset[str]]  # index in PHRASINGS, pattern, words
Candidates = dict[str, tuple[Head, ...]]  # the cue's first letter, lowercased -> heads


def _needed(items: Any) -> set[str] | None:
    """Strings of which every match of the parsed pattern `items` contains one (folded), or
    None when nothing is certain. Of the candidates in a sequence, the one whose shortest
    string is longest (the most selective)."""
    candidates: list[set[str]] = []
    run = ""
    for op, arg in [*items, (None, None)]:
        if op is sre.LITERAL:
            run += chr(arg)
            continue
        if run:
            candidates.append({run.casefold()})
            run = ""
        inner: set[str] | None = None
        if op is sre.SUBPATTERN:
            inner = _needed(arg[-1])
        elif op is sre.BRANCH:
            each = [_needed(branch) for branch in arg[1]]
            inner = None if any(s is None for s in each) else set().union(*each)  # type: ignore[arg-type]
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT) and arg[0] >= 1:
            inner = _needed(arg[2])
        if inner:
            candidates.append(inner)
    if not candidates:
        return None
    return max(candidates, key=lambda strings: (min(map(len, strings)), -len(strings)))


def _first_set(items: Any) -> set[str]:
    """The lowercased first letters of the parsed pattern's matches, past zero-width items (\\b),
    or every letter when unsure."""
    for op, arg in items:
        if op is sre.AT:
            continue
        if op is sre.LITERAL:
            return {chr(arg).lower()}
        if op is sre.SUBPATTERN:
            return _first_set(arg[-1])
        if op is sre.BRANCH:
            return set().union(*(_first_set(branch) for branch in arg[1]))
        return set("imc")
    return set("imc")


def _heads() -> tuple[tuple[str, ...], tuple[Head, ...]]:
    heads, words = [], set()
    for index, phrasing in enumerate(PHRASINGS):
        needs = _needed(_parser.parse(phrasing.head))
        if not needs:
            raise ValueError(f"head {phrasing.label!r} has no word that each match holds")
        heads.append((index, re.compile(phrasing.head, re.IGNORECASE), frozenset(needs)))
        words |= needs
    return tuple(sorted(words)), tuple(heads)


WORDS, HEADS = _heads()
NEEDS = tuple(needs for _, _, needs in HEADS)
STARTS = tuple(_first_set(_parser.parse(PHRASINGS[i].head, re.IGNORECASE)) for i, _, _ in HEADS)
_candidates: dict[frozenset[str], Candidates] = {}


def heads_for(text: str) -> Candidates:
    """The heads `text` can hold, in PHRASINGS' order, by the first letter they start with."""
    folded = text.lower() if text.isascii() else text.translate(_DOTTED_I).casefold()
    present = frozenset(word for word in WORDS if word in folded)
    found = _candidates.get(present)
    if found is None:
        held = [head for head in HEADS if not head[2].isdisjoint(present)]
        found = {
            letter: tuple(head for head in held if letter in STARTS[head[0]]) for letter in "imc"
        }
        if len(_candidates) >= _CACHED:
            _candidates.clear()
        _candidates[present] = found
    return found


def first_head(candidates: Candidates, text: str, at: int) -> tuple[int, re.Match[str]] | None:
    """The first head of `candidates` that matches `text` at `at` (a cue: "I", "my", "call"),
    with its index in PHRASINGS."""
    for index, pattern, _ in candidates.get(text[at].lower(), ()):
        match = pattern.match(text, at)
        if match is not None:
            return index, match
    return None
