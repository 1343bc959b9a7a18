"""Memory the recall index frees, given back to the system.

glibc's malloc keeps what a process frees for its next allocations: in the heap of the thread's
arena (each reader thread that loads agents and the saver's thread have one), and, once a large
block has been freed, with its mmap threshold raised to that block's size, so that later arrays
of that size come from the heap too. So the worker's RSS never came back down after agents
left the index: 4 000 agents loaded then 3 000 of them dropped, in process, left RSS at 711 MB
with the 6.7 MB rooms of before (177 MB once trimmed), and 236 MB with rooms sized to the
agent (135 MB once trimmed). `malloc_trim(0)` gives every free page of every arena back
(madvise); it took 15-45 ms after such a release, about 1 ms with nothing to give, and holds
each arena's lock while it walks it. So it runs on a thread of its own (one for the process,
`RELEASER`, whatever the indexes: a shard has one per partition), started at the first
release, once RELEASE_FROM bytes were freed, at most once every PAUSE_S. Where malloc_trim does
not exist (not glibc) nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Callable
from typing import Any

from worker.affinity import every_cpu

RELEASE_FROM = 16 << 20
PAUSE_S = 1.0


def _libc(function: str) -> Any | None:
    """The C library's function of that name, or None where it has none (not glibc)."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), function) if name else None
    except (OSError, AttributeError):
        return None


def malloc_trim() -> Callable[[], None] | None:
    """glibc's malloc_trim(0), or None where the C library has none."""
    trim = _libc("malloc_trim")
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


# glibc's mallopt parameters, and the values `keep_freed_blocks` sets.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_FROM = 32 << 20  # the largest glibc's own adjustment reaches (its DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_FROM = 2 * MMAP_FROM  # glibc keeps this ratio when it adjusts them itself


def keep_freed_blocks() -> bool:
    """Let glibc's malloc keep a freed block of up to 32 MB for the next allocation instead of
    giving it back to the system at once; whether it was set (glibc only).

    A recall of a million-memory agent makes temporaries of 1-8 MB each (a pass over every row)
    on a reader thread. glibc maps such a block fresh and unmaps it when freed until a freed
    mapped block raises its threshold to that block's size, and it gives back a thread heap's
    top once twice that threshold is free: a recall freed more than that, so every recall
    took about 1 000 page faults and zeroed their pages again, 5-8 ms of a 25 ms recall in the
    worker (in a process of one thread: 15 faults). These are the values glibc's adjustment
    ends at once a 32 MB block was freed, set from the start; what a release frees still goes
    back (`Releaser`: malloc_trim gives back every free page whatever the threshold)."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_FROM)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_FROM))


class Releaser:
    def __init__(
        self, trim: Callable[[], None] | None = None, release_from: int = RELEASE_FROM
    ) -> None:
        self._trim = trim if trim is not None else malloc_trim()
        self._release_from = release_from
        self._guard = threading.Lock()
        self._pending = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="index-release", daemon=True)
        self.trims = 0

    def freed(self, nbytes: int) -> None:
        """The index let go of about this many bytes (agents that left, a snapshot written)."""
        if self._trim is None:
            return
        with self._guard:
            self._pending += nbytes
            if self._pending < self._release_from:
                return
            self._wake.set()
            if not self._thread.is_alive() and not self._stop.is_set():
                self._thread.start()

    def _run(self) -> None:
        every_cpu()
        while not self._stop.is_set():
            self._wake.wait()
            if self._stop.is_set():
                return
            with self._guard:
                self._pending = 0
                self._wake.clear()
            assert self._trim is not None
            self._trim()
            self.trims += 1
            self._stop.wait(PAUSE_S)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()


RELEASER = Releaser()
