"""Which top-level field a malformed request went wrong in, for errors that carry only a byte
offset (invalid UTF-8, bad JSON tokens) or none at all (nesting too deep, lone surrogates)."""

from __future__ import annotations

import re

BYTE_OFFSET = re.compile(r"\(byte (\d+)\)")
LONE_SURROGATE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<![0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
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
    surrogate = LONE_SURROGATE.search(data)
    return surrogate.start() if surrogate else None


def invalid_utf8_offset(data: bytes) -> int | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start
    return None
