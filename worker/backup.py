"""`memory-worker backup PATH`: a consistent copy of the live database.

SQLite's online backup copies the whole file in one step under a single read snapshot, which
in WAL mode does not block the worker's writes; the copy is written beside the target and
renamed into place, so PATH is never a half-written file. The source is opened read-only: a
mistyped --db must not leave an empty database behind and report it backed up.
"""

from __future__ import annotations

import os
from pathlib import Path

import apsw

from worker.db import DatabaseUnusable, open_read_only


class BackupError(RuntimeError):
    """The source cannot be backed up; the message names it and why."""


def _open_source(path: Path) -> apsw.Connection:
    if not path.is_file():
        raise BackupError(f"no database at {path}; nothing to back up")
    try:
        source, version = open_read_only(path)
    except DatabaseUnusable as error:
        raise BackupError(str(error)) from None
    if version == 0:
        source.close()
        raise BackupError(f"{path} is not a memory-worker database (it has no schema)")
    return source


def backup_database(source_path: str | Path, target_path: str | Path) -> int:
    """Copy source to target atomically; returns the number of pages copied."""
    source = _open_source(Path(source_path))
    target = Path(target_path)
    partial = target.with_name(target.name + ".partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial.unlink(missing_ok=True)
        copy = apsw.Connection(str(partial))
        try:
            with copy.backup("main", source, "main") as step:
                step.step(-1)
                pages = int(step.pagecount)
            copy.pragma("journal_mode", "delete")
            verdict = copy.execute("PRAGMA integrity_check").fetchall()
        finally:
            copy.close()
        if verdict != [("ok",)]:
            raise BackupError(
                f"the copy of {source_path} failed its integrity check: {verdict[:3]}"
            )
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        source.close()
    return pages
