"""The small error hierarchy every refusal or failure is raised as.

Each class carries the NATS service error code (the `Nats-Service-Error-Code` header) and the
stable snake_case word of the contract's error body, so dispatch can map any of them without a
table of its own.
"""

from __future__ import annotations

import re

import msgspec

# msgspec and worker/locate.py name the offending field as "at `$.path`"; the last one wins.
FIELD_PATH = re.compile(r"at `(\$[^`]{0,200})`")


class WorkerError(Exception):
    status = "500"
    code = "internal"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = one_line(message)
        self.field = field if field is not None else field_of(message)


def field_of(message: str) -> str | None:
    """The JSON path a message names (`$.agentId`), so a refusal can be logged by where it went
    wrong without the message, which may quote the request's values."""
    paths = FIELD_PATH.findall(message)
    return one_line(paths[-1]) if paths else None


MAX_MESSAGE_CHARS = 480


def one_line(message: str) -> str:
    """A message fit for the one-line `Nats-Service-Error` header: printable, and short even
    when it quotes a huge key or value from the request (a reply over NATS's max payload would
    cost the worker its connection)."""
    printable = "".join(
        char if char.isprintable() else ascii(char)[1:-1]
        for char in message.replace("\r", " ").replace("\n", " ")
    )
    if len(printable) <= MAX_MESSAGE_CHARS:
        return printable
    return printable[:320] + " … " + printable[-150:]


class InvalidRequest(WorkerError):
    status = "400"
    code = "invalid_request"


class Forbidden(WorkerError):
    status = "403"
    code = "forbidden"


class NotFound(WorkerError):
    status = "404"
    code = "not_found"


class Conflict(WorkerError):
    status = "409"
    code = "conflict"


class PayloadTooLarge(WorkerError):
    status = "413"
    code = "payload_too_large"


class Internal(WorkerError):
    status = "500"
    code = "internal"


class Unavailable(WorkerError):
    status = "503"
    code = "unavailable"


class Repeated(WorkerError):
    """Not a failure: the ingested message a write belongs to was applied already (a redelivery
    after a crash), so nothing was done again (handlers/ingested.py). Ingestion acknowledges it;
    no bus request ever gets it."""

    status = "208"
    code = "already_applied"


class ErrorDetail(msgspec.Struct, frozen=True):
    code: str
    message: str


class ErrorReply(msgspec.Struct, frozen=True):
    error: ErrorDetail


def error_reply(error: WorkerError) -> ErrorReply:
    return ErrorReply(error=ErrorDetail(code=error.code, message=error.message))
