"""The daemon's event loop: uvloop's (libuv) by default, asyncio's own where uvloop is missing.

Every request crosses the event loop a few times: its message read and parsed, its task started
and resumed once the writer or a reader answers, its reply written. uvloop does the loop's part
of that (callbacks, sockets, timers) in C. Issue 33, 64 stores in flight on the 2-core
development VM, four runs of each alternating: 59.5 against 65 us of the loop's CPU per store,
7112 against 6793 stores a second (medians). Only `memory-worker run` uses it; the tests run
the worker on pytest's asyncio loop as well as in processes that take the default.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

T = TypeVar("T")
EventLoop = Literal["uvloop", "asyncio"]


def run_on(kind: EventLoop, main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main) on the loop `kind` names; `uvloop` falls back to asyncio's loop where
    uvloop is not installed (it has no Windows build), which the start line says."""
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(main)
    return asyncio.run(main)


def running_loop_kind() -> str:
    """What runs the current event loop: `uvloop` or `asyncio` (for the start line)."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]
