"""The recall index's persisted snapshots (worker/recall_index/persist.py): a cache beside the
database that a restart opens memory-mapped, caught up from the change log, and never trusted
when it is damaged, behind or of another file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import msgspec
import nats
import numpy as np
import pytest

from handlers.recall.codes import sign_codes
from handlers.recall.rank import rank
from handlers.store import insert_memory
from schema.memory import RecallRequest
from tests.conftest import worker_config
from tests.support import Client
from worker.app import App
from worker.db import migrate, open_db
from worker.readers import Readers
from worker.recall_index.changes import trim
from worker.recall_index.index import MemoryIndex
from worker.recall_index.mapping import FileRows, mapped

KEY = ("", "a")
QUERIES = ("note alpha", "beta", "gamma note", "", "delta epsilon")


def filled(path: Path, count: int = 300) -> apsw.Connection:
    conn = open_db(path)
    migrate(conn)
    words = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")
    with conn:
        for n in range(count):
            insert_memory(
                conn, agent=("", "a"), content=f"note {words[n % 6]} {words[n % 5]} {n}",
                role="user", now=1, timestamp=1000 + n, importance=(n % 7) / 7,
                session_id=f"s{n % 4}",
            )  # fmt: skip
    return conn


def index_on(path: Path, writer: apsw.Connection, *, cache: bool = True) -> MemoryIndex:
    cache_dir = Path(f"{path}.index") if cache else None
    index = MemoryIndex(Readers(path), max_bytes=10**9, clock=lambda: 5000, cache_dir=cache_dir)
    index.attach(writer)
    return index


def answers(index: MemoryIndex) -> list[list[tuple[str, float]]]:
    columns = index.snapshot(KEY).columns
    found = []
    for query in QUERIES:
        for session in (None, "s1"):
            request = {"agentId": "a", "query": query, "limit": 7}
            if session:
                request["sessionId"] = session
            req = msgspec.convert(request, RecallRequest)
            found.append(rank(columns, req, now=9000, query_vector=None))
    return found


def fresh(path: Path, writer: apsw.Connection) -> list[list[tuple[str, float]]]:
    return answers(index_on(path, writer, cache=False))


def saved(path: Path, writer: apsw.Connection) -> MemoryIndex:
    """An index that loaded the agent from SQLite and wrote its snapshot (as at shutdown)."""
    index = index_on(path, writer)
    index.snapshot(KEY)
    index.close()
    assert list(Path(f"{path}.index").glob("*-*")), "no snapshot written"
    return index


def opened_from_disk(index: MemoryIndex) -> bool:
    return mapped(index.snapshot(KEY).columns.live)


def test_a_restart_opens_the_snapshot_and_answers_exactly_as_a_fresh_load(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    writer = filled(path)
    saved(path, writer)
    restarted = index_on(path, writer)
    assert opened_from_disk(restarted)
    assert answers(restarted) == fresh(path, writer)


def test_writes_by_another_connection_after_the_snapshot_are_replayed(tmp_path: Path) -> None:
    """An insert, a deletion, a rescore, a new content and a forget, by a connection that is
    not the index's writer (another process): the reopened snapshot answers as a fresh load."""
    path = tmp_path / "memory.db"
    writer = filled(path)
    saved(path, writer)
    other = open_db(path)
    with other:
        insert_memory(
            other, agent=("", "a"), content="note alpha written elsewhere", role="user",
            now=2, timestamp=99_000, importance=1.0,
        )  # fmt: skip
        ids = [i for (i,) in other.execute("SELECT id FROM memories ORDER BY rowid LIMIT 4")]
        other.execute("DELETE FROM memories WHERE id = ?", (ids[0],))
        other.execute("UPDATE memories SET importance = 1.0 WHERE id = ?", (ids[1],))
        other.execute("UPDATE memories SET content = 'gamma gamma' WHERE id = ?", (ids[2],))
        other.execute("UPDATE memories SET forgotten_at = 5 WHERE id = ?", (ids[3],))
    other.close()
    restarted = index_on(path, writer)
    assert opened_from_disk(restarted)
    assert answers(restarted) == fresh(path, writer)
    live = restarted.snapshot(KEY).columns
    assert not any(live.live[s] for s in restarted.agent(KEY).ids.slots(ids[0]))


def test_a_truncated_or_garbled_snapshot_is_rebuilt_from_sqlite_never_trusted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    writer = filled(path)
    expected = fresh(path, writer)
    for damage in ("truncate", "garble", "meta"):
        saved(path, writer)
        # Only finished snapshots (a temporary directory starts with a dot); none is being
        # written now: the previous round's index was closed, its saver thread joined.
        [snapshot] = Path(f"{path}.index").glob("[!.]*-*")
        if damage == "truncate":
            with open(snapshot / "postings.values.npy", "r+b") as file:
                file.truncate(200)
        elif damage == "garble":  # offsets pointing past the end of the ids
            offsets = snapshot / "ids.offsets.npy"
            data = bytearray(offsets.read_bytes())
            data[-8:] = (10**9).to_bytes(8, "little")
            offsets.write_bytes(bytes(data))
        else:
            (snapshot / "meta.json").write_text("{not json")
        reopened = index_on(path, writer)
        assert not opened_from_disk(reopened), damage
        assert answers(reopened) == expected, damage
        assert not snapshot.exists(), damage
        reopened.close()  # its saver rewrites the snapshot it loaded from SQLite: wait for it


def test_a_snapshot_whose_changes_were_trimmed_off_the_log_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    writer = filled(path, 50)
    saved(path, writer)
    with writer:
        writer.execute("UPDATE memories SET importance = 0.99 WHERE rowid <= 10")
    trim(writer, keep=1)
    reopened = index_on(path, writer)
    assert not opened_from_disk(reopened)
    assert answers(reopened) == fresh(path, writer)


def test_a_snapshot_of_another_file_is_not_trusted(tmp_path: Path) -> None:
    """A snapshot beside a file that was replaced (a restored copy whose change log reached
    the same sequence by other writes) is told apart by the memory logged at its sequence."""
    path = tmp_path / "memory.db"
    writer = filled(path, 40)
    saved(path, writer)
    writer.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    writer = filled(path, 40)  # same count, so the same last sequence; other ids
    reopened = index_on(path, writer)
    assert not opened_from_disk(reopened)
    assert answers(reopened) == fresh(path, writer)


SNAPSHOT_LOOP = """
import sys, time
from pathlib import Path
from worker.db import open_db
from worker.readers import Readers
from worker.recall_index.index import MemoryIndex
from handlers.store import insert_memory
from handlers.recall.codes import sign_codes
path = Path(sys.argv[1])
writer = open_db(path)
n = 0
while True:
    index = MemoryIndex(Readers(path), 10**9, lambda: 5000, cache_dir=Path(f"{path}.index"))
    index.attach(writer)
    index.snapshot(("", "a"))
    with writer:
        for _ in range(50):
            n += 1
            insert_memory(writer, agent=("", "a"), content=f"late beta {n}", role="user",
                          now=3, timestamp=50_000 + n, importance=0.3)
    index.after_commit(writer)
    index._saver.save(("", "a"))
    print("saved", flush=True)
"""


def test_a_worker_killed_while_writing_snapshots_leaves_nothing_that_makes_recall_wrong(
    tmp_path: Path,
) -> None:
    """A real process that writes and rewrites the agent's snapshot (storing between) is
    SIGKILLed at several moments; each time the index opened afterwards answers as a fresh
    load."""
    path = tmp_path / "memory.db"
    writer = filled(path, 2000)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    for delay in (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4):
        process = subprocess.Popen(
            [sys.executable, "-c", SNAPSHOT_LOOP, str(path)], env=env, stdout=subprocess.PIPE
        )
        assert process.stdout is not None
        # In the loop once it wrote a snapshot (its log lines go to stdout as well).
        assert b"saved\n" in iter(process.stdout.readline, b""), "it ended before it saved"
        # The moment of the kill is what varies: spread over the next rounds of the loop.
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        reopened = index_on(path, writer)
        assert answers(reopened) == fresh(path, writer), delay
    assert len(fresh(path, writer)) and writer.execute("SELECT count(*) FROM memories").get > 2050
    writer.close()


async def test_erasing_an_agent_deletes_its_snapshot(nats_url: str, tmp_path: Path) -> None:
    """Through the bus: a recall loads the agent, a clean stop writes its snapshot, the next
    start recalls from it, and memory::erase removes it from disk before it replies."""
    path = tmp_path / "memory.db"
    app = App(worker_config(nats_url, path))
    await app.start()
    nc = await nats.connect(nats_url)
    client = Client(nc)
    # Fewer than the saver loads from the write side (ADOPT_AFTER): the recall loads it.
    for n in range(150):
        await client.store("a", f"a memory about alpha number {n}")
    assert len(await client.recall("a", "alpha")) > 0
    await app.stop()
    cache = Path(f"{path}.index")
    assert list(cache.glob("*-*"))
    app = App(worker_config(nats_url, path))
    await app.start()
    try:
        assert len(await client.recall("a", "alpha number 7")) > 0
        assert app.services is not None
        assert mapped(app.services.index.snapshot(KEY).columns.live)
        await client.call("memory.erase", {"agentId": "a", "confirm": "a"})
        assert not list(cache.glob("*-*"))
        assert await client.recall("a", "alpha") == []
    finally:
        await nc.close()
        await app.stop()
    assert not list(cache.glob("*-*"))


def test_a_snapshot_keeps_the_vectors_codes_so_opening_reads_no_vector(tmp_path: Path) -> None:
    """The sign codes are written with the snapshot and opened mapped, equal to the codes of
    the vectors they stand for, also after a removal renumbered the rows; an index that keeps
    no codes opens the same snapshot without them."""
    path = tmp_path / "memory.db"
    writer = open_db(path)
    migrate(writer)
    rng = np.random.default_rng(3)
    with writer:
        for n in range(200):
            vector = rng.standard_normal(96).astype(np.float32)
            insert_memory(
                writer, agent=KEY, content=f"note {n}", role="user", now=1, timestamp=1000 + n,
                importance=0.5, embedding=("m", vector / np.linalg.norm(vector)),
            )  # fmt: skip

    def coded(codes: bool) -> MemoryIndex:
        cache_dir = Path(f"{path}.index")
        index = MemoryIndex(
            Readers(path), max_bytes=10**9, clock=lambda: 5000, cache_dir=cache_dir, codes=codes
        )
        index.attach(writer)
        return index

    first = coded(True)
    assert first.snapshot(KEY).columns.rows == 200
    with writer:
        writer.execute("DELETE FROM memories WHERE content IN ('note 3', 'note 150')")
    first.after_commit(writer)  # masked in memory, renumbered on disk
    first.close()
    reopened = coded(True).snapshot(KEY).columns
    assert mapped(reopened.live) and reopened.rows == 198
    codes = reopened.codes["m"]
    assert mapped(codes), "the codes were made again, not opened"
    made = sign_codes(np.asarray(reopened.vectors["m"][: reopened.rows]))
    assert np.array_equal(codes[:, : reopened.rows], made)
    assert coded(False).snapshot(KEY).columns.codes == {}
    for old in Path(f"{path}.index").glob("*/codes.*.npy"):  # a snapshot written without them
        old.unlink()
        meta = json.loads((old.parent / "meta.json").read_text())
        del meta["files"][old.name]
        (old.parent / "meta.json").write_text(json.dumps(meta))
    remade = coded(True).snapshot(KEY).columns
    assert mapped(remade.live), "a snapshot without codes is still opened"
    assert not mapped(remade.codes["m"])
    assert np.array_equal(remade.codes["m"][:, : remade.rows], made)


def test_file_rows_reads_a_snapshots_vectors_and_rows_rewritten_since_from_memory(
    tmp_path: Path,
) -> None:
    """A shortlist's rows read with pread from the snapshot's vector file equal the matrix's,
    and so do the blocks a snapshot's writing reads; a row written since the snapshot was
    opened, or appended after it, comes from the matrix."""
    rng = np.random.default_rng(4)
    matrix = rng.standard_normal((40, 8)).astype(np.float32)
    path = tmp_path / "vectors.0.npy"
    np.save(path, matrix[:30])
    rows = FileRows(path, 30, 8)
    slots = np.array([0, 3, 29, 31, 7, 39], dtype=np.int64)
    assert np.array_equal(rows.read(slots, matrix), matrix[slots])
    matrix[3] = 9.0
    rows.rewrote(3)
    rows.rewrote(35)  # past the file's rows: nothing to mark
    assert np.array_equal(rows.read(slots, matrix), matrix[slots])
    for size in (32, 100, 10_000):  # a snapshot's writing reads the rows in blocks of `size`
        blocks = list(rows.blocks(matrix, 40, None, size))
        assert np.array_equal(np.concatenate(blocks), matrix)
        kept = np.array([0, 2, 3, 17, 29, 30, 38], dtype=np.int64)
        assert np.array_equal(
            np.concatenate(list(rows.blocks(matrix, 40, kept, size))), matrix[kept]
        )
    with open(path, "r+b") as file:
        file.truncate(200)
    with pytest.raises(OSError, match="shorter"):
        rows.read(slots, matrix)
