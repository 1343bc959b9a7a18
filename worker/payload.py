"""How large a reply may be: what the NATS server accepts in one message (its INFO
`max_payload`, 1 MiB by default), less room for headers.

A reply over it is never sent: nats-py refuses to publish it, and a server handed one closes the
connection. So paged triggers are given this budget and end a page early (handlers/paging.py),
and any other reply that would not fit is `413 payload_too_large` naming the request key that
bounds it, instead of a caller waiting for its timeout.
"""

from __future__ import annotations

from typing import Any

from schema.errors import PayloadTooLarge

DEFAULT_MAX_PAYLOAD = 1024 * 1024  # the server's default, when no connection says otherwise
# Kept free for headers beside the body: none on a success today, but a server counts them in
# max_payload, and a reply exactly at the limit must not be refused for a header added later.
HEADROOM = 1024


def reply_budget(nc: Any) -> int:
    """The most bytes a reply body may hold on this connection (None: not connected)."""
    max_payload = getattr(nc, "max_payload", None) or DEFAULT_MAX_PAYLOAD
    return int(max_payload) - HEADROOM


def too_large(size: int, budget: int, bounded_by: str | None) -> PayloadTooLarge:
    """The refusal of a reply of `size` bytes: it names the request key that makes it smaller,
    or says that none does."""
    over = (
        f"the reply would be {size} bytes of JSON, more than the {budget} a reply may hold "
        f"(the NATS server's max_payload, {budget + HEADROOM} bytes, less {HEADROOM} for headers)"
    )
    if bounded_by is None:
        return PayloadTooLarge(f"{over}; no key of this request makes it smaller")
    return PayloadTooLarge(f"{bounded_by}: {over}; lower `{bounded_by}` - at `$.{bounded_by}`")
