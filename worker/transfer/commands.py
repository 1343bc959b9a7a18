"""`memory-worker export` and `memory-worker import`: the commands around the transfer functions.

The format and export are in worker/transfer/exporting.py, import in worker/transfer/importing.py;
this module re-exports their public names so that callers need only `worker.transfer.commands`.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TextIO

import apsw

from worker.config import Config
from worker.db import DatabaseTooNew, migrate, migrations, open_db
from worker.services import wall_clock_ms
from worker.transfer.exporting import TransferError, check_tenant, export_jsonl
from worker.transfer.importing import ImportResult, import_jsonl

__all__ = [
    "ImportResult",
    "ProgressBar",
    "TransferError",
    "export_command",
    "export_jsonl",
    "import_command",
    "import_jsonl",
    "open_existing",
]


def open_existing(path: str) -> apsw.Connection:
    """Open a database that must already hold the current schema; export never creates or
    migrates the file it reads."""
    if not Path(path).is_file():
        raise TransferError(f"no database at {path}")
    conn = open_db(path)
    version = int(conn.pragma("user_version"))
    current = len(migrations())
    if version != current:
        conn.close()
        raise TransferError(
            f"{path} has schema version {version}, this memory-worker exports version {current}; "
            "run `memory-worker migrate --db PATH` with the matching memory-worker first"
        )
    return conn


def _scope(agent: str | None, tenant: str | None) -> str:
    agents = f"agent {agent}" if agent is not None else "all agents"
    return agents + (f" of tenant {tenant!r}" if tenant is not None else "")


def export_command(config: Config, args: argparse.Namespace) -> int:
    """`memory-worker export [--db PATH] [--tenant NAME] [--agent ID] [--output FILE]`: only
    JSONL on stdout."""
    try:
        if args.tenant is not None:
            check_tenant(args.tenant, "--tenant")
        conn = open_existing(config.db_path)
    except (TransferError, apsw.Error) as error:
        print(f"memory-worker export: {error}", file=sys.stderr)
        return 1
    options = {"agent_id": args.agent, "tenant": args.tenant, "now": wall_clock_ms()}
    try:
        if args.output is None or args.output == "-":
            count = export_jsonl(conn, sys.stdout.buffer, **options)
            sys.stdout.buffer.flush()
        else:
            with open(args.output, "wb") as out:
                count = export_jsonl(conn, out, **options)
    except (TransferError, apsw.Error, OSError) as error:
        print(f"memory-worker export: {error}", file=sys.stderr)
        return 1
    finally:
        conn.close()
    scope = _scope(args.agent, args.tenant)
    print(f"exported {count} records ({scope}) from {config.db_path}", file=sys.stderr)
    return 0


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


class ProgressBar:
    """One line rewritten in place with `\\r`, at most ten times a second, so that a long
    import shows it is alive without flooding a slow terminal."""

    def __init__(
        self,
        stream: TextIO,
        total: int | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 0.1,
    ) -> None:
        self.stream, self.total, self.clock, self.interval = stream, total, clock, interval
        self.done = 0
        self._drawn_at = -math.inf
        self._width = 0

    def __call__(self, done: int) -> None:
        self.done = done
        now = self.clock()
        if now - self._drawn_at >= self.interval:
            self._drawn_at = now
            self._draw()

    def _draw(self) -> None:
        text = f"importing {_size(self.done)}"
        if self.total:
            percent = min(100, 100 * self.done // self.total)
            text += f" / {_size(self.total)} {percent:3d}%"
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def finish(self) -> None:
        self._draw()
        self.stream.write("\n")
        self.stream.flush()


def _regular_file_size(stream: BinaryIO) -> int | None:
    try:
        info = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _missing(db: Path) -> list[Path]:
    """What opening db would create: the file, its WAL and shared-memory files, and any missing
    directories above it, innermost first."""
    if db.exists():
        return []
    created = [db.with_name(db.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
    parent = db.absolute().parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    return created


def _remove(created: list[Path]) -> None:
    """A refused import of a new database leaves nothing behind, not an empty database."""
    for path in created:
        with contextlib.suppress(OSError):
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink(missing_ok=True)


def import_command(config: Config, args: argparse.Namespace) -> int:
    """`memory-worker import FILE|- [--db PATH] [--tenant NAME]`: a summary line on stderr; exit 1
    if refused. A bad --tenant is refused before the file or the database is opened."""
    try:
        if args.tenant is not None:
            check_tenant(args.tenant, "--tenant")
    except TransferError as error:
        print(f"memory-worker import: {error}", file=sys.stderr)
        return 1
    try:
        stream = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    except OSError as error:
        print(f"memory-worker import: {error}", file=sys.stderr)
        return 1
    bar = ProgressBar(sys.stderr, _regular_file_size(stream)) if sys.stderr.isatty() else None
    created = _missing(Path(config.db_path))
    try:
        conn = open_db(config.db_path, synchronous=config.synchronous)
        try:
            migrate(conn)
            result = import_jsonl(conn, stream, progress=bar, tenant=args.tenant)
        finally:
            conn.close()
    except (TransferError, DatabaseTooNew, apsw.Error, OSError) as error:
        if bar is not None:
            bar.stream.write("\n")
        _remove(created)
        print(f"memory-worker import: {error}", file=sys.stderr)
        return 1
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if bar is not None:
        bar.finish()
    print(f"imported {args.file} into {config.db_path}: {result.summary()}", file=sys.stderr)
    return 0
