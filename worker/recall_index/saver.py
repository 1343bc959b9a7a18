"""When an agent's index is written to disk (worker/recall_index/persist.py), on a thread of its
own so that neither the writer nor a recall waits for it: after a load from SQLite (the load
that a snapshot saves the next start), once an agent has taken SAVE_AFTER changes since its last
snapshot (a load replays those one row read each), and at a clean shutdown for every agent with
CLOSE_AFTER changes unsaved or more. One snapshot at a time; a failure is logged and the agent
tried again later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from worker.recall_index.agent_index import AgentKey
from worker.recall_index.persist import Frozen, Store

log = structlog.get_logger()
SAVE_AFTER = 2000
# At shutdown: fewer changes than this are cheaper to replay at the next start than to write.
CLOSE_AFTER = 200
CHECK_S = 5.0
RETRY_S = 60.0


class Saver:
    def __init__(self, store: Store, freeze: Callable[[AgentKey], Frozen | None]) -> None:
        """`freeze` takes an agent's state under the index lock (None: no longer loaded)."""
        self.store = store
        self._freeze = freeze
        self._guard = threading.Lock()
        # Per agent: changes since its last snapshot (a fresh load counts SAVE_AFTER).
        self._unsaved: dict[AgentKey, int] = {}
        self._failed: dict[AgentKey, float] = {}
        self._dropped: dict[AgentKey, int] = {}
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="index-saver", daemon=True)
        self.written = 0

    def start(self) -> None:
        self.store.clean()
        self._thread.start()

    def loaded(self, key: AgentKey, *, from_disk: bool) -> None:
        with self._guard:
            self._unsaved[key] = 0 if from_disk else SAVE_AFTER
        if not from_disk:
            self._wake.set()

    def changed(self, key: AgentKey, count: int) -> None:
        with self._guard:
            if key in self._unsaved:
                self._unsaved[key] += count
                if self._unsaved[key] >= SAVE_AFTER:
                    self._wake.set()

    def left(self, key: AgentKey) -> None:
        """The agent left the index: what was not saved is replayed from the log next time."""
        with self._guard:
            self._unsaved.pop(key, None)

    def drop(self, key: AgentKey) -> None:
        """Delete the agent's snapshots (its memories were erased), and any being written."""
        with self._guard:
            self._dropped[key] = self._dropped.get(key, 0) + 1
            self._unsaved.pop(key, None)
        self.store.drop(key)

    def _due(self, minimum: int) -> list[AgentKey]:
        now = time.monotonic()
        with self._guard:
            return [
                key
                for key, count in self._unsaved.items()
                if count >= minimum and now - self._failed.get(key, -RETRY_S) >= RETRY_S
            ]

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(CHECK_S)
            self._wake.clear()
            for key in self._due(SAVE_AFTER):
                if self._stop:
                    break
                self.save(key)

    def save(self, key: AgentKey) -> None:
        with self._guard:
            drops, before = self._dropped.get(key, 0), self._unsaved.get(key)
        frozen = self._freeze(key)
        if frozen is None or before is None:
            return
        started = time.perf_counter()
        try:
            written = self.store.write(frozen)
        except Exception as error:
            log.error("index.snapshot_failed", error=f"{type(error).__name__}: {error}")
            with self._guard:
                self._failed[key] = time.monotonic()
            return
        with self._guard:
            if self._dropped.get(key, 0) != drops:  # erased while it was written
                self.store.drop(key)
                return
            if key in self._unsaved:
                self._unsaved[key] = max(0, self._unsaved[key] - before)
            self._failed.pop(key, None)
        self.written += 1
        log.info(
            "index.snapshot_written",
            rows=frozen.rows,
            seconds=round(time.perf_counter() - started, 2),
            path=str(written),
        )

    def close(self) -> None:
        """Stop, after the snapshot being written, writing every agent with changes unsaved."""
        self._stop = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        for key in self._due(CLOSE_AFTER):
            self.save(key)
