"""The builtin embedder: the model that ships in the install, and the batching in front of it."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import nats
import numpy as np
import pytest

from tests.conftest import worker_config
from tests.support import Client, wait_until
from worker.app import App
from worker.config import ConfigError, load_config
from worker.embedders.configured import builtin_model
from worker.embedders.local import MAX_YIELD_S, PASSAGE_BATCH, BatchingEmbedder
from worker.embedders.minilm import MiniLM


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    return MiniLM()


def test_minilm_vectors_are_unit_length_384_floats_and_deterministic(minilm: MiniLM) -> None:
    """Every row is a unit float32 vector of 384 dimensions; the same text gives the same row."""
    texts = ["I adopted a dog named Rex.", "", "ünïcödé ✓ 日本語", "word " * 2000]
    first = minilm.embed_passages(texts)
    again = minilm.embed_passages(texts)
    assert first.shape == (4, 384) and first.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(first, again)


def test_minilm_batches_in_any_order_give_each_text_its_own_vector(minilm: MiniLM) -> None:
    """Texts sorted by length into micro-batches come back in the order they were given."""
    texts = [f"memory number {i} " + "about gardening " * (i % 7) for i in range(40)]
    together = minilm.embed_passages(texts)
    one_by_one = np.vstack([minilm.embed_passages([text]) for text in texts])
    np.testing.assert_allclose(together, one_by_one, atol=2e-3)


def test_minilm_multiplies_in_int8_with_vectors_close_to_the_float32_graphs(
    minilm: MiniLM,
) -> None:
    """The rewrite at load makes all 36 weight products of the 6 layers int8 (attention's own
    products stay float), and its vectors stay near those of the shipped float32 graph."""
    assert minilm.int8_matmuls == 36
    texts = [
        f"turn {i}: we went hiking near the lake and " + "talked a lot " * i for i in range(12)
    ]
    floats = MiniLM(passage_lanes=1, int8=False)
    assert floats.int8_matmuls == 0
    cosines = (minilm.embed_passages(texts) * floats.embed_passages(texts)).sum(axis=1)
    assert cosines.min() > 0.97 and cosines.mean() > 0.985


def test_minilm_puts_a_paraphrase_nearer_than_an_unrelated_text(minilm: MiniLM) -> None:
    """What makes it worth its cost over keywords: meaning without shared words."""
    query = minilm.embed_queries(["What is the name of my puppy?"])[0]
    passages = minilm.embed_passages(
        ["My dog is called Rex.", "The quarterly revenue report is due on Friday."]
    )
    related, unrelated = passages @ query
    assert related > unrelated + 0.2


async def test_batching_embedder_answers_concurrent_callers_with_their_own_rows(
    minilm: MiniLM,
) -> None:
    """Callers that arrive together share model calls, and each gets the row of its text."""
    embedder = BatchingEmbedder(minilm)
    texts = [f"note {i}: the meeting moved to room {i}" for i in range(100)]
    try:
        rows = await asyncio.gather(*(embedder.embed([text], query=False) for text in texts))
    finally:
        await embedder.close()
    expected = minilm.embed_passages(texts)
    for row, want in zip(rows, expected, strict=True):
        assert row[0] is not None
        np.testing.assert_allclose(row[0], want, atol=2e-3)


def test_builtin_model_setting_picks_the_model_and_refuses_unknown_names() -> None:
    """MEMORY_WORKER_BUILTIN_MODEL: minilm by default, hash on request, others name the
    variable."""
    assert load_config({}).builtin_model == "minilm"
    assert builtin_model("minilm").name == MiniLM.name
    assert builtin_model("hash").name != MiniLM.name
    with pytest.raises(ConfigError, match="MEMORY_WORKER_BUILTIN_MODEL"):
        load_config({"MEMORY_WORKER_BUILTIN_MODEL": "gpt"})


async def test_builtin_worker_recalls_by_meaning_when_no_keyword_is_shared(
    nats_url: str, tmp_path: Path
) -> None:
    """End to end over the bus with the default model: a paraphrase outranks a distractor."""
    app = App(worker_config(nats_url, tmp_path / "memory.db", embedder="builtin"))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        for content in ("My dog is called Rex.", "The quarterly revenue report is due Friday."):
            await client.store("a", content)
        memories = await client.recall("a", "name of my puppy", limit=2)
    finally:
        await nc.close()
        await app.stop()
    assert len(memories) == 2 and memories[0]["content"] == "My dog is called Rex."


class SlowModel:
    """A stand-in model that takes 5 ms per text and records its calls: (query, texts), how many
    ran at once, and the scheduling priority (nice) of the thread each kind ran on."""

    name = "slow"

    def __init__(self, lanes: int = 1) -> None:
        self.lanes = lanes
        self.calls: list[tuple[bool, int]] = []
        self.niceness: dict[bool, set[int]] = {True: set(), False: set()}
        self.in_flight = {True: 0, False: 0}
        self.most_in_flight = {True: 0, False: 0}
        self.most_together = 0
        self._count = threading.Lock()

    def _embed(self, texts: list[str], query: bool) -> np.ndarray:
        with self._count:
            self.in_flight[query] += 1
            self.most_in_flight[query] = max(self.most_in_flight[query], self.in_flight[query])
            self.most_together = max(self.most_together, sum(self.in_flight.values()))
        self.niceness[query].add(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        time.sleep(0.005 * len(texts))  # the model's own time, which the tests schedule around
        self.calls.append((query, len(texts)))
        with self._count:
            self.in_flight[query] -= 1
        return np.ones((len(texts), 4), dtype=np.float32) / 2

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, True)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, False)


async def passages_started(model: SlowModel) -> None:
    """Until the model has begun its first call on stored texts."""
    await wait_until(
        lambda: model.most_in_flight[False] >= 1, "a batch of stored texts in the model", 10, 0.001
    )


class GatedModel(SlowModel):
    """Stored texts are held inside the model until the test opens the gate."""

    def __init__(self, lanes: int) -> None:
        super().__init__(lanes)
        self.passage_started = threading.Event()
        self.gate = threading.Event()

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        self.passage_started.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return super().embed_passages(texts)


async def test_a_query_runs_while_a_batch_of_stored_texts_is_in_the_model() -> None:
    """The query lane: a recall's query submitted while a batch of stored texts is inside the
    model is embedded before that batch returns (it neither waits for it nor queues behind the
    stored texts still waiting)."""
    model = GatedModel(lanes=2)
    embedder = BatchingEmbedder(model)
    try:
        stores = asyncio.ensure_future(embedder.embed([f"t{i}" for i in range(40)], query=False))
        assert await asyncio.to_thread(model.passage_started.wait, 30)
        [row] = await asyncio.wait_for(embedder.embed(["where?"], query=True), 30)
        assert row is not None and not stores.done()
        assert model.calls == [(True, 1)]  # the stored texts' batch has not returned yet
        model.gate.set()
        assert all(row is not None for row in await stores)
        assert sum(n for query, n in model.calls if not query) == 40
    finally:
        model.gate.set()
        await embedder.close()


async def test_stored_texts_run_at_lower_priority_on_as_many_lanes_as_the_model_allows() -> None:
    """A model of three lanes embeds stored texts two batches at a time, on threads niced below
    the query's (Linux), and every caller still gets a row for each of its texts."""
    model = SlowModel(lanes=3)
    embedder = BatchingEmbedder(model)
    try:
        stores = [embedder.embed([f"t{i}"], query=False) for i in range(60)]
        queries = [embedder.embed([f"q{i}"], query=True) for i in range(5)]
        rows = await asyncio.gather(*stores, *queries)
    finally:
        await embedder.close()
    assert all(row[0] is not None for row in rows)
    assert model.most_in_flight == {True: 1, False: 2}
    [query_nice] = model.niceness[True]
    assert min(model.niceness[False]) > query_nice


async def test_with_one_lane_a_query_waits_for_one_small_batch_not_the_whole_queue() -> None:
    """A model that runs one call at a time (e5): with 200 stored texts waiting, a recall's
    query is embedded after at most one small batch of them (two, counting the one already
    running), never beside one, and the backlog counts what is waiting."""
    model = SlowModel(lanes=1)
    embedder = BatchingEmbedder(model)
    try:
        stores = asyncio.ensure_future(embedder.embed([f"t{i}" for i in range(200)], query=False))
        await passages_started(model)
        assert 150 <= embedder.backlog() <= 200
        [row] = await embedder.embed(["where?"], query=True)
        assert row is not None and not stores.done()
        passages_before_query = sum(n for query, n in model.calls[:-1] if not query)
        assert model.calls[-1] == (True, 1) and passages_before_query <= 2 * PASSAGE_BATCH
        await stores
        assert embedder.backlog() == 0
        assert all(n <= PASSAGE_BATCH for query, n in model.calls if not query)
        assert model.most_together == 1
        assert model.niceness[True] == model.niceness[False]  # the query shares its thread
    finally:
        await embedder.close()


async def test_stored_texts_hold_back_while_a_recall_is_in_progress_but_not_for_ever() -> None:
    """Inside `recalling()` (a whole recall) no stored text starts its model call for up to
    MAX_YIELD_S; held longer, they go on one text per MAX_YIELD_S; after it, at full speed:
    the texts left take less than MAX_YIELD_S each (on average: one text alone can take that
    long to be scheduled on a loaded machine, its thread being niced)."""
    model = SlowModel(lanes=2)
    embedder = BatchingEmbedder(model)
    texts = [f"t{i}" for i in range(20)]
    try:
        with embedder.recalling():
            stores = asyncio.ensure_future(embedder.embed(texts, query=False))
            await asyncio.sleep(MAX_YIELD_S / 2)  # time held back is the behaviour tested
            assert not any(not query for query, _ in model.calls)
            [row] = await embedder.embed(["where?"], query=True)  # the query is not held
            assert row is not None and model.calls == [(True, 1)]
            await asyncio.sleep(MAX_YIELD_S * 1.6)  # past the bound: one text goes on
            went = sum(1 for query, _ in model.calls if not query)
            assert 1 <= went <= 2
        started = time.monotonic()
        assert all(row is not None for row in await stores)
        assert time.monotonic() - started < (len(texts) - went) * MAX_YIELD_S
    finally:
        await embedder.close()


async def test_on_a_single_lane_a_recall_does_not_hold_back_the_texts_its_query_waits_for() -> None:
    """With one lane the query runs after the stored texts on it: holding those back for the
    recall would make the recall wait MAX_YIELD_S per text."""
    model = SlowModel(lanes=1)
    embedder = BatchingEmbedder(model)
    try:
        stores = asyncio.ensure_future(embedder.embed([f"t{i}" for i in range(8)], query=False))
        await passages_started(model)
        started = time.monotonic()
        with embedder.recalling():
            await embedder.embed(["where?"], query=True)
        assert time.monotonic() - started < 8 * MAX_YIELD_S / 2
        await stores
    finally:
        await embedder.close()


async def test_texts_of_a_caller_that_gave_up_leave_the_queue_and_the_backlog() -> None:
    """A cancelled embed (its request timed out) costs at most the batch already running."""
    model = SlowModel()
    embedder = BatchingEmbedder(model)
    try:
        stores = asyncio.ensure_future(embedder.embed([f"t{i}" for i in range(200)], query=False))
        await passages_started(model)
        stores.cancel()
        await asyncio.gather(stores, return_exceptions=True)
        assert embedder.backlog() <= PASSAGE_BATCH
        [row] = await embedder.embed(["where?"], query=True)
        assert row is not None and embedder.backlog() == 0
        # The batch running when it was cancelled, and one more if the loop was late to cancel.
        assert sum(n for query, n in model.calls if not query) <= 2 * PASSAGE_BATCH
    finally:
        await embedder.close()


def test_normalise_scales_a_tiny_vector_to_unit_length() -> None:
    """A float32 of 1e-38 squares to 0: taking the length in float32 left such a vector unscaled,
    so recall scored its cosine as 0 where the formula says 1."""
    from worker.embedders import normalise

    unit = normalise([1.175494351e-38, 0.0, 0.0, 0.0])[0]
    assert unit.dtype == np.float32 and unit.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert normalise([0.0, 0.0])[0].tolist() == [0.0, 0.0]
