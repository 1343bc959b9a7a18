"""Pages within a byte budget (handlers/paging.py): a page ends exactly where the next item
would take the reply past the budget, its cursor continues there (nothing repeated or skipped),
and an item too large to be sent alone is 413 naming `limit`."""

from __future__ import annotations

import apsw
import msgspec
import pytest

from handlers.audit import audit_reply
from handlers.kv import apply_set, decide_set, kv_list
from handlers.paging import fitting_page
from schema.errors import PayloadTooLarge
from schema.kv import KvListRequest, KvSetRequest
from schema.life import AuditEvent

NOW = 1_767_225_600_000


def test_kv_pages_end_exactly_where_the_next_value_would_pass_the_budget(
    conn: apsw.Connection,
) -> None:
    """For budgets from one value's reply up: every key once, in order, each reply within the
    budget and as full as it can be (the next item would not have fit)."""
    keys = [f"k{n:02d}" for n in range(12)]
    for n, key in enumerate(keys):
        value = "v" * (300 + 137 * n)  # sizes that fall on every side of a boundary
        apply_set(conn, decide_set(conn, KvSetRequest(agent_id="a", key=key, value=value), now=NOW))
    for budget in range(2200, 9000, 97):
        seen: list[str] = []
        cursor: str | None = None
        while True:
            request = KvListRequest(agent_id="a", limit=1000, cursor=cursor or msgspec.UNSET)
            page = kv_list(conn, request, now=NOW, budget=budget)
            assert page.items and len(msgspec.json.encode(page)) <= budget
            seen += [item.key for item in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
            bigger = kv_list(conn, msgspec.structs.replace(request, limit=len(page.items) + 1),
                             now=NOW, budget=2**30)  # fmt: skip
            assert len(msgspec.json.encode(bigger)) > budget, "the page ended early"
        assert seen == keys, budget


def event(seq: int, ids: int) -> AuditEvent:
    return AuditEvent(
        seq=seq, at=NOW, trigger="memory::forget", agent_id="a", source="bus", requester=None,
        ids=[f"{seq:08d}-{n:027d}" for n in range(ids)],
    )  # fmt: skip


def test_the_size_reckoned_for_a_page_is_the_size_of_its_reply() -> None:
    """Events of every size (defaults omitted from their JSON): whatever the budget, the page
    chosen fits and one more event would not."""
    events = [event(n, n % 7 * 9) for n in range(40)]

    def cursor_after(n: int) -> str | None:
        return None if n + 1 >= len(events) else f"cursor-{n:0{n % 5 + 1}d}"

    for budget in range(1000, 20000, 211):
        page = fitting_page(events, 1000, budget, audit_reply, cursor_after, "event")
        shown = len(page.events)
        assert shown > 0 and len(msgspec.json.encode(page)) <= budget
        if shown < len(events):
            assert page.next_cursor == cursor_after(shown - 1)
            more = audit_reply(events[: shown + 1], cursor_after(shown))
            assert len(msgspec.json.encode(more)) > budget


def test_an_item_too_large_to_be_sent_alone_is_413_naming_limit() -> None:
    events = [event(1, 100), event(2, 1)]
    with pytest.raises(PayloadTooLarge) as refused:
        fitting_page(events, 10, 1000, audit_reply, lambda n: None if n else "c", "event")
    assert "$.limit" in refused.value.message and "event" in refused.value.message
