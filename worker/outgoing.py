"""Requests this worker sends to other services (embedding, LLM) and the CLI sends to it: one
place that tells a reply from an error reply and a failure from another."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import msgspec
import nats.errors

T = TypeVar("T")
ERROR_CODE = "Nats-Service-Error-Code"
ERROR_TEXT = "Nats-Service-Error"
Reason = Literal["no_responder", "timeout", "error_reply", "bad_reply"]


class CallFailed(Exception):
    """Why a request got no usable reply; `reason` is a stable word for logs."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason: Reason = reason
        self.detail = detail


def error_reply(msg: Any) -> str | None:
    """The `code: message` of a NATS service error reply, or None for a reply."""
    headers = msg.headers or {}
    code = headers.get(ERROR_CODE)
    return None if not code else f"{code}: {headers.get(ERROR_TEXT, '')}"


async def call(nc: Any, subject: str, payload: Any, reply_type: type[T], timeout: float) -> T:
    """Send payload (a struct or plain data) and decode the reply as reply_type."""
    try:
        msg = await nc.request(subject, msgspec.json.encode(payload), timeout=timeout)
    except nats.errors.NoRespondersError:
        raise CallFailed("no_responder") from None
    except TimeoutError:  # nats.errors.TimeoutError is one
        raise CallFailed("timeout") from None
    refused = error_reply(msg)
    if refused is not None:
        raise CallFailed("error_reply", refused)
    try:
        return msgspec.json.decode(msg.data, type=reply_type)
    except msgspec.DecodeError as error:  # not JSON, or not the reply's shape
        raise CallFailed("bad_reply", str(error)) from None
