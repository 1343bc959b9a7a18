"""The tables that record what happened rather than what an agent holds: the audit log, the
keys of ingested messages, the recall index's change log, the schedule's claims and a shard
file's log position. None travels in an export file; the audit and the ingestion keys of an
agent go with its erasure.
"""

from __future__ import annotations

from handlers.tables.table import Skip, Stat, Table, counted, delete_rows

AUDIT = Table(
    name="audit",
    owner="agent",
    # An erased agent is one that never was; memory::erase records its own row after this one.
    erase=delete_rows,
    transfer=Skip(
        "the audit says what happened to this database; an import records its own row "
        "(memory::import)"
    ),
    stats=(
        Stat(
            key="audit_events",
            count=counted("SELECT count(*) FROM audit WHERE {where}"),
            label="audit events",
            metric="Rows in the audit log.",
        ),
    ),
)
INGESTED = Table(
    name="ingested",
    owner="agent",
    erase=delete_rows,  # the keys of the agent's ingested writes (handlers/ingested.py)
    transfer=Skip("the keys of this database's ingestion streams mean nothing elsewhere"),
)
_CHANGES = "the recall index's own log (worker/recall_index/changes.py), not data"
MEMORY_CHANGES = Table(
    name="memory_changes",
    owner=None,
    erase=Skip(
        _CHANGES + ": erasing memories logs their removal here, which the index follows; "
        "ids, never content"
    ),
    transfer=Skip(_CHANGES),
)
MEMORY_CHANGES_TRIMMED = Table(
    name="memory_changes_trimmed",
    owner=None,
    erase=Skip(_CHANGES + ": where it was trimmed, so that an older snapshot is known stale"),
    transfer=Skip(_CHANGES),
)
SCHEDULE_CLAIMS = Table(
    name="schedule_claims",
    owner=None,
    erase=Skip("the fire times workers sharing the file claimed (scheduler/runner.py): no agent's"),
    transfer=Skip("the fire times workers sharing this file claimed"),
)
SHARD_LOG = Table(
    name="shard_log",
    owner=None,
    erase=Skip("which log sequence a shard's file applied (worker/shards/node.py): no agent's"),
    transfer=Skip("a shard file's position in its partition's log"),
)
