"""The recall index's memory budget (`MEMORY_WORKER_INDEX_MEMORY_MB`) and the state it counts:
the loaded agents, least recently used first, each counted as what it holds (AgentIndex.nbytes),
with what the saver allocates while it writes a snapshot (`saving`); what leaves is given back
to the system (worker/recall_index/release.py). The base of worker/recall_index/index.py's
MemoryIndex, which loads agents and keeps them in step; both under the one lock made here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from worker.recall_index.agent_index import AgentIndex, AgentKey
from worker.recall_index.frozen import Frozen
from worker.recall_index.release import Releaser
from worker.recall_index.saver import Saver


class Budget:
    def __init__(self, max_bytes: int, releaser: Releaser) -> None:
        self._max_bytes = max_bytes
        self._agents: OrderedDict[AgentKey, AgentIndex] = OrderedDict()
        # Each loaded agent's bytes as last counted (AgentIndex.nbytes), and their sum: counted
        # again when the agent changes or is recalled, not all of them at each load.
        self._sizes: dict[AgentKey, int] = {}
        self._recalled: dict[AgentKey, tuple[int, int]] = {}  # AgentIndex.recalled when counted
        self._total = 0
        # What the saver holds while it writes a snapshot (`saving`), and the agent it writes.
        self._held = 0
        self._saving: AgentKey | None = None
        # Told what the index lets go of, gives freed memory back (worker/recall_index/release.py).
        self._releaser = releaser
        # Bumped when the index cannot follow the change log: loads begun before are not kept.
        self._generation = 0
        # Private: a caller holding it while waiting for a load would deadlock with that load.
        self._lock = threading.RLock()
        # Changes of agents that are not loaded, since they were last (the saver adopts an
        # agent that takes ADOPT_AFTER of them: worker/recall_index/saver.py).
        self._cold: dict[AgentKey, int] = {}
        self._saver: Saver | None = None

    def _count(self, key: AgentKey) -> None:
        """Count the loaded agent's bytes again (under the lock)."""
        agent = self._agents[key]
        size = agent.nbytes()
        self._total += size - self._sizes.get(key, 0)
        self._sizes[key] = size
        self._recalled[key] = agent.recalled()

    def _usable(self, key: AgentKey) -> AgentIndex | None:
        """Under the lock: the agent's index if loaded and not too fragmented (then loaded
        again), as used now: the most recently used, counted again if recalls added to it."""
        found = self._agents.get(key)
        if found is None or found.dead > max(1024, found.live_count):
            return None
        self._agents.move_to_end(key)
        if found.recalled() != self._recalled.get(key):
            self._count(key)  # what recalls added since (access counts, words' bits)
        self._shrink(keep=key)
        return found

    def _shrink(self, keep: AgentKey | None = None) -> None:
        """Least recently used agents leave until the counted bytes are within the budget; never
        `keep` (the agent a recall waits for), the agent being saved, or the last agent."""
        while self._total + self._held > self._max_bytes and len(self._agents) > 1:
            oldest = next((k for k in self._agents if k not in (keep, self._saving)), None)
            if oldest is None:
                return
            del self._agents[oldest]
            size = self._sizes.pop(oldest)
            self._recalled.pop(oldest, None)
            self._total -= size
            self._releaser.freed(size)
            if self._saver is not None:
                self._saver.left(oldest)

    @contextmanager
    def saving(self, key: AgentKey, frozen: Frozen) -> Iterator[None]:
        """While the saver writes the agent's snapshot (on its thread): what the writing
        allocates is counted in the budget (and what `frozen` holds, when the agent is not
        loaded: a cold rewrite), other agents leaving to make room; the agent does not leave."""
        with self._lock:
            held = frozen.transient() + (0 if key in self._agents else frozen.nbytes())
            self._held += held
            self._saving = key
            self._shrink(keep=key)
        try:
            yield
        finally:
            with self._lock:
                self._held -= held
                self._saving = None
            self._releaser.freed(held)

    def counted_bytes(self) -> int:
        """The bytes the budget counts now: the loaded agents' and what the saver holds."""
        with self._lock:
            return self._total + self._held

    def forget_all(self) -> None:
        """Drop every agent (they reload on demand), and keep no load begun before."""
        with self._lock:
            for key in self._agents:
                if self._saver is not None:
                    self._saver.left(key)
            self._agents.clear()
            self._sizes.clear()
            self._recalled.clear()
            self._cold.clear()
            self._releaser.freed(self._total)
            self._total = 0
            self._generation += 1

    def loaded_agents(
        self, tenant: str | None = None, granted: Callable[[str], bool] | None = None
    ) -> int:
        """Agents loaded now: of every tenant, or (for a tenant's memory::stats) of one, and of
        those the agents `granted` says yes to (a user's grants). Without the lock, as the event
        loop calls it: copying the keys is one atomic step."""
        if tenant is None:
            return len(self._agents)
        return sum(
            1
            for loaded, agent_id in list(self._agents)
            if loaded == tenant and (granted is None or granted(agent_id))
        )
