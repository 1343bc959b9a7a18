"""How values are shown: times as UTC dates, and the filters the templates use."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def when(millis: int | None) -> str:
    """`2026-11-26 11:04 UTC` for a time in ms; an empty string for none."""
    if millis is None:
        return ""
    return datetime.fromtimestamp(millis / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def day_of(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).strftime("%Y-%m-%d")


def millis_of_day(text: str) -> int | None:
    """The start of a `YYYY-MM-DD` day (UTC) in ms; None for anything else."""
    try:
        day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(day.timestamp() * 1000)


def listed(values: list[Any] | None) -> str:
    return ", ".join(str(value) for value in values or [])


FILTERS = {"when": when, "listed": listed}
