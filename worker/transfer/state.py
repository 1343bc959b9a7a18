"""Section 14's state in export files: an agent's keys (and the tenant's `shared` ones), the
tasks it posted, its usage records and its canonical sessions; how they are written, staged and
applied.

What a second import of the same file does: a key is written when the file's version is newer
than the one here (so the same file changes nothing); tasks and usage records are keyed by their
ids and added when missing, never overwritten, and a usage record added counts in the day
totals of its agent at once; a canonical session's row is written when it is missing or the
file's is newer (`updatedAt`) than the one here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import apsw
import msgspec

from handlers.usage import ADD_TO_DAYS_SQL, DAY_MS
from worker.transfer.exporting import (
    CanonicalRecord,
    KvRecord,
    Record,
    TaskRecord,
    UsageRecord,
)

STAGE_SQL = """
CREATE TEMP TABLE transfer_kv (seq INTEGER PRIMARY KEY, tenant, agent_id, key, value, version,
    updated_at, UNIQUE (tenant, agent_id, key));
CREATE TEMP TABLE transfer_tasks (seq INTEGER PRIMARY KEY, tenant, id, agent_id, title,
    description, assignee, status, claimed_by, claim_timeout, claim_expires, result, created_at,
    claimed_at, completed_at, UNIQUE (tenant, id));
CREATE TEMP TABLE transfer_usage (seq INTEGER PRIMARY KEY, tenant, id, agent_id, model,
    prompt_tokens, completion_tokens, cost_usd, timestamp, UNIQUE (tenant, id));
CREATE TEMP TABLE transfer_canonical (seq INTEGER PRIMARY KEY, tenant, agent_id, user_id, summary,
    last_channel, message_count, updated_at, UNIQUE (tenant, agent_id, user_id));
"""
STAGE_TABLES = ("kv", "tasks", "usage", "canonical")
CANONICAL_COLUMNS = "tenant, agent_id, user_id, summary, last_channel, message_count, updated_at"
StateRecord = KvRecord | TaskRecord | UsageRecord | CanonicalRecord
TASK_COLUMNS = (
    "tenant, id, agent_id, title, description, assignee, status, claimed_by, claim_timeout, "
    "claim_expires, result, created_at, claimed_at, completed_at"
)
USAGE_COLUMNS = "tenant, id, agent_id, model, prompt_tokens, completion_tokens, cost_usd, timestamp"


def _json(text: str | None) -> object:
    return None if text is None else msgspec.json.decode(text)


def state_records(conn: apsw.Connection, tenant: str, agent_id: str) -> Iterator[Record]:
    key = (tenant, agent_id)
    for name, value, version, updated_at in conn.execute(
        "SELECT key, value, version, updated_at FROM kv WHERE tenant = ? AND agent_id = ? "
        "ORDER BY key",
        key,
    ):
        yield KvRecord(
            tenant=tenant, agent_id=agent_id or None, key=name, value=_json(value),
            version=version, updated_at=updated_at,
        )  # fmt: skip
    for row in conn.execute(
        f"SELECT {TASK_COLUMNS} FROM tasks WHERE tenant = ? AND agent_id = ? ORDER BY seq", key
    ):
        yield TaskRecord(
            tenant=tenant, id=row[1], agent_id=row[2], title=row[3], description=row[4],
            assignee=row[5], status=row[6], claimed_by=row[7], claim_timeout=row[8],
            claim_expires=row[9], result=_json(row[10]), created_at=row[11], claimed_at=row[12],
            completed_at=row[13],
        )  # fmt: skip
    for row in conn.execute(
        f"SELECT {USAGE_COLUMNS} FROM usage WHERE tenant = ? AND agent_id = ? ORDER BY seq", key
    ):
        yield UsageRecord(
            tenant=tenant, id=row[1], agent_id=row[2], model=row[3], prompt_tokens=row[4],
            completion_tokens=row[5], cost_usd=row[6], timestamp=row[7],
        )  # fmt: skip
    for row in conn.execute(
        f"SELECT {CANONICAL_COLUMNS} FROM canonical_sessions WHERE tenant = ? AND agent_id = ? "
        "ORDER BY user_id",
        key,
    ):
        yield CanonicalRecord(
            tenant=tenant, agent_id=row[1], user_id=row[2], summary=row[3], last_channel=row[4],
            message_count=row[5], updated_at=row[6],
        )  # fmt: skip


def stage_state(conn: apsw.Connection, r: StateRecord, tenant: str, line: int) -> str | None:
    """Stage one record; what it repeats when the file holds it twice, else None."""
    try:
        if isinstance(r, KvRecord):
            conn.execute(
                "INSERT INTO temp.transfer_kv VALUES (?, ?, ?, ?, ?, ?, ?)",
                (line, tenant, r.agent_id or "", r.key, msgspec.json.encode(r.value).decode(),
                 r.version, r.updated_at),
            )  # fmt: skip
        elif isinstance(r, TaskRecord):
            result = None if r.result is None else msgspec.json.encode(r.result).decode()
            conn.execute(
                f"INSERT INTO temp.transfer_tasks (seq, {TASK_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (line, tenant, r.id, r.agent_id, r.title, r.description, r.assignee, r.status,
                 r.claimed_by, r.claim_timeout, r.claim_expires, result, r.created_at,
                 r.claimed_at, r.completed_at),
            )  # fmt: skip
        elif isinstance(r, CanonicalRecord):
            conn.execute(
                f"INSERT INTO temp.transfer_canonical (seq, {CANONICAL_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (line, tenant, r.agent_id, r.user_id, r.summary, r.last_channel, r.message_count,
                 r.updated_at),
            )  # fmt: skip
        else:
            conn.execute(
                f"INSERT INTO temp.transfer_usage (seq, {USAGE_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (line, tenant, r.id, r.agent_id, r.model, r.prompt_tokens, r.completion_tokens,
                 r.cost_usd, r.timestamp),
            )  # fmt: skip
    except apsw.ConstraintError:
        if isinstance(r, CanonicalRecord):
            return "a second record of the same user"
        return "a second record of the same key" if isinstance(r, KvRecord) else "a second id"
    return None


@dataclass(frozen=True)
class StateImported:
    kv_written: int
    tasks_added: int
    usage_added: int
    canonical_written: int


def apply_state(conn: apsw.Connection) -> StateImported:
    conn.execute(
        "INSERT INTO main.kv (tenant, agent_id, key, value, version, updated_at) "
        "SELECT tenant, agent_id, key, value, version, updated_at FROM temp.transfer_kv "
        "WHERE true ORDER BY seq ON CONFLICT (tenant, agent_id, key) DO UPDATE SET "
        "value = excluded.value, version = excluded.version, updated_at = excluded.updated_at "
        "WHERE excluded.version > kv.version"
    )
    kv_written = conn.changes()
    conn.execute(
        f"INSERT OR IGNORE INTO main.tasks ({TASK_COLUMNS}) "
        f"SELECT {TASK_COLUMNS} FROM temp.transfer_tasks ORDER BY seq"
    )
    tasks_added = conn.changes()
    added = conn.execute(
        f"INSERT OR IGNORE INTO main.usage ({USAGE_COLUMNS}) "
        f"SELECT {USAGE_COLUMNS} FROM temp.transfer_usage WHERE true ORDER BY seq "
        "RETURNING tenant, timestamp, agent_id, model, prompt_tokens, completion_tokens, cost_usd"
    ).fetchall()
    conn.executemany(
        ADD_TO_DAYS_SQL,
        [(tenant, int(str(ts)) // DAY_MS, agent, model, p, c, cost)
         for tenant, ts, agent, model, p, c, cost in added],
    )  # fmt: skip
    conn.execute(
        f"INSERT INTO main.canonical_sessions ({CANONICAL_COLUMNS}) "
        f"SELECT {CANONICAL_COLUMNS} FROM temp.transfer_canonical WHERE true ORDER BY seq "
        "ON CONFLICT (tenant, agent_id, user_id) DO UPDATE SET summary = excluded.summary, "
        "last_channel = excluded.last_channel, message_count = excluded.message_count, "
        "updated_at = excluded.updated_at WHERE excluded.updated_at > canonical_sessions.updated_at"
    )
    canonical_written = conn.changes()
    return StateImported(kv_written, tasks_added, len(added), canonical_written)
