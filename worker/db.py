"""Opening the SQLite file the same way everywhere, and the user_version migration ladder."""

from __future__ import annotations

import re
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Literal

import apsw
import apsw.bestpractice

Synchronous = Literal["full", "normal"]
BUSY_TIMEOUT_MS = 10_000


# What SQLite raises when the file's pages are not what it wrote: serving on is guesswork.
DAMAGED = (apsw.CorruptError, apsw.NotADBError)


class DatabaseTooNew(RuntimeError):
    """The file was migrated by a newer memory-worker; running old code on it could corrupt it."""


class DatabaseUnusable(RuntimeError):
    """The file is not a SQLite database, is damaged, or cannot be opened; one line says which."""


def unusable(path: str | Path, error: apsw.Error) -> DatabaseUnusable:
    if isinstance(error, DAMAGED):
        return DatabaseUnusable(
            f"{path} is not a SQLite database or is damaged ({type(error).__name__}: {error}); "
            "restore it from a backup"
        )
    return DatabaseUnusable(f"cannot use the database {path}: {type(error).__name__}: {error}")


def quick_check(
    conn: apsw.Connection, path: str | Path, cancelled: threading.Event | None = None
) -> None:
    """PRAGMA quick_check (page structure, not index contents); raises DatabaseUnusable naming
    the first problems it finds.

    The file is read in order first: quick_check walks the b-trees page by page, which took 20 s
    on a 1 GB file not in the page cache here, and 2.5 s after a sequential read (which only
    fills the cache that the check fills anyway). A set `cancelled` stops the reading."""
    cancelled = cancelled or threading.Event()
    with open(path, "rb", buffering=0) as file:
        chunk = bytearray(1 << 20)
        while not cancelled.is_set() and file.readinto(chunk):
            pass
    if cancelled.is_set():
        return
    problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check(3)")]
    if problems != ["ok"]:
        found = "; ".join(" ".join(problem.split()) for problem in problems)
        raise DatabaseUnusable(
            f"{path} is damaged (PRAGMA quick_check: {found}); restore it from a backup"
        )


def open_db(path: str | Path, *, synchronous: Synchronous = "full") -> apsw.Connection:
    """Open (creating if needed) with WAL, foreign keys, a busy timeout and the given sync level.

    Pragmas are set one statement at a time: apsw stops a multi-statement execute at the first
    statement that returns a row.
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    conn = apsw.Connection(str(path))
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    _wal(conn)
    apsw.bestpractice.connection_enable_foreign_keys(conn)
    apsw.bestpractice.connection_dqs(conn)
    apsw.bestpractice.connection_recursive_triggers(conn)
    conn.pragma("synchronous", synchronous.upper())
    return conn


def _wal(conn: apsw.Connection, attempts: int = 100) -> None:
    """WAL mode. Switching a brand-new file to WAL takes a lock that SQLite does not wait for
    (the busy timeout does not apply): processes opening one new file together retry."""
    for attempt in range(attempts):
        try:
            apsw.bestpractice.connection_wal(conn)
            return
        except apsw.BusyError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.01)


def open_read_only(path: Path) -> tuple[apsw.Connection, int]:
    """An existing file opened for reading, and its schema version; DatabaseUnusable saying
    why not (no file, not a database). Backup and shard-split read their source this way."""
    if not path.is_file():
        raise DatabaseUnusable(f"no database at {path}")
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    try:
        return conn, int(conn.pragma("user_version"))
    except apsw.Error as error:
        conn.close()
        raise DatabaseUnusable(f"{path} is not a usable database: {error}") from None


def migrations() -> list[tuple[int, str]]:
    """The ordered (version, sql) ladder shipped in schema/migrations."""
    found = []
    for entry in resources.files("schema").joinpath("migrations").iterdir():
        match = re.fullmatch(r"(\d{4})_\w+\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    if [version for version, _ in found] != list(range(1, len(found) + 1)):
        raise RuntimeError("schema/migrations must be numbered 0001, 0002, ... without gaps")
    return found


def migrate(conn: apsw.Connection) -> int:
    """Apply every migration newer than the file's user_version, each in its own transaction."""
    ladder = migrations()
    current = int(conn.pragma("user_version"))
    if current > len(ladder):
        raise DatabaseTooNew(
            f"database schema version {current} is newer than this memory-worker "
            f"(knows {len(ladder)}); upgrade memory-worker"
        )
    for version, sql in ladder[current:]:
        # The version is read again under the write lock: another process starting on the same
        # new file at the same moment may have applied this step meanwhile.
        conn.execute("BEGIN IMMEDIATE")
        try:
            if int(conn.pragma("user_version")) < version:
                conn.execute(sql)
                conn.pragma("user_version", version)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return len(ladder)
