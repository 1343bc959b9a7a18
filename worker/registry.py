"""The one table of triggers, assembled from the rows the feature modules of worker/triggers/
export (what a row is: worker/route.py).

A trigger's whole story is in three places: its row in its feature's module, its structs in
`schema/` and its function in `handlers/`. Everything else that must know of a trigger reads the
row: dispatch runs it as its kind says, nats.micro serves it at the subject its name makes
(worker/bus.py), the shard router sends it where its scope says (worker/shards/router.py),
durable ingestion takes it when the row says so (worker/ingest.py), the typed client sends it
(worker/client.py), `memory-worker nats-config` exports and imports it (worker/nats_config.py),
and a shard replays what it logged (`all_writes`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.recall_index.backfill import EMBED, EMBEDDED
from worker.route import Route, ingestible, table
from worker.shards.claims import CRON_WRITES
from worker.topic_titles import TITLING
from worker.topic_titles import TRIGGER as TITLE
from worker.triggers import (
    agents,
    canonical,
    facts,
    kg,
    kv,
    life,
    maintenance,
    memory,
    sessions,
    tasks,
    topics,
    usage,
)
from worker.writes import Write

ROUTES = table(
    memory.ROUTES,
    life.ROUTES,
    sessions.ROUTES,
    maintenance.ROUTES,
    kg.ROUTES,
    kv.ROUTES,
    tasks.ROUTES,
    usage.ROUTES,
    canonical.ROUTES,
    facts.ROUTES,
    agents.ROUTES,
    topics.ROUTES,
)
BY_TRIGGER = {route.trigger: route for route in ROUTES}
# The trigger of each verb that durable ingestion takes (`kg.add` -> memory::kg::add).
INGESTED = ingestible(ROUTES)
# Writes of no trigger's: the backfill's vectors, the schedule's claims (sharded mode) and the
# LLM's topic texts.
UNROUTED_WRITES: dict[str, Write[Any, Any]] = {EMBEDDED: EMBED} | CRON_WRITES
UNROUTED_WRITES[TITLE] = TITLING


def all_writes(routes: Iterable[Route[Any, Any]] = ROUTES) -> dict[str, Write[Any, Any]]:
    """Every decide and apply pair a shard may find in its log, by the trigger it logs."""
    logged: dict[str, Write[Any, Any]] = {}
    for route in routes:
        logged |= route.logged()
    return logged | UNROUTED_WRITES
