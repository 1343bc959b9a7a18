"""No removed memory lingers on disk in the recall index: a snapshot holds live rows only, and a
removal (delete, forget...) gets the agent's snapshot rewritten within seconds
(worker/recall_index/saver.py SETTLE_S plus the writing), the agent loaded or not."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import numpy as np

from handlers.text import stem
from tests.conftest import worker_config
from tests.support import Client
from tests.test_index_persist import KEY, answers, filled, fresh, index_on, opened_from_disk
from worker.app import App
from worker.recall_index.mapping import mapped
from worker.recall_index.saver import SETTLE_S

# The removal is rewritten out within SETTLE_S plus one small snapshot's writing: this is
# generous for a loaded machine.
BOUND_S = SETTLE_S + 9.0


def on_disk(path: Path) -> bytes:
    """Every byte of every file under the database's index directory, read again whole when a
    file listed went before it was read (the saver replacing a snapshot meanwhile)."""
    cache = Path(f"{path}.index")
    while True:
        try:
            return b"".join(f.read_bytes() for f in sorted(cache.rglob("*")) if f.is_file())
        except FileNotFoundError:
            continue


async def gone(path: Path, *texts: str, present: bool = False) -> bool:
    """Wait (up to BOUND_S) until none of the texts is on disk (`present`: all of them are);
    whether they went (came)."""
    deadline = time.monotonic() + BOUND_S
    while True:
        data = on_disk(path)
        if all((text.encode() in data) == present for text in texts):
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)


def test_a_snapshot_written_after_removals_holds_only_live_rows_and_answers_as_fresh(
    tmp_path: Path,
) -> None:
    """Deleted, forgotten, edited, moved to another agent, set to `recallPolicy: never`: the
    rewritten snapshot holds none of their ids, and answers as a load from SQLite."""
    path = tmp_path / "memory.db"
    writer = filled(path, 300)
    index = index_on(path, writer)
    index.snapshot(KEY)
    removed = [i for (i,) in writer.execute("SELECT id FROM memories WHERE rowid % 7 IN (0, 1)")]
    with writer:
        writer.execute("DELETE FROM memories WHERE rowid % 7 = 0")
        writer.execute("UPDATE memories SET forgotten_at = 2 WHERE rowid % 11 = 0")
        writer.execute("UPDATE memories SET content = 'note rewritten' WHERE rowid % 13 = 0")
        writer.execute("UPDATE memories SET agent_id = 'b' WHERE rowid % 7 = 1")
        writer.execute("UPDATE memories SET recall_policy = 'never' WHERE rowid % 17 = 0")
    index.after_commit(writer)
    index.close()
    [snapshot] = Path(f"{path}.index").glob("[!.]*-*")
    live = writer.execute(
        "SELECT count(*) FROM memories WHERE agent_id = 'a' AND forgotten_at IS NULL "
        "AND recall_policy != 'never'"
    ).get
    meta = json.loads((snapshot / "meta.json").read_text())
    assert meta["rows"] == live < 300
    assert bool(np.load(snapshot / "live.npy")[:live].all())
    data = on_disk(path)
    assert not [i for i in removed if i.encode() in data]
    reopened = index_on(path, writer)
    assert opened_from_disk(reopened)
    assert answers(reopened) == fresh(path, writer)
    reopened.close()


async def test_a_deleted_or_forgotten_memory_leaves_no_word_and_no_id_on_disk(
    nats_url: str, tmp_path: Path
) -> None:
    """A memory with a word of its own is on disk once its agent's snapshot is written; after
    memory::delete (agent loaded), memory::forget (loaded) and memory::delete (agent not loaded,
    after a restart) neither its word, nor the word's stem, nor its id is in any file under
    `<db>.index/` within the bound, and recall after a restart is still right."""
    path = tmp_path / "memory.db"
    app = App(worker_config(nats_url, path))
    await app.start()
    nc = await nats.connect(nats_url)
    client = Client(nc)
    try:
        # Fewer than the saver loads from the write side (ADOPT_AFTER): the recall loads it.
        for n in range(150):
            await client.store("a", f"a memory about alpha number {n}")
        words = ("wombatfrobnicating", "glorptasticness", "quuxblatteringly")
        ids = [(await client.store("a", f"alpha and {word}"))["id"] for word in words]
        kept = (await client.store("a", "alpha and zorblkeepsake"))["id"]
        assert len(await client.recall("a", "alpha")) > 0  # loaded: its snapshot is written
        assert await gone(path, *words, *ids, present=True), "the snapshot was never written"
        await client.ok("memory::delete", {"agentId": "a", "ids": [ids[0]]})
        assert await gone(path, words[0], stem(words[0]), ids[0])
        await client.ok("memory::forget", {"agentId": "a", "ids": [ids[1]]})
        assert await gone(path, words[1], stem(words[1]), ids[1])
        assert words[2].encode() in on_disk(path)
        await app.stop()
        app = App(worker_config(nats_url, path))
        await app.start()
        await client.ok("memory::delete", {"agentId": "a", "ids": [ids[2]]})  # not loaded
        assert await gone(path, words[2], stem(words[2]), ids[2])
        await app.stop()
        app = App(worker_config(nats_url, path))
        await app.start()
        for word in words:
            assert not {m["id"] for m in await client.recall("a", word)} & set(ids)
        assert (await client.recall("a", "zorblkeepsake"))[0]["id"] == kept
        found = await client.recall("a", "alpha number 7", limit=3)
        assert found[0]["content"] == "a memory about alpha number 7"
        assert app.services is not None
        assert mapped(app.services.index.snapshot(KEY).columns.live)
    finally:
        await nc.close()
        await app.stop()
