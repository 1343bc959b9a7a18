"""What the Python client raises: the worker's own refusals, and failures on this side.

A worker's error reply comes back as the class of schema/errors.py it was raised as on the
worker (InvalidRequest for `400`, Forbidden for `403`, ...), carrying the `status` of the
`Nats-Service-Error-Code` header and the `code` and `message` of the body
`{"error": {"code", "message"}}`. What fails before a worker could answer is a ClientError,
one class per thing to do about it, which the CLI maps to its exit codes.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from schema.errors import (
    Conflict,
    ErrorReply,
    Forbidden,
    Internal,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    Repeated,
    Unavailable,
    WorkerError,
)
from worker.outgoing import ERROR_CODE, ERROR_TEXT

BY_STATUS: dict[str, type[WorkerError]] = {
    kind.status: kind
    for kind in (
        InvalidRequest,
        Forbidden,
        NotFound,
        Conflict,
        PayloadTooLarge,
        Internal,
        Unavailable,
        Repeated,  # between shards only: an ingested write's redelivery (handlers/ingested.py)
    )
}


class ClientError(Exception):
    """No reply from a worker could be had; the message says why, with the URL redacted."""


class Unreachable(ClientError):
    """No connection to NATS within the timeout (refused, TLS, credentials), or it was lost."""


class NoWorker(ClientError):
    """NATS is up, but no memory worker answered within the timeout."""


class RequestTooLarge(ClientError):
    """The request is larger than the NATS server's max_payload; it was not sent."""


class BadReply(ClientError):
    """An answer came that is not the trigger's reply: another version of the worker, or
    something else answering on its subject."""


def refusal(headers: Mapping[str, str] | None, body: bytes) -> WorkerError | None:
    """The error a reply carries, or None for a success. The class comes from the status
    header; the code and message from the body, else from the header's one-line text."""
    status = (headers or {}).get(ERROR_CODE)
    if not status:
        return None
    try:
        detail = msgspec.json.decode(body, type=ErrorReply).error
    except msgspec.DecodeError:
        detail = None
    message = detail.message if detail is not None else (headers or {}).get(ERROR_TEXT, "")
    error = BY_STATUS.get(status, Internal)(message)
    error.status = status  # as the worker said, even a status this client does not know
    if detail is not None:
        error.code = detail.code
    return error
