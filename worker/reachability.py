"""How the worker waits for a NATS server it cannot reach: one clear warning at a calm pace
instead of one per attempt, and a budget after which it gives up.

nats-py retries every half second and reports each failure; a line per failure buries the
reason. Here the first failure is reported at once, then one line every REPORT_EVERY_S while
the server stays away, each naming the server, what failed and what to do. Past the budget
(MEMORY_WORKER_NATS_RECONNECT_BUDGET) the worker exits non-zero, at start as after losing a
connection, so that its supervisor restarts it rather than it serving nothing forever.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

import structlog

from worker.redact import redact

log = structlog.get_logger()
REPORT_EVERY_S = 15.0
BUDGET_VARIABLE = "MEMORY_WORKER_NATS_RECONNECT_BUDGET"
HINT = (
    "is a NATS server running there? start it, or point --nats-url / MEMORY_WORKER_NATS_URL "
    "at one that is"
)
REFUSED_HINT = (
    "the server refuses the worker: check MEMORY_WORKER_NATS_USER/_PASSWORD, _TOKEN, _CREDS "
    "and the TLS settings"
)


def failure_text(error: BaseException) -> str:
    """What failed, in words: the OS's phrasing of a refused connection is not one."""
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, TimeoutError):
        return "no answer in time"
    if isinstance(error, socket.gaierror):
        return f"unknown host ({error.strerror})"
    return redact(str(error) or type(error).__name__)


class Reachability:
    """The state of one connection's wait for its server: since when it is down, the last
    failure, when it last said so, and the timer that gives up."""

    def __init__(self, url: str, budget: float, clock: Callable[[], float] = time.monotonic):
        self.url = redact(url)
        self.budget = budget
        self._clock = clock
        self._down_since: float | None = None
        self._reported: float | None = None
        self._error: BaseException | None = None
        self._timer: asyncio.TimerHandle | None = None

    def down(self, give_up: Callable[[], None] | None = None) -> None:
        """The server went away (or has not answered yet): start the clock, and call give_up
        once the budget is spent unless back() comes first."""
        self._down_since = self._clock()
        self._reported = None
        self._error = None
        if give_up is not None:
            self._cancel_timer()
            self._timer = asyncio.get_running_loop().call_later(self.budget, give_up)

    def failed(self, error: BaseException, *, refused: bool = False) -> None:
        """One attempt failed: say so if nothing was said for REPORT_EVERY_S. `refused`: the
        server answered and turned the worker away (credentials, certificate)."""
        self._error = error
        now = self._clock()
        if self._down_since is None:
            self._down_since = now
        if self._reported is not None and now - self._reported < REPORT_EVERY_S:
            return
        self._reported = now
        waited = now - self._down_since
        log.warning(
            "nats.unreachable",
            url=self.url,
            error=failure_text(error),
            hint=REFUSED_HINT if refused else HINT,
            waited_s=round(waited),
            exit_in_s=max(0, round(self.budget - waited)),
        )

    def back(self) -> None:
        """Connected again: the budget is whole for the next loss."""
        self._down_since = None
        self._cancel_timer()

    def close(self) -> None:
        self._cancel_timer()

    def gave_up(self) -> str:
        """One line for the exit: which server, what failed, for how long, and the setting."""
        what = failure_text(self._error) if self._error is not None else "no connection"
        return (
            f"cannot reach NATS at {self.url} ({what}) for {self.budget:g} s, the reconnect "
            f"budget ({BUDGET_VARIABLE}); exiting so that a supervisor can restart the worker "
            "once NATS is back"
        )

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
