"""Credentials never reach a log line or a printed message.

A NATS URL may carry them (`nats://alice:secret@host:4222`, `nats://token@host`), and a URL
travels into start-up logs, reconnect warnings, error messages and CLI output. Every place that
shows one passes it through `redact`; `redact_event`, a structlog processor, applies it to every
logged string as well, so that a field added later (or an exception's text) cannot leak one.
Paths of creds files are not secret and are shown as they are.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any

# The userinfo of a URL: from `scheme://` up to the last `@` before whitespace or the next
# `//` (the next URL of a list), so that a password holding `@`, `:`, `,` or `/` is masked whole.
USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>(?:[^/\s]|/(?!/))*)@")
MASK = "***"


def _mask(match: re.Match[str]) -> str:
    user, colon, _ = match.group("userinfo").partition(":")
    # `user:password@` keeps the user, which helps an operator; a lone `token@` is all secret.
    shown = f"{user}:{MASK}" if colon else MASK
    return f"{match.group('scheme')}{shown}@"


def redact(text: str) -> str:
    """`text` with the password or token of every URL in it masked:
    `nats://alice:secret@host:4222` -> `nats://alice:***@host:4222`,
    `nats://token@host` -> `nats://***@host`. Text without credentials comes back unchanged."""
    if "@" not in text or "://" not in text:
        return text
    return USERINFO.sub(_mask, text)


def redact_event(
    logger: Any, method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: `redact` every string value of the event (after exceptions are
    formatted, so their text is covered too). Two substring tests per field when nothing is
    to be masked, so it costs next to nothing on the hot path."""
    for key, value in event.items():
        if isinstance(value, str) and "@" in value and "://" in value:
            event[key] = redact(value)
    return event
