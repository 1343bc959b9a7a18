"""The small error hierarchy every refusal or failure is raised as.

Each class carries the NATS service error code (the `Nats-Service-Error-Code` header) and the
stable snake_case word of the contract's error body, so dispatch can map any of them without a
table of its own.
"""

from __future__ import annotations

import msgspec


class WorkerError(Exception):
    status = "500"
    code = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message.replace("\r", " ").replace("\n", " ")


class InvalidRequest(WorkerError):
    status = "400"
    code = "invalid_request"


class NotFound(WorkerError):
    status = "404"
    code = "not_found"


class PayloadTooLarge(WorkerError):
    status = "413"
    code = "payload_too_large"


class Internal(WorkerError):
    status = "500"
    code = "internal"


class Unavailable(WorkerError):
    status = "503"
    code = "unavailable"


class ErrorDetail(msgspec.Struct, frozen=True):
    code: str
    message: str


class ErrorReply(msgspec.Struct, frozen=True):
    error: ErrorDetail


def error_reply(error: WorkerError) -> ErrorReply:
    return ErrorReply(error=ErrorDetail(code=error.code, message=error.message))
