"""The event loop's thread and the writer's on one CPU, every other thread on any.

The two take turns at the GIL many times per batch of writes (the writer lets go of it for each
SQLite step). On two CPUs each turn wakes the other CPU: a futex, and in a VM an interrupt to a
halted virtual CPU, tens of microseconds each. On one CPU the turn is a switch between threads.
Issue 33, 64 stores in flight on the 2-core development VM: on one CPU the worker used a fifth
less CPU per store and stored a tenth more per second. Neither thread can use more than one CPU
at a time anyway, as they share the GIL; the threads that run outside it (readers ranking with
numpy, the model's lanes, the index saver) keep every CPU.

A thread starts with its creator's CPUs, so the loop is pinned once the worker has started (the
embedded nats-server, the model's own threads and the writer's were made with every CPU; the
writer's is then pinned by its id), and the threads the loop starts after that are given every
CPU back as they start (`every_cpu`, an initializer of their pools).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

# The CPUs the process may use, read at import (before any thread is pinned).
EVERY_CPU: frozenset[int] = frozenset(
    os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ()
)


def pin_to_one_cpu(also: Iterable[int | None] = ()) -> int | None:
    """Keep the calling thread, and the threads `also` names by native id, on the CPU the
    calling thread runs on now (one of the process's); the CPU, or None where there is nothing
    to choose (one CPU) or no way to (not Linux)."""
    if len(EVERY_CPU) < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    cpu = current_cpu()
    if cpu not in EVERY_CPU:
        cpu = min(EVERY_CPU)
    for thread in (0, *also):
        if thread is not None:
            os.sched_setaffinity(thread, {cpu})
    return cpu


def every_cpu() -> None:
    """Give the calling thread every CPU of the process back (a new thread's first step)."""
    if EVERY_CPU and os.sched_getaffinity(0) != EVERY_CPU:
        os.sched_setaffinity(0, EVERY_CPU)


def current_cpu() -> int | None:
    """The CPU the calling thread last ran on (field 39 of its /proc stat), if known."""
    try:
        stat = Path("/proc/thread-self/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[36])
