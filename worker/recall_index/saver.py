"""When an agent's index is written to disk (worker/recall_index/persist.py), on a thread of its
own so that neither the writer nor a recall waits for it: after a load from SQLite (the load
that a snapshot saves the next start), once an agent has taken `due(rows)` changes since its
last snapshot (SAVE_AFTER, or a share of a large agent's rows: a write costs about what the
agent holds), and at a clean shutdown for every agent with CLOSE_AFTER changes unsaved or more.
One snapshot at a time; a failure is logged and the agent tried again later.

The index reaches disk whether or not the agent is ever recalled: an agent that is not loaded
and takes ADOPT_AFTER changes is loaded here, from the write side (`adopt`), and then kept in
step and written like a recalled one. After each snapshot of a loaded agent is written the
agent is opened from it (`reopen`): what it gathered in RAM since (lists' tails, columns copied
when it outgrew its room) goes back to the mapped files, and its room for appends is renewed.
A kill -9 leaves the snapshot at most `due(rows)` changes (and those of one snapshot's writing)
behind, which the next start replays: SAVE_MOST bounds that replay.

A removal (a memory deleted, forgotten, erased, evicted, merged away, moved to another agent,
set to `recallPolicy: never`, or re-indexed after an edit) of a row that the agent's snapshot on
disk may hold makes that snapshot due for a rewrite SETTLE_S after it, removals meanwhile
coalesced: the rewrite (compact: worker/recall_index/compact.py) holds nothing of the removed
memory. An agent no longer loaded is opened from its snapshot for it (`cold`); when the rewrite
cannot be done the snapshot is deleted instead. So a removed memory is gone from disk at most
SETTLE_S plus one snapshot's writing time (or the writing of one already under way) after the
commit that removed it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import structlog

from worker.affinity import every_cpu
from worker.recall_index.agent_index import AgentKey
from worker.recall_index.frozen import Frozen
from worker.recall_index.persist import Store

log = structlog.get_logger()
SAVE_AFTER = 2000
# A large agent is written once this share of its rows changed, but never more than SAVE_MOST
# changes behind: a kill -9 leaves those to replay (about 60 us each). A write costs about what
# the agent holds (3.5 us a memory): an eighth is some 30 us a change, a tenth of what a store
# costs; at a million memories a snapshot every 16 000 changes cost 220 us a store.
SAVE_SHARE = 1 / 8
SAVE_MOST = 64_000
# Changes of an agent that is not loaded after which it is loaded from the write side, once its
# writes pause for ADOPT_QUIET_S (kept in step during a burst of stores, it cost the burst about
# 45% of its throughput), or at once past ADOPT_MOST changes (what a restart after a kill -9 would
# read from SQLite, while a stand-in answers: worker/recall_index/stand_in.py).
ADOPT_AFTER = 200
ADOPT_QUIET_S = 2.0
ADOPT_MOST = 50_000
# At shutdown: fewer changes than this are cheaper to replay at the next start than to write.
CLOSE_AFTER = 200
CHECK_S = 5.0
RETRY_S = 60.0
# Removals within this long of the first are rewritten out of the snapshot together.
SETTLE_S = 1.0


def due(rows: int) -> int:
    """Changes after which an agent of `rows` rows is written again."""
    return min(SAVE_MOST, max(SAVE_AFTER, int(rows * SAVE_SHARE)))


class Saver:
    def __init__(
        self,
        store: Store,
        freeze: Callable[[AgentKey], Frozen | None],
        cold: Callable[[AgentKey], Frozen | None],
        hold: Callable[[AgentKey, Frozen], AbstractContextManager[None]],
        load: Callable[[AgentKey], object] | None = None,
        reopen: Callable[[AgentKey], object] | None = None,
    ) -> None:
        """`freeze` takes an agent's state under the index lock (None: no longer loaded);
        `cold` opens an agent that is not loaded from its snapshot, caught up (None: none);
        `hold` is held while a snapshot is written (the index counts what writing it takes);
        `load` loads an agent into the index (adopted from the write side); `reopen` opens a
        loaded agent again from the snapshot just written."""
        self.store = store
        self._freeze = freeze
        self._cold = cold
        self._hold = hold
        self._load = load
        self._reopen = reopen
        # Agents to load from the write side (when they last changed, their changes while not
        # loaded), and the rows of the agents counted in _unsaved.
        self._adopt: dict[AgentKey, tuple[float, int]] = {}
        self._rows: dict[AgentKey, int] = {}
        # Loaded from SQLite: written at the next check, whatever their size.
        self._fresh: set[AgentKey] = set()
        # Per agent with removals not yet rewritten out: (when it is due, removals so far).
        self._removals: dict[AgentKey, tuple[float, int]] = {}
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

    def loaded(self, key: AgentKey, *, from_disk: bool, rows: int, replayed: int = 0) -> None:
        """Loaded from SQLite: written at the next check (within CHECK_S), not at once, so that
        the writing does not compete with the recall that waited for the load. Opened from its
        snapshot: the changes replayed onto it count as unsaved (so that a snapshot left far
        behind, by restarts before it was due, is written again)."""
        with self._guard:
            self._unsaved[key], self._rows[key] = replayed if from_disk else 0, rows
            if not from_disk:
                self._fresh.add(key)
            self._adopt.pop(key, None)

    def changed(self, key: AgentKey, count: int, rows: int) -> None:
        with self._guard:
            if key in self._unsaved:
                self._unsaved[key] += count
                self._rows[key] = rows
                if self._unsaved[key] >= due(rows):
                    self._wake.set()

    def adopt(self, key: AgentKey, changes: int = ADOPT_AFTER) -> None:
        """The agent took another ADOPT_AFTER changes while not loaded (`changes` in all): load
        it (on this thread) once its writes pause, or past ADOPT_MOST changes."""
        with self._guard:
            self._adopt[key] = (time.monotonic(), changes)
        self._wake.set()

    def left(self, key: AgentKey) -> None:
        """The agent left the index: what was not saved is replayed from the log next time."""
        with self._guard:
            self._unsaved.pop(key, None)
            self._rows.pop(key, None)
            self._fresh.discard(key)

    def removed(self, key: AgentKey) -> None:
        """A row its snapshot may hold was removed: rewrite the snapshot SETTLE_S from now."""
        with self._guard:
            due, count = self._removals.get(key, (time.monotonic() + SETTLE_S, 0))
            self._removals[key] = (due, count + 1)
        self._wake.set()

    def _timeout(self) -> float:
        with self._guard:
            dues = [due for due, _ in self._removals.values()]
            dues += [last + ADOPT_QUIET_S for last, _ in self._adopt.values()]
            soonest = min(dues, default=None)
        if soonest is None:
            return CHECK_S
        return max(0.0, min(CHECK_S, soonest - time.monotonic()))

    def _removals_due(self, *, every: bool = False) -> list[AgentKey]:
        now = time.monotonic()
        with self._guard:
            return [key for key, (due, _) in self._removals.items() if every or due <= now]

    def rewrite(self, key: AgentKey) -> None:
        """Rewrite the agent's snapshot without what was removed, or delete it if that fails."""
        with self._guard:
            _, count = self._removals.get(key, (0.0, 0))
        try:
            frozen = self._freeze(key) or self._cold(key)
            written = frozen is not None and self.save(key, frozen)
        except Exception as error:
            log.error("index.rewrite_failed", error=f"{type(error).__name__}: {error}")
            written = False
        if not written:
            self.store.drop(key)
        with self._guard:
            current = self._removals.get(key)
            if current is None:  # erased meanwhile (drop): nothing left to rewrite
                return
            if current[1] == count:
                del self._removals[key]
            else:  # removed meanwhile: maybe after the freeze; again, now
                self._removals[key] = (time.monotonic(), current[1])

    def drop(self, key: AgentKey) -> None:
        """Delete the agent's snapshots (its memories were erased), and any being written."""
        with self._guard:
            self._dropped[key] = self._dropped.get(key, 0) + 1
            self._unsaved.pop(key, None)
            self._removals.pop(key, None)
            self._adopt.pop(key, None)
            self._fresh.discard(key)
        self.store.drop(key)

    def _due(self, minimum: int | None = None) -> list[AgentKey]:
        """The agents to write: with `minimum` changes unsaved, else `due` theirs."""
        now = time.monotonic()
        with self._guard:
            return [
                key
                for key, count in self._unsaved.items()
                if (
                    key in self._fresh
                    or count >= (due(self._rows.get(key, 0)) if minimum is None else minimum)
                )
                and now - self._failed.get(key, -RETRY_S) >= RETRY_S
            ]

    def _adopt_due(self, *, every: bool = False) -> list[AgentKey]:
        now = time.monotonic()
        with self._guard:
            return [
                key
                for key, (last, changes) in self._adopt.items()
                if every or now - last >= ADOPT_QUIET_S or changes >= ADOPT_MOST
            ]

    def _run(self) -> None:
        every_cpu()
        while not self._stop:
            self._wake.wait(self._timeout())
            self._wake.clear()
            for key in self._removals_due():
                if self._stop:
                    break
                self.rewrite(key)
            for key in self._adopt_due():
                if self._stop:
                    break
                self.adopt_now(key)
            for key in self._due():
                if self._stop:
                    break
                self.save(key)

    def adopt_now(self, key: AgentKey) -> None:
        """Load an agent from the write side (its snapshot then follows the rules of a loaded
        agent's); a failure is logged and the agent left to its next changes."""
        with self._guard:
            self._adopt.pop(key, None)
        if self._load is None:
            return
        try:
            self._load(key)
        except Exception as error:
            log.error("index.adopt_failed", error=f"{type(error).__name__}: {error}")

    def save(self, key: AgentKey, frozen: Frozen | None = None) -> bool:
        """Write the agent's snapshot (of `frozen`, else of the loaded agent); whether it was
        written (or an equal one is there)."""
        with self._guard:
            drops, before = self._dropped.get(key, 0), self._unsaved.get(key, 0)
        frozen = frozen or self._freeze(key)
        if frozen is None:
            return False
        started = time.perf_counter()
        try:
            with self._hold(key, frozen):
                written = self.store.write(frozen)
        except Exception as error:
            log.error("index.snapshot_failed", error=f"{type(error).__name__}: {error}")
            with self._guard:
                self._failed[key] = time.monotonic()
            return False
        with self._guard:
            if self._dropped.get(key, 0) != drops:  # erased while it was written
                self.store.drop(key)
                return True
            if key in self._unsaved:
                self._unsaved[key] = max(0, self._unsaved[key] - before)
            self._failed.pop(key, None)
            self._fresh.discard(key)
        self.written += 1
        log.info(
            "index.snapshot_written",
            rows=int(frozen.live.sum()),
            seconds=round(time.perf_counter() - started, 2),
            path=str(written),
        )
        if self._reopen is not None and not self._stop and written is not None:
            try:
                self._reopen(key)
            except Exception as error:
                log.error("index.reopen_failed", error=f"{type(error).__name__}: {error}")
        return True

    def close(self) -> None:
        """Stop, after the snapshot being written, writing every agent with changes unsaved:
        those loaded, and those that took ADOPT_AFTER changes without being loaded yet."""
        self._stop = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        for key in self._removals_due(every=True):
            self.rewrite(key)
        for key in self._adopt_due(every=True):
            self.adopt_now(key)
        for key in self._due(CLOSE_AFTER):
            self.save(key)
