"""The heads a text can hold: only the phrasings whose words the text contains are tried.

One pattern that joins all 52 heads tries each of them, in order, at every "I", "my" and
"call" that passes the gate (handlers/facts/phrasings.py): most of a fact-stating store's
extraction. Every head holds a word that each of its matches contains ("moved" or
"relocated", "fan", "longer"...), found from the head's regular expression itself. A text
that holds none of a head's words cannot match that head anywhere, so the pattern tried is
the one that joins, in the same order and under the same group names, only the heads whose
words the text holds: what matches, and which head first, is unchanged.
"""

from __future__ import annotations

import re
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]
from typing import Any

from handlers.facts.phrasings import GATE, PHRASINGS

# Under IGNORECASE every character a lowercase letter matches folds to that letter, except
# the dotted capital I and the dotless small i, which match "i": they are made "i" first.
_DOTTED_I = str.maketrans({"\u0130": "i", "\u0131": "i"})
_CACHED = 512  # patterns kept, one for each set of words seen


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


def _words_of_heads() -> tuple[tuple[str, ...], tuple[frozenset[str] | None, ...]]:
    each = [_needed(_parser.parse(phrasing.head)) for phrasing in PHRASINGS]
    words = sorted({word for strings in each if strings for word in strings})
    return tuple(words), tuple(frozenset(s) if s else None for s in each)


WORDS, NEEDS = _words_of_heads()
_patterns: dict[frozenset[str], re.Pattern[str]] = {}


def heads_for(text: str) -> re.Pattern[str]:
    """The pattern of every head that `text` can hold, in PHRASINGS' order, head i named
    `p<i>`, behind the same gate as the pattern of all heads."""
    folded = text.lower() if text.isascii() else text.translate(_DOTTED_I).casefold()
    present = frozenset(word for word in WORDS if word in folded)
    pattern = _patterns.get(present)
    if pattern is None:
        alternatives = "|".join(
            f"(?P<p{i}>{phrasing.head})"
            for i, (phrasing, needs) in enumerate(zip(PHRASINGS, NEEDS, strict=True))
            if needs is None or needs & present
        )
        pattern = re.compile(rf"{GATE}(?:{alternatives or '(?!)'})", re.IGNORECASE)
        if len(_patterns) >= _CACHED:
            _patterns.clear()
        _patterns[present] = pattern
    return pattern
