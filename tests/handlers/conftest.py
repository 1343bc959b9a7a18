"""Handler tests: a plain connection on a migrated file in tmp_path, a fixed clock, no bus."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from worker.db import migrate, open_db


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[apsw.Connection]:
    conn = open_db(tmp_path / "memory.db", synchronous="normal")
    migrate(conn)
    yield conn
    conn.close()
