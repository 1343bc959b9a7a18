"""Pages that fit in one reply: a listing ends its page early where the next item would take the
reply past its byte budget (the NATS connection's max_payload, which the worker passes in), and
its cursor continues after the last item it holds, so the next page starts exactly there: no
item is repeated or skipped. A page holds at least one item; an item too large to be sent even
alone is `413 payload_too_large`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import msgspec

from schema.errors import PayloadTooLarge

T = TypeVar("T")
R = TypeVar("R")
_encoder = msgspec.json.Encoder()
_NULL = len(b"null")


def fitting_page(
    found: Sequence[T],
    limit: int,
    budget: int,
    reply: Callable[[list[T], str | None], R],
    cursor_after: Callable[[int], str | None],
    what: str,
) -> R:
    """The reply for the first items of `found` (at most `limit`) whose JSON fits in `budget`
    bytes. `cursor_after(n)` continues after item n, or is None when nothing is left beyond it
    (the caller reads one item past `limit` to know); `what` names an item in a refusal.

    The reply is assumed to be `{..., "<items>": [...], "nextCursor": str | null}`: its size is
    that of the reply without items and with no cursor, plus the cursor's, plus each item's and
    the commas between them."""
    end = min(limit, len(found))
    whole = reply(list(found[:end]), cursor_after(end - 1) if end else None)
    if end == 0 or len(_encoder.encode(whole)) <= budget:
        return whole  # the common case: everything asked for fits
    used = len(_encoder.encode(reply([], None))) - _NULL
    cut = end - 1
    for n in range(end):
        used += len(_encoder.encode(found[n])) + (1 if n else 0)
        if used + len(_encoder.encode(cursor_after(n))) > budget:
            cut = n
            break
    while cut > 0:  # the page as measured; one item fewer if the measure was ever short
        page = reply(list(found[:cut]), cursor_after(cut - 1))
        size = len(_encoder.encode(page))
        if size <= budget:
            return page
        cut -= 1
    raise _alone_too_large(what, len(_encoder.encode(reply(list(found[:1]), None))), budget)


def _alone_too_large(what: str, size: int, budget: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"limit: the next {what} alone makes a reply of {size} bytes of JSON, more than the "
        f"{budget} a reply may hold on this NATS connection (its max_payload less room for "
        "headers): it cannot be listed here, even with `limit` 1 - at `$.limit`"
    )
