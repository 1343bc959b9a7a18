"""Which top-level field a malformed request went wrong in, for errors that carry only a byte
offset (invalid UTF-8, bad JSON tokens) or none at all (nesting too deep, lone surrogates), and
what msgspec's message leaves unsaid (a lone surrogate)."""

from __future__ import annotations

import re

import msgspec

from schema.base import ID_REFUSAL, ID_RULE
from schema.taxonomy import TAG_REFUSAL, TAG_RULE

BYTE_OFFSET = re.compile(r"\(byte (\d+)\)")
# One escape inside a JSON string; matching `\\` as a whole keeps `\\ud800` (a backslash, then
# the letters) from being read as an escaped surrogate.
ESCAPE = re.compile(rb"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)
DEEP = 256


def top_level_key(data: bytes, offset: int) -> str | None:
    """The key of the top-level object member that contains byte `offset`."""
    depth, index, key, expect_key = 0, 0, None, False
    end = min(len(data), offset)
    while index < end:
        char = data[index]
        if char == 0x22:  # a string: a key if it opens a top-level member
            close = index + 1
            while close < len(data) and data[close] != 0x22:
                close += 2 if data[close] == 0x5C else 1
            if depth == 1 and expect_key:
                key, expect_key = data[index + 1 : close].decode("utf-8", "replace"), False
            index = close + 1
            continue
        if char in b"{[":
            depth += 1
            expect_key = depth == 1 and char == 0x7B
        elif char in b"}]":
            depth -= 1
        elif char == 0x2C and depth == 1:
            expect_key = True
        index += 1
    return key


def too_deep_offset(data: bytes, limit: int = DEEP) -> int | None:
    depth = 0
    in_string = escaped = False
    for index, char in enumerate(data):
        if in_string:
            escaped, in_string = (False, in_string) if escaped else (char == 0x5C, char != 0x22)
            continue
        if char == 0x22:
            in_string = True
        elif char in b"{[":
            depth += 1
            if depth > limit:
                return index
        elif char in b"}]":
            depth -= 1
    return None


def field_at(data: bytes, offset: int | None) -> str:
    """` (at `$.key`)` for the member holding offset, or nothing when it cannot tell."""
    if offset is None:
        return ""
    key = top_level_key(data, offset)
    return "" if key is None else f" (at `$.{key}`)"


def malformed_offset(data: bytes, message: str) -> int | None:
    found = BYTE_OFFSET.search(message)
    if found:
        return int(found.group(1))
    surrogate = lone_surrogate(data)
    return None if surrogate is None else surrogate[0]


def lone_surrogate(data: bytes) -> tuple[int, str] | None:
    """The offset and text of the first `\\uD800`-`\\uDFFF` escape that is not half of a
    pair (a high one directly followed by a low one): JSON allows writing it, Unicode has no
    such character, and msgspec's own message for it ("Input data was truncated", "invalid
    utf-16 surrogate pair") does not say so."""
    if b"\\u" not in data:
        return None
    high: re.Match[bytes] | None = None
    for escape in ESCAPE.finditer(data):
        code = int(escape.group(1), 16) if escape.group(1) else -1
        if high is not None:
            if 0xDC00 <= code <= 0xDFFF and escape.start() == high.end():
                high = None
                continue
            break
        if 0xD800 <= code <= 0xDBFF:
            high = escape
        elif 0xDC00 <= code <= 0xDFFF:
            return escape.start(), escape.group(0).decode()
    return None if high is None else (high.start(), high.group(0).decode())


def invalid_utf8_offset(data: bytes) -> int | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start
    return None


def refusal(data: bytes, error: Exception) -> str:
    """The one-line reason a request did not decode, naming the field wherever it can."""
    if isinstance(error, msgspec.ValidationError):
        words = str(error).replace(ID_REFUSAL, ID_RULE).replace(TAG_REFUSAL, TAG_RULE)
        return f"invalid request: {words}"
    if isinstance(error, UnicodeDecodeError):
        offset = invalid_utf8_offset(data)
        return f"request is not valid UTF-8 (byte {offset}){field_at(data, offset)}"
    if isinstance(error, RecursionError):
        return f"request is nested too deeply{field_at(data, too_deep_offset(data))}"
    surrogate = lone_surrogate(data)
    if surrogate is not None:
        at, escape = surrogate
        return f"malformed JSON: lone surrogate {escape} is not valid Unicode{field_at(data, at)}"
    return f"malformed JSON: {error}{field_at(data, malformed_offset(data, str(error)))}"
