"""The sanitiser's detectors (contract section 13) as one ordered table of rules.

Each rule is a compiled pattern, the placeholder type it redacts to, and an optional validator
that sees the match (Luhn for cards, mod-97 for IBANs, randomness for secrets, digit counts for
phones). A pattern finds candidates cheaply; the validator decides. Every pattern is written so
that Python's backtracking engine stays linear on any input: every repetition is bounded, a
repeated group starts with a character its neighbour cannot match (so the split is never
ambiguous), runs that must not give characters back are possessive (`{m,n}+`, Python 3.11),
and a lookbehind stops a match from starting inside a run it already rejected
(tests/handlers/test_sanitize.py times each rule on adversarial 64 KiB inputs; `memory-worker
bench --sanitize` on 512 KiB ones).

The table is ordered: secrets first (a bearer token that is a JWT is one secret, not two), then
bank and card numbers before phones (a card's digit groups would pass for a phone). Each rule
runs on the text the rules before it left, and no placeholder holds a digit or an `@`, so no
later rule can match inside one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from handlers import sanitize_checks as checks


@dataclass(frozen=True)
class Rule:
    """`kind` is the placeholder's type word; when `group` is set only that group is replaced
    (the value of `password=...`, the token after `Bearer`), the rest of the match is kept.
    `hints` are lowercase strings of which every match holds at least one, and `also` more of
    which every match holds one too (the `=` of `password=...`, the noun of "ignore previous
    instructions")."""

    name: str
    kind: str
    pattern: re.Pattern[str]
    valid: Callable[[re.Match[str]], bool] | None = None
    group: str | None = None
    hints: tuple[str, ...] = ()
    also: tuple[str, ...] = ()

    def may_match(self, lowered: str) -> bool:
        """False when none of the strings every match holds is in the text (`folded`): most
        texts skip most rules at the cost of a substring search (handlers/sanitize.py looks
        for every rule's hints at once)."""
        return (not self.hints or any(hint in lowered for hint in self.hints)) and (
            not self.also or any(word in lowered for word in self.also)
        )


# What a case-blind pattern matches that `str.lower` does not bring to ASCII (re's own case
# equivalences: the dotless i, the long s).
_FOLD = str.maketrans({"\u0131": "i", "\u017f": "s"})


def folded(text: str) -> str:
    """The text as hints are looked for in it: lowercased, with the letters that a case-blind
    pattern takes for `i` and `s` made those."""
    lowered = text.lower()
    return lowered if lowered.isascii() else lowered.translate(_FOLD)


def hints_in(lowered: str, hints: Iterable[str]) -> set[str]:
    """Which of the hints the (folded) text holds."""
    return {hint for hint in hints if hint in lowered}


def hint_finder(hints: Iterable[str]) -> Callable[[str], set[str]]:
    """`hints_in` for a set of hints fixed once, in fewer searches of the text: the hints of one
    character (`@`, the digits) in one search for any of them, and a longer hint holding a
    character other than a letter (`sk-`, `ghp_`, `://`) only in a text that holds that
    character, looked for once for all the hints that share it. Every store's text passes
    here, and most hold none of those characters (issue 33: a search per hint was two thirds
    of the sanitiser's 15 us on a plain 200-character text; this takes a third off it)."""
    every = frozenset(hints)
    single = sorted(hint for hint in every if len(hint) == 1)
    singles = re.compile("[" + "".join(re.escape(hint) for hint in single) + "]")
    gated: dict[str, list[str]] = {}
    words: list[str] = []
    for hint in sorted(every - set(single)):
        gate = next((char for char in hint if not char.isalpha()), None)
        if gate is None:
            words.append(hint)
        else:
            gated.setdefault(gate, []).append(hint)
    gates = tuple((gate, tuple(found)) for gate, found in gated.items())

    def find(lowered: str) -> set[str]:
        found = {hint for hint in words if hint in lowered}
        if single:
            found.update(singles.findall(lowered))
        for gate, behind in gates:
            if gate in lowered:
                found.update(hint for hint in behind if hint in lowered)
        return found

    return find


DIGITS = tuple("0123456789")
_NOT_INSIDE_TOKEN = r"(?<![A-Za-z0-9_-])"
_NOT_INSIDE_NUMBER = r"(?<![\w.+/-])"
_NUMBER_ENDS = r"(?![\w/-]|[.,:]\d)"
_PEM_NAME = r"-----{} (?:[A-Z0-9]{{1,16}} ){{0,3}}PRIVATE KEY-----"
# Anything but the start of another `-----` line: a PEM body cannot run past the next marker.
# Without its END line, the BEGIN line and the base64 lines after it are still redacted.
_PEM_BODY = r"(?:[A-Za-z0-9+/=\s:,.()]|-(?!----)){0,65536}+"
_PEM = (
    _PEM_NAME.format("BEGIN")
    + f"(?:{_PEM_BODY}{_PEM_NAME.format('END')}|[A-Za-z0-9+/=\\r\\n]{{0,65536}}+)"
)
_SECRET_NAMES = (
    r"(?P<name>(?:[A-Za-z0-9]{1,24}[_.-]){0,3}(?P<key>(?i:password|passwd|pwd|passphrase"
    r"|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key)))"
)

REDACTING: tuple[Rule, ...] = (
    Rule("secret.private_key", "secret", re.compile(_PEM), hints=("-----begin",)),
    Rule(
        "secret.jwt",
        "secret",
        re.compile(
            _NOT_INSIDE_TOKEN
            + r"eyJ[A-Za-z0-9_-]{8,8192}+\.eyJ[A-Za-z0-9_-]{8,65536}+\.[A-Za-z0-9_-]{0,8192}+"
        ),
        hints=("eyj",),
    ),
    Rule(
        "secret.anthropic",
        "secret",
        re.compile(_NOT_INSIDE_TOKEN + r"sk-ant-(?P<value>[A-Za-z0-9_-]{20,512}+)"),
        checks.token,
        hints=("sk-ant-",),
    ),
    Rule(
        "secret.openai",
        "secret",
        re.compile(_NOT_INSIDE_TOKEN + r"sk-(?P<value>[A-Za-z0-9_-]{20,512}+)"),
        checks.token,
        hints=("sk-",),
    ),
    Rule(
        "secret.github",
        "secret",
        re.compile(
            _NOT_INSIDE_TOKEN
            + r"(?:gh[opsur]_[A-Za-z0-9]{36,255}+|github_pat_[A-Za-z0-9_]{22,255}+)"
        ),
        hints=("gho_", "ghp_", "ghs_", "ghu_", "ghr_", "github_pat_"),
    ),
    Rule(
        "secret.slack",
        "secret",
        re.compile(_NOT_INSIDE_TOKEN + r"xox[abpr]-(?P<value>[A-Za-z0-9-]{10,255}+)"),
        checks.token,
        hints=("xox",),
    ),
    Rule(
        "secret.aws",
        "secret",
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        hints=("akia", "asia"),
    ),
    Rule(
        "secret.bearer",
        "secret",
        re.compile(r"(?<![\w-])(?i:bearer)[ \t]{1,4}(?P<value>[A-Za-z0-9._~+/-]{16,8192}+=*)"),
        checks.long_token,
        group="value",
        hints=("bearer",),
    ),
    Rule(
        "secret.url_password",
        "secret",
        re.compile(r"(?<=://)[^\s/:@]{1,128}+:(?P<value>[^\s/@]{1,256}+)@"),
        group="value",
        hints=("://",),
    ),
    Rule(
        "secret.assigned",
        "secret",
        re.compile(
            r"(?<![\w.-])[\"']?" + _SECRET_NAMES + r"[\"']?[ \t]{0,3}[:=][ \t]{0,3}[\"']?"
            r"(?P<value>[^\s\"'`,;<>\[\]]{4,512}+)"
        ),
        checks.assigned,
        group="value",
        hints=("pass", "pwd", "secret", "token", "key"),
        also=(":", "="),
    ),
    Rule(
        "iban",
        "iban",
        re.compile(
            r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?"
            r"(?![A-Za-z0-9])"
        ),
        checks.iban,
        hints=DIGITS,
    ),
    Rule(
        "card",
        "card",
        re.compile(_NOT_INSIDE_NUMBER + r"[0-9](?:[ -]?[0-9]){12,18}" + _NUMBER_ENDS),
        checks.card,
        hints=DIGITS,
    ),
    Rule(
        "ssn",
        "ssn",
        re.compile(
            _NOT_INSIDE_NUMBER
            + r"(?!000|666|9)[0-9]{3}-(?!00)[0-9]{2}-(?!0000)[0-9]{4}"
            + _NUMBER_ENDS
        ),
        hints=DIGITS,
    ),
    Rule(
        "email",
        "email",
        re.compile(
            r"(?<![\w.%+-])(?<!//)[A-Za-z0-9._%+-]{1,64}@"
            r"(?P<domain>[A-Za-z0-9-]{1,63}+(?:\.[A-Za-z0-9-]{1,63}+){1,8}+)"
            r"(?![\w-]|:[\w~/])"
        ),
        checks.email,
        hints=("@",),
    ),
    Rule(
        "phone.international",
        "phone",
        re.compile(r"(?<![\w+])\+[1-9][0-9 ().-]{6,22}[0-9]" + _NUMBER_ENDS),
        checks.phone_international,
        hints=("+",),
    ),
    Rule(
        "phone.nanp",
        "phone",
        re.compile(
            _NOT_INSIDE_NUMBER
            + r"(?:1[ .-])?(?:\([0-9]{3}\) ?|[0-9]{3}[ .-])[0-9]{3}[ .-][0-9]{4}"
            + _NUMBER_ENDS
        ),
        checks.phone_nanp,
        hints=DIGITS,
    ),
    Rule(
        "phone.national",
        "phone",
        re.compile(_NOT_INSIDE_NUMBER + r"0[0-9]{1,4}(?:[ -][0-9]{2,8}){1,4}" + _NUMBER_ENDS),
        checks.phone_national,
        hints=("0",),
    ),
)

# Prompt-injection markers: kept in the text, they only flag the memory.
_FILLER = r"(?:(?:all|any|every|the|your|my|of|these|those|previous|prior)\s{1,3}){0,3}"
FLAGGING: tuple[Rule, ...] = (
    Rule(
        "injection.ignore_instructions",
        "injection",
        re.compile(
            r"(?i)\b(?:ignore|disregard|forget|override)\s{1,3}"
            + _FILLER
            + r"(?:previous|prior|above|earlier|preceding|foregoing|former|original|system)"
            r"\s{1,3}(?:instructions?|prompts?|rules|directions?|directives?|guidelines"
            r"|context)\b"
        ),
        hints=("ignore", "disregard", "forget", "override"),
        also=("instruction", "prompt", "rules", "direction", "directive", "guidelines", "context"),
    ),
    Rule(
        "injection.reveal_prompt",
        "injection",
        re.compile(
            r"(?i)\b(?:reveal|print|show|output|repeat|display|leak|dump|tell\s{1,3}me)\s{1,3}"
            r"(?:(?:me|us|your|the|its|initial|original|hidden|full|entire|exact)\s{1,3}){0,3}"
            r"(?:system\s{1,3}(?:prompt|message|instructions)"
            r"|(?:initial|original|hidden)\s{1,3}(?:prompt|instructions))\b"
        ),
        hints=("system", "prompt", "instruction"),
        also=("reveal", "print", "show", "output", "repeat", "display", "leak", "dump", "tell"),
    ),
    Rule(
        "injection.role_header",
        "injection",
        re.compile(
            r"<\|im_start\|>|<\|(?:system|assistant|user)\|>|<\|start_header_id\|>"
            r"|\[/?INST\]|<</?SYS>>"
            r"|(?im:^[ \t]{0,3}#{1,4}[ \t]{0,3}(?:system|instruction)[ \t]{0,3}:)"
        ),
        hints=("<|", "[inst]", "[/inst]", "<<", "#"),
    ),
)
