"""Refusing a request object that names a key twice, at any depth.

msgspec, like most JSON parsers, keeps the last of two equal keys without a word, so
`{"agentId": "B", "agentId": "A"}` would pass a gateway that checks the first one and act for
A. Metadata and entity properties are stored as they come, so a repeated key is refused there
too rather than silently dropped.

The check runs on every request, so it is in two steps. The proof, almost all C: decode the body
without a type, encode that again and compare the number of `"` bytes. A string's quotes are two
bytes, and a `"` inside it one (`\\"`) in the body and in msgspec's encoding alike, so the counts
are equal exactly when every string of the body is still in the decoded value, and a repeated
key is the one way to lose a string (the dict keeps one of the two). A `"` written as `\\u0022`
counts no byte in the body and one in the encoding, so a body holding that text skips the
proof. When the proof fails, the scan (a small tokenizer in Python) finds the repeated key and
where it is, for the message.
"""

from __future__ import annotations

import re

import msgspec

QUOTE_ESCAPE = b"u0022"  # the tail of `\\u0022`: a faster search, and a false alarm only scans
# A string (group 1 its body; group 2 the colon that makes it a key) or a structural character.
TOKEN = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)"[ \t\r\n]*(:)?|([{}\[\],])', re.DOTALL)
_ENCODER = msgspec.json.Encoder()


def duplicate_key(data: bytes) -> str | None:
    """None, or why `data` (valid JSON) is refused: "duplicate key `agentId` at `$`"."""
    if QUOTE_ESCAPE not in data:
        try:
            again = _ENCODER.encode(msgspec.json.decode(data))
        except (msgspec.DecodeError, msgspec.EncodeError, RecursionError):
            pass  # the scan decides
        else:
            if again.count(b'"') == data.count(b'"'):
                return None
    return _scan(data)


def _key(body: bytes) -> str:
    if b"\\" in body:
        decoded: str = msgspec.json.decode(b'"' + body + b'"')
        return decoded
    return body.decode("utf-8", "replace")


def _scan(data: bytes) -> str | None:
    """Walk the tokens with a stack of open objects (their keys) and arrays (their index)."""
    stack: list[tuple[str, set[str] | None, list[int]]] = []  # (path, keys or None, [index])
    key = ""
    for body, colon, char in TOKEN.findall(data):
        if colon:
            path, keys, _ = stack[-1]
            key = _key(body)
            if keys is not None:
                if key in keys:
                    return f"duplicate key `{key}` at `{path}`"
                keys.add(key)
        elif char in (b"{", b"["):
            if not stack:
                path = "$"
            else:
                parent, keys, index = stack[-1]
                path = f"{parent}.{key}" if keys is not None else f"{parent}[{index[0]}]"
            stack.append((path, set() if char == b"{" else None, [0]))
        elif char in (b"}", b"]"):
            stack.pop()
        elif char == b"," and stack and stack[-1][1] is None:
            stack[-1][2][0] += 1
    return None
