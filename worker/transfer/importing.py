"""Importing an export file: validate all of it, then apply it in one short transaction.

Records are checked and staged into TEMP tables first. Temp tables belong to this connection
alone, so reading a long file takes no lock on the database and a worker serving the same file
keeps writing meanwhile; only the final apply holds the write lock, and a bad line anywhere
leaves the database untouched. The worker notices the commit (SQLite's data_version) and reloads
its recall index.

An agent is a (tenant, agentId) pair: every key below starts with the tenant, so one agentId in
two tenants is two agents here as everywhere.

What a second import of the same file does is each table's rule, said beside its registration
(handlers/tables/: memories are never overwritten, sessions are replaced, keys are written
when newer...). Counts report what changed, so importing the same file twice reports 0 changes
the second time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import apsw

from handlers.tables.registered import TABLES
from handlers.tables.table import Table
from worker.services import wall_clock_ms
from worker.transfer.exporting import check_tenant, transfers
from worker.transfer.staging import create_staging, drop_staging, stage


class ImportResult:
    """How many records an import read, and what it changed, by the names each table's import
    gives its counts (`memories_imported`, `kv_written`, ...); a count not given is 0."""

    def __init__(self, records: int, *, phrases: Sequence[str] = (), **counts: int) -> None:
        self.records = records
        self.counts = counts
        self._phrases = tuple(phrases)

    def __getattr__(self, name: str) -> int:
        counts = self.__dict__.get("counts", {})
        if name not in counts:
            raise AttributeError(f"an import counts no {name!r}")
        return int(counts[name])

    def _key(self) -> tuple[int, dict[str, int]]:
        return self.records, {name: count for name, count in self.counts.items() if count}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ImportResult) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.records, tuple(sorted(self._key()[1].items()))))

    def __repr__(self) -> str:
        counts = "".join(f", {name}={count}" for name, count in self.counts.items())
        return f"ImportResult(records={self.records}{counts})"

    def summary(self) -> str:
        parts = "; ".join(phrase.format(**self.counts) for phrase in self._phrases)
        return f"{self.records} records: {parts}"


def _apply(conn: apsw.Connection, records: int, tables: Sequence[Table]) -> ImportResult:
    """Each table's staged records, in the registration order; the import's audit row is the
    memories' (handlers/tables/memories.py), at the wall clock's time."""
    now = wall_clock_ms()
    counts: dict[str, int] = {}
    phrases = []
    for transfer in transfers(tables):
        counts |= transfer.apply(conn, now)
        if transfer.summary is not None:
            phrases.append(transfer.summary)
    return ImportResult(records, phrases=phrases, **counts)


def import_jsonl(
    conn: apsw.Connection,
    lines: Iterable[bytes],
    *,
    progress: Callable[[int], None] | None = None,
    tenant: str | None = None,
    tables: Sequence[Table] = TABLES,
) -> ImportResult:
    """Import an export file into a migrated database, all of it or nothing.

    `conn` must not be inside a transaction: this function owns its two (staging, apply).
    `progress` receives the bytes read so far after each line. `tenant` puts every record into
    that tenant (how the default tenant moves into an account); None keeps each record's own.
    """
    if tenant is not None:
        check_tenant(tenant, "--tenant")
    create_staging(conn, tables)
    try:
        with conn:
            records = stage(conn, lines, progress, tenant, tables)
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = _apply(conn, records, tables)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result
    finally:
        drop_staging(conn)
