"""The fact store's tables (handlers/facts/): facts, and fact_sources, the memories each came
from, carried in its fact's record.

Import keeps a fact's times and status as exported and gives each fact's sources the ids their
memories got (a memory the agent held already under another id, or one given a fresh id); a
fact id already here is skipped (the same file twice changes nothing), one another agent holds
gets a fresh id. The imported facts' timelines are then recomputed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import apsw
import msgspec

from handlers.facts.keys import compared, line_of
from handlers.facts.timeline import recompute_all
from handlers.tables.records import NonEmpty, Record, insert_once, staged
from handlers.tables.table import CountScope, Skip, Stat, Table, Transfer, counted, delete_rows
from schema.base import DEFAULT_TENANT, Millis, StoredId, Tenant, Unit


class FactRecord(Record, frozen=True, tag="fact"):
    agent_id: StoredId
    id: NonEmpty
    subject: NonEmpty
    predicate: NonEmpty
    object: NonEmpty
    valid_from: Millis
    recorded_at: Millis
    confidence: Unit
    sources: list[NonEmpty] = msgspec.field(default_factory=list)
    sourced: bool = False
    valid_to: Millis | None = None
    ended_at: Millis | None = None
    expired_at: Millis | None = None
    superseded_by: str | None = None
    tenant: Tenant = DEFAULT_TENANT


FACT_COLUMNS = (
    "id, subject, predicate, object, valid_from, recorded_at, confidence, sourced, valid_to, "
    "ended_at, expired_at, superseded_by"
)


def export_facts(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[FactRecord]:
    rows: list[Any] = conn.execute(
        f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant = ? AND agent_id = ? ORDER BY seq",
        (tenant, agent_id),
    ).fetchall()
    for fact_id, subject, predicate, obj, valid_from, recorded_at, confidence, *rest in rows:
        sources = [
            str(memory_id)
            for (memory_id,) in conn.execute(
                "SELECT memory_id FROM fact_sources WHERE fact_id = ?", (fact_id,)
            )
        ]
        sourced, valid_to, ended_at, expired_at, superseded_by = rest
        yield FactRecord(
            tenant=tenant, agent_id=agent_id, id=fact_id, subject=subject, predicate=predicate,
            object=obj, valid_from=valid_from, recorded_at=recorded_at, confidence=confidence,
            sources=sources, sourced=bool(sourced), valid_to=valid_to, ended_at=ended_at,
            expired_at=expired_at, superseded_by=superseded_by,
        )  # fmt: skip


STAGING = """
CREATE TEMP TABLE transfer_facts (seq INTEGER PRIMARY KEY, tenant, agent_id, id, subject,
    predicate, object, valid_from, recorded_at, confidence, sourced, valid_to, ended_at,
    expired_at, superseded_by, UNIQUE (tenant, agent_id, id));
CREATE TEMP TABLE transfer_fact_sources (fact_seq, memory_id);
"""


def stage_fact(conn: apsw.Connection, r: FactRecord, tenant: str, line: int) -> None:
    insert_once(
        conn, "transfer_facts", "fact", line, (tenant, r.agent_id), r.id, r.subject, r.predicate,
        r.object, r.valid_from, r.recorded_at, r.confidence, int(r.sourced), r.valid_to,
        r.ended_at, r.expired_at, r.superseded_by,
    )  # fmt: skip
    conn.executemany(
        "INSERT INTO temp.transfer_fact_sources VALUES (?, ?)",
        [(line, memory_id) for memory_id in r.sources],
    )


# The id each staged source's memory has here (memories were applied before facts).
REMAP_SQL = """
UPDATE temp.transfer_fact_sources SET memory_id = kept.id
FROM temp.transfer_facts AS f, temp.transfer_memories AS t, main.memories AS kept
WHERE f.seq = transfer_fact_sources.fact_seq AND t.id = transfer_fact_sources.memory_id
    AND t.tenant = f.tenant AND t.agent_id = f.agent_id
    AND kept.tenant = t.tenant AND kept.agent_id = t.agent_id AND kept.hash = t.hash
"""


def apply_facts(conn: apsw.Connection, now: int) -> dict[str, int]:
    count = staged(conn, "transfer_facts")
    if count == 0:
        return {"facts_imported": 0, "facts_skipped": 0}
    conn.execute(REMAP_SQL)
    lines: dict[tuple[str, str], list[str]] = {}
    rows = conn.execute(
        f"SELECT seq, tenant, agent_id, {FACT_COLUMNS} FROM temp.transfer_facts ORDER BY seq"
    ).fetchall()
    for seq, tenant, agent_id, fact_id, subject, predicate, obj, *rest in rows:
        agent = (str(tenant), str(agent_id))
        held = conn.execute("SELECT tenant, agent_id FROM main.facts WHERE id = ?", (fact_id,))
        owner = held.fetchone()
        if owner is not None and tuple(owner) == agent:
            continue
        new_id = str(uuid.uuid4()) if owner is not None else str(fact_id)
        subject_key, object_key = compared(str(subject)), compared(str(obj))
        line = line_of(subject_key, str(predicate), object_key)
        conn.execute(
            "INSERT INTO main.facts (id, tenant, agent_id, subject, subject_key, predicate, "
            "object, object_key, line, valid_from, recorded_at, confidence, sourced, valid_to, "
            "ended_at, expired_at, superseded_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?, ?)",
            (new_id, *agent, subject, subject_key, predicate, obj, object_key, line, *rest),
        )
        conn.execute(
            "INSERT OR IGNORE INTO main.fact_sources (tenant, agent_id, fact_id, memory_id) "
            "SELECT ?, ?, ?, memory_id FROM temp.transfer_fact_sources WHERE fact_seq = ?",
            (*agent, new_id, seq),
        )
        lines.setdefault(agent, []).append(line)
    for agent, changed in lines.items():
        recompute_all(conn, agent, ((line, None) for line in changed))
    imported = sum(len(changed) for changed in lines.values())
    return {"facts_imported": imported, "facts_skipped": count - imported}


STATUS_SQL = {
    "current": "valid_to IS NULL AND expired_at IS NULL",
    "past": "valid_to IS NOT NULL AND expired_at IS NULL",
    "retracted": "expired_at IS NOT NULL",
}


def fact_counts(
    conn: apsw.Connection, scope: CountScope, agent_id: str | None = None
) -> dict[str, int]:
    """Facts by status over a scope, or over one agent of it."""
    where, params = scope.where()
    if agent_id is not None:
        where, params = f"{where} AND agent_id = ?", (*params, agent_id)
    rows: list[Any] = conn.execute(
        "SELECT "
        + ", ".join(f"count(*) FILTER (WHERE {condition})" for condition in STATUS_SQL.values())
        + f" FROM facts WHERE {where}",
        params,
    ).fetchall()
    return {status: int(value) for status, value in zip(STATUS_SQL, rows[0], strict=True)}


FACTS = Table(
    name="facts",
    owner="agent",
    erase=delete_rows,
    transfer=Transfer(
        record=FactRecord,
        export=export_facts,
        staging=STAGING,
        stage=stage_fact,
        apply=apply_facts,
        summary="facts {facts_imported} imported, {facts_skipped} skipped",
    ),
    stats=tuple(
        Stat(
            key=f"facts_{status}",
            count=counted(f"SELECT count(*) FROM facts WHERE {{where}} AND {condition}"),
            label=f"facts {status}",
            metric=f"Facts whose status is {status} (contract section 19).",
        )
        for status, condition in STATUS_SQL.items()
    ),
)
FACT_SOURCES = Table(
    name="fact_sources",
    owner="agent",
    erase=delete_rows,
    transfer=Skip("each fact's sources travel in its record (facts)"),
)
