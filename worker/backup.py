"""`memory-worker backup PATH`: a consistent copy of the live database.

SQLite's online backup copies the whole file in one step under a single read snapshot, which
in WAL mode does not block the worker's writes; the copy is written beside the target and
renamed into place, so PATH is never a half-written file.
"""

from __future__ import annotations

import os
from pathlib import Path

import apsw

from worker.db import open_db


def backup_database(source_path: str | Path, target_path: str | Path) -> int:
    """Copy source to target atomically; returns the number of pages copied."""
    target = Path(target_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    source = open_db(source_path)
    try:
        copy = apsw.Connection(str(partial))
        try:
            with copy.backup("main", source, "main") as step:
                step.step(-1)
                pages = int(step.pagecount)
            copy.pragma("journal_mode", "delete")
        finally:
            copy.close()
    finally:
        source.close()
    check = apsw.Connection(str(partial))
    try:
        verdict = check.execute("PRAGMA integrity_check").fetchall()
    finally:
        check.close()
    if verdict != [("ok",)]:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"backup failed its integrity check: {verdict[:3]}")
    os.replace(partial, target)
    return pages
