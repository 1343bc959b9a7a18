"""The audit's side in the runtime: which call a write belongs to, and writer jobs that record
their changes in their own transaction (the rows: handlers/audit.py).

Dispatch sets `CALL` for the request's task, so that handlers stay free of the transport; a
crash keeps a change and its audit row both or neither.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from typing import TypeVar

import apsw

from handlers.audit import Call, Change, record

CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("audit_call", default=None)


R = TypeVar("R")


def audited(
    job: Callable[[apsw.Connection], R],
    changes: Callable[[R], Iterable[Change]],
    clock: Callable[[], int],
) -> Callable[[apsw.Connection], R]:
    """A writer job that also records what it changed, in its own transaction. The call is
    taken now, in the requesting task: the writer thread does not share its context."""
    call = CALL.get()

    def run(conn: apsw.Connection) -> R:
        result = job(conn)
        record(conn, call, changes(result), clock())
        return result

    return run
