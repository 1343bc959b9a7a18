"""The validators behind the sanitiser's patterns (handlers/sanitize_rules.py): a pattern
finds a candidate cheaply, and one of these decides whether it is what it looks like (a card
number passes Luhn, an IBAN mod-97, a key looks random rather than like a word)."""

from __future__ import annotations

import math
import re
from collections import Counter


def luhn_valid(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def iban_valid(compact: str) -> bool:
    """ISO 13616: move the country and check digits to the end, letters to 10-35, mod 97 is 1."""
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


def entropy_bits(text: str) -> float:
    """Shannon entropy per character of `text` by its own character frequencies."""
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def character_classes(text: str) -> int:
    return sum(
        (
            any(c.islower() for c in text),
            any(c.isupper() for c in text),
            any(c.isdigit() for c in text),
            any(not c.isalnum() for c in text),
        )
    )


def looks_random(token: str, *, min_length: int = 16, min_bits: float = 3.0) -> bool:
    """A key or token, not a word: long, mixed, and with many distinct characters."""
    return (
        len(token) >= min_length
        and character_classes(token) >= 2
        and any(c.isdigit() for c in token)
        and entropy_bits(token) >= min_bits
    )


def card(match: re.Match[str]) -> bool:
    raw = match.group()
    digits = raw.replace(" ", "").replace("-", "")
    if not 13 <= len(digits) <= 19 or digits[0] not in "23456" or not luhn_valid(digits):
        return False
    if raw == digits:
        return True
    # Grouped as cards are printed: one kind of separator, groups of 3-6, the first of 4.
    separators = {c for c in raw if not c.isdigit()}
    groups = re.split(r"[ -]", raw)
    return len(separators) == 1 and len(groups[0]) == 4 and all(3 <= len(g) <= 6 for g in groups)


def iban(match: re.Match[str]) -> bool:
    return iban_valid(match.group().replace(" ", ""))


def digit_count(text: str) -> int:
    return sum(c.isdigit() for c in text)


def phone_international(match: re.Match[str]) -> bool:
    """E.164 allows at most 15 digits; fewer than 8 with a country code is not a number."""
    raw = match.group()
    return 8 <= digit_count(raw) <= 15 and not re.search(r"[ .-]{2}|[()]{2}", raw)


def phone_nanp(match: re.Match[str]) -> bool:
    """Area code and exchange start with 2-9; `555-123.4567` mixes separators, no phone does."""
    core = re.sub(r"^1[ .-]", "", match.group())
    digits = [c for c in core if c.isdigit()]
    same_separators = core.startswith("(") or core[3] == core[7]
    return digits[0] in "23456789" and digits[3] in "23456789" and same_separators


def phone_national(match: re.Match[str]) -> bool:
    """A trunk-prefixed national number (`020 7946 0958`, `06 12 34 56 78`): 9-12 digits in
    groups that one kind of separator joins; `07-05-2023` (a date) has 8 and is kept, and
    an invalid SSN (`000-12-3456`) is not read as a phone."""
    raw = match.group()
    if re.fullmatch(r"[0-9]{3}-[0-9]{2}-[0-9]{4}", raw):  # an SSN's shape, refused by `ssn`
        return False
    return 9 <= digit_count(raw) <= 12 and len({c for c in raw if not c.isdigit()}) == 1


def token(match: re.Match[str]) -> bool:
    return looks_random(match.group("value"))


def long_token(match: re.Match[str]) -> bool:
    return looks_random(match.group("value"), min_length=20)


PASSWORD_NAMES = ("password", "passwd", "pwd", "passphrase")


def assigned(match: re.Match[str]) -> bool:
    """A password needs only to be more than a word (`password: none` and `Password: Kindness`
    are kept, `password: 12345678` is not); a token or key must look random. Values that name
    something else (`$VAR`, `%(x)s`, `{{x}}`, `<your-key>`, `****`) are kept."""
    value = match.group("value")
    if value[0] in "$%{<*" or set(value) <= {"x", "X", "*", "."}:
        return False
    if match.group("key").lower() in PASSWORD_NAMES:
        return len(value) >= 6 and not re.fullmatch(r"[A-Za-z][a-z]*", value)
    return looks_random(value, min_length=12)


def email(match: re.Match[str]) -> bool:
    tld = match.group("domain").rsplit(".", 1)[-1]
    return tld.isalpha() and len(tld) >= 2
