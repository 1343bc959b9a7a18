"""`memory-worker shard-split`: one file per partition from a single-mode database, each at log
sequence 0, to start a sharded cluster from (SCALE.md "Moving an existing database").

Every agent table has `tenant` and `agent_id`, and a row goes to `partition_of(tenant, agent_id,
P)` with every column and row id as it was (audit, task, usage and relation sequences included),
which keeps recall, cursors and ids what they were. SQL rather than export and import: import
renumbers sequences and skips the audit, and a copy needs no format. Where a row goes is its
table's owner, as registered (handlers/tables/):
- an agent's rows go to its partition; the tenant's `shared` keys are stored under agent ''
  (handlers/kv.py), so they and their audit rows go to the partition of agent '' of that tenant;
- a tenant's rows (its task board is one: worker/shards/router.py routes every task trigger
  there) go to the partition of agent '' too, whoever posted them;
- nobody's rows stay behind: the single worker's cron claims (shards claim fire times in the
  log) and the recall index's change log (`memory_changes`, `memory_changes_trimmed`), a cache's
  log, not data. Each file starts with an empty log (what the log's triggers record while the
  memories are copied in is cleared, its sequence restarted); no persisted index belongs to a
  new file, so nothing refers to the old one. A table that is not registered and lacks either
  column is refused rather than dropped.

The source is read in one read transaction, so a worker still writing to it cannot make the files
disagree; what it writes afterwards is not in them: stop it first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw

from handlers.tables.registered import TABLES
from worker.commands import Exit
from worker.config import Config
from worker.db import (
    DatabaseUnusable,
    migrate,
    migrations,
    open_db,
    open_read_only,
)
from worker.shards.node import SHARD_LOG_SQL
from worker.shards.partition import partition_of

LEFT_BEHIND = frozenset(table.name for table in TABLES if table.owner is None)
# Tables whose rows are the tenant's, not an agent's: in the partition of the tenant's agent ''.
TENANT_WIDE_TABLES = frozenset(table.name for table in TABLES if table.owner == "tenant")
BATCH = 500


class SplitError(RuntimeError):
    """The split cannot be done as asked; the message names the flag or the table."""


def partition_file(out: Path, partition: int) -> Path:
    return out / f"p{partition:04d}.db"


def _open_source(path: Path) -> apsw.Connection:
    try:
        source, version = open_read_only(path)
    except DatabaseUnusable as error:
        raise SplitError(f"--db: {error}") from None
    current = len(migrations())
    if version != current:
        source.close()
        raise SplitError(
            f"--db: {path} has schema version {version}, this memory-worker splits version "
            f"{current}; run `memory-worker migrate --db {path}` first"
        )
    return source


def _agent_tables(source: apsw.Connection) -> Iterator[tuple[str, list[str]]]:
    """Each table that rows are split from, with its columns."""
    names = [name for (name,) in source.execute("SELECT name FROM sqlite_master WHERE type = "
                                                "'table' ORDER BY name")]  # fmt: skip
    for name in names:
        if name.startswith("sqlite_") or name in LEFT_BEHIND:
            continue
        columns = [str(row[1]) for row in source.execute(f'PRAGMA table_info("{name}")')]
        if "tenant" not in columns or "agent_id" not in columns:
            raise SplitError(
                f"table {name} has no tenant and agent_id: shard-split does not know which "
                "partition its rows belong to"
            )
        yield name, columns


def _create(out: Path, partitions: int) -> list[apsw.Connection]:
    conns = []
    for partition in range(partitions):
        conn = open_db(partition_file(out, partition), synchronous="normal")
        conns.append(conn)
        migrate(conn)
        conn.execute(SHARD_LOG_SQL)
        conn.execute("INSERT INTO shard_log (partition, applied) VALUES (?, 0)", (partition,))
        # Tables are copied in name order, messages before their sessions: the source's rows
        # already satisfy the references.
        conn.pragma("foreign_keys", False)
        conn.execute("BEGIN")
    return conns


def _copy_table(
    source: apsw.Connection, conns: list[apsw.Connection], table: str, columns: list[str]
) -> int:
    partitions = len(conns)
    names = ", ".join(f'"{column}"' for column in columns)
    insert = f'INSERT INTO "{table}" ({names}) VALUES ({", ".join("?" * len(columns))})'
    tenant, agent = columns.index("tenant"), columns.index("agent_id")
    board = table in TENANT_WIDE_TABLES
    where: dict[tuple[str, str], int] = {}
    pending: list[list[Any]] = [[] for _ in conns]
    count = 0
    for row in source.execute(f'SELECT {names} FROM "{table}"'):
        key = (row[tenant], "" if board else row[agent])
        partition = where.get(key)
        if partition is None:
            partition = where[key] = partition_of(key[0], key[1], partitions)
        pending[partition].append(row)
        if len(pending[partition]) >= BATCH:
            conns[partition].executemany(insert, pending[partition])
            pending[partition].clear()
        count += 1
    for conn, rows in zip(conns, pending, strict=True):
        if rows:
            conn.executemany(insert, rows)
    return count


def split_database(db: Path, out: Path, partitions: int) -> dict[str, int]:
    """Write out/p0000.db ... one per partition; the rows copied, per table. Refuses an out
    directory that holds anything, and leaves nothing behind when it fails."""
    if not 1 <= partitions <= 1024:
        raise SplitError(f"--partitions: {partitions} is not between 1 and 1024")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SplitError(f"--out: {out} exists and is not an empty directory")
    source = _open_source(db)
    created = not out.exists()
    conns: list[apsw.Connection] = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        conns = _create(out, partitions)
        copied = {}
        source.execute("BEGIN")  # one read transaction: every table as of one moment
        try:
            for table, columns in _agent_tables(source):
                copied[table] = _copy_table(source, conns, table, columns)
            sequences = list(source.execute("SELECT name, seq FROM sqlite_sequence"))
        finally:
            source.execute("COMMIT")
        for conn in conns:  # new audit and task sequences continue after the source's
            conn.execute("DELETE FROM memory_changes")
            conn.execute("DELETE FROM sqlite_sequence WHERE name = 'memory_changes'")
            for name, seq in sequences:
                if name in LEFT_BEHIND:
                    continue
                conn.execute("DELETE FROM sqlite_sequence WHERE name = ?", (name,))
                conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (name, seq))
            conn.execute("COMMIT")
            conn.pragma("journal_mode", "delete")  # one self-contained file to upload
    except BaseException:
        for conn in conns:
            with contextlib.suppress(apsw.Error):
                conn.close()
        conns = []
        for path in out.glob("p*.db*"):
            path.unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    finally:
        for conn in conns:
            conn.close()
        source.close()
    return copied


def _report(db: str, out: Path, partitions: int, copied: dict[str, int]) -> None:
    rows = ", ".join(f"{count} {table}" for table, count in copied.items() if count)
    print(f"split {db} into {partitions} files in {out}: {rows or 'no rows'}", file=sys.stderr)


async def split_and_upload(config: Config, url: str, out: Path, partitions: int) -> int:
    """Split, then upload each file as partition k's snapshot at sequence 0; bytes sent. Refused
    before anything is written when the cluster holds any snapshot or logged write already (a
    running cluster's data is never replaced)."""
    import nats.js.errors

    from worker.connection import connect
    from worker.shards.log import stream_name
    from worker.shards.snapshot import Snapshots, open_store

    nc = await connect(url, config, reconnect=False)
    try:
        js = nc.jetstream()
        store = await open_store(js, config.replicas)
        snapshots = Snapshots(js, store, partitions)
        for partition in range(partitions):
            for snapshot in await snapshots.kept(partition):
                raise SplitError(
                    f"--upload: the snapshot bucket already holds {snapshot.name} (applied "
                    f"{snapshot.applied}); shard-split uploads only to a cluster without data"
                )
            with contextlib.suppress(nats.js.errors.NotFoundError):
                info = await js.stream_info(stream_name(partition))
                if info.state.last_seq > 0:
                    raise SplitError(
                        f"--upload: stream {stream_name(partition)} already holds writes; "
                        "shard-split uploads only to a cluster without data"
                    )
        copied = await asyncio.to_thread(split_database, Path(config.db_path), out, partitions)
        _report(config.db_path, out, partitions, copied)
        total = 0
        for partition in range(partitions):
            sent = await snapshots.upload(partition, partition_file(out, partition), 0, "a")
            total += sent.size
        return total
    finally:
        await nc.close()


def split_command(config: Config, args: argparse.Namespace) -> int:
    """`memory-worker shard-split --db PATH --partitions N --out DIR [--upload]`."""
    from worker.commands import client_url
    from worker.connection import ConnectionFailed

    partitions = config.partitions if args.partitions is None else args.partitions
    out, db = Path(args.out), Path(config.db_path)
    try:
        if not args.upload:
            _report(config.db_path, out, partitions, split_database(db, out, partitions))
            return 0
        url = client_url(config, args.nats_url)
        sent = asyncio.run(split_and_upload(config, url, out, partitions))
    except ConnectionFailed as error:
        print(f"memory-worker shard-split: {error}", file=sys.stderr)
        return Exit.UNREACHABLE
    except Exception as error:  # refusals name the flag; NATS and SQLite errors say what failed
        print(f"memory-worker shard-split: {error}", file=sys.stderr)
        return 1
    print(f"uploaded {partitions} snapshots at sequence 0 ({sent} bytes)", file=sys.stderr)
    return 0
