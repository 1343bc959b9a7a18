"""What a memory's content becomes before it is stored (contract section 13).

Stored text is replayed into prompts later, so secrets and personal data are replaced by typed
placeholders (`[redacted:email]`) and prompt-injection markers flag the memory (they are kept:
the text is evidence, and the flag is what the renderer shows). The rules are a table in
handlers/sanitize_rules.py; this module applies them in order and says what it did, by type
and by rule name, never with the matched text (the audit records the names).

Pure: the caller passes the mode (`MEMORY_WORKER_SANITIZE`), hashing and dedup then work on
the returned text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Set as AbstractSet
from typing import Literal, NamedTuple

from handlers.sanitize_rules import FLAGGING, REDACTING, Rule, folded, hint_finder

Mode = Literal["redact", "flag", "off"]
MODES: tuple[Mode, ...] = ("redact", "flag", "off")


class Sanitized(NamedTuple):
    """`redactions` counts replacements by placeholder type (`{}` in `flag` and `off` modes);
    `flags` is sorted and unique; `rules` names every rule that fired, sorted, for the audit."""

    text: str
    redactions: dict[str, int]
    flags: list[str]
    rules: tuple[str, ...]


def placeholder(kind: str) -> str:
    return f"[redacted:{kind}]"


def _apply(rule: Rule, text: str, fired: Counter[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        if rule.valid is not None and not rule.valid(match):
            return match.group()
        fired[rule.name] += 1
        if rule.group is None:
            return placeholder(rule.kind)
        start, end = match.span(rule.group)
        offset = match.start()
        whole = match.group()
        return whole[: start - offset] + placeholder(rule.kind) + whole[end - offset :]

    return rule.pattern.sub(replace, text)


def redact(text: str) -> tuple[str, Counter[str]]:
    """The text with every redacting rule applied in table order, and how often each fired.
    Hints are looked for in the original text: a placeholder never completes a match."""
    return _redacted(text, _possible(folded(text)))


def _redacted(text: str, possible: AbstractSet[str]) -> tuple[str, Counter[str]]:
    fired: Counter[str] = Counter()
    if possible:
        for rule in REDACTING:
            if rule.name in possible:
                text = _apply(rule, text, fired)
    return text, fired


def injection_rules(text: str) -> list[str]:
    return _injected(text, _possible(folded(text)))


def _injected(text: str, possible: AbstractSet[str]) -> list[str]:
    if not possible:
        return []
    return [rule.name for rule in FLAGGING if rule.name in possible and rule.pattern.search(text)]


RULES = (*REDACTING, *FLAGGING)
# Every rule's hints, looked for once per text, and the rules each one lets through; rules
# without hints always run. A placeholder's type by rule name.
HINTS = frozenset(hint for rule in RULES for hint in rule.hints)
_BY_HINT = {hint: tuple(rule.name for rule in RULES if hint in rule.hints) for hint in HINTS}
_hints_in = hint_finder(HINTS)
_ALWAYS = tuple(rule.name for rule in RULES if not rule.hints)
_ALSO = {rule.name: rule.also for rule in RULES}
KIND_OF = {rule.name: rule.kind for rule in REDACTING}


def _possible(lowered: str) -> set[str]:
    """The names of the rules that may match the (folded) text: Rule.may_match for all of
    them, with each hint looked for once."""
    found = {name for hint in _hints_in(lowered) for name in _BY_HINT[hint]}
    return {
        name
        for name in (*found, *_ALWAYS)
        if not _ALSO[name] or any(word in lowered for word in _ALSO[name])
    }


def sanitize(text: str, mode: Mode) -> Sanitized:
    if mode == "off":
        return Sanitized(text, {}, [], ())
    possible = _possible(folded(text))
    redacted, fired = _redacted(text, possible)
    injected = _injected(text, possible)
    if not fired and not injected:  # most texts: nothing to say
        return Sanitized(text, {}, [], ())
    counts: Counter[str] = Counter()
    for name, times in fired.items():
        counts[KIND_OF[name]] += times
    flags = {"injection"} if injected else set()
    rules = tuple(sorted([*fired, *injected]))
    if mode == "flag":
        flags |= {f"pii:{kind}" for kind in counts}
        return Sanitized(text, {}, sorted(flags), rules)
    return Sanitized(redacted, dict(sorted(counts.items())), sorted(flags), rules)
