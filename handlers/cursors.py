"""Opaque cursors for the triggers that page (list, session::get, audit).

A cursor names what it continues (the trigger's listing, the tenant and agent, the order) and
the last position handed out; the next page starts strictly after that position, so a page
never repeats or skips a row while others are written or removed meanwhile. A cursor from
another listing, agent or order, or a string no reply gave, is refused with 400 naming `cursor`.
It is not secret: it holds only what its caller already knows.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgspec

from schema.errors import InvalidRequest

_VERSION = 1


def encode_cursor(scope: tuple[Any, ...], position: tuple[Any, ...]) -> str:
    raw = msgspec.json.encode([_VERSION, list(scope), list(position)])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, scope: tuple[Any, ...], arity: int) -> list[Any]:
    """The position a cursor continues from, if it was made for this scope."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, made_for, position = msgspec.json.decode(
            raw, type=tuple[int, list[Any], list[Any]]
        )
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise InvalidRequest("cursor: not a cursor this worker gave - at `$.cursor`") from None
    if version != _VERSION or made_for != list(scope) or len(position) != arity:
        raise InvalidRequest(
            "cursor: made for another listing (agent, order or filters) - at `$.cursor`"
        )
    return position
