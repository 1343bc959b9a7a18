"""The builtin embedder: the model that ships in the install, and the batching in front of it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats
import numpy as np
import pytest

from tests.conftest import worker_config
from tests.support import Client
from worker.app import App, builtin_model
from worker.config import ConfigError, load_config
from worker.embedders.local import PASSAGE_BATCH, BatchingEmbedder
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
    """A stand-in model that takes 5 ms per text and records the order of its calls."""

    name = "slow"

    def __init__(self) -> None:
        self.calls: list[tuple[bool, int]] = []

    def _embed(self, texts: list[str], query: bool) -> np.ndarray:
        time.sleep(0.005 * len(texts))
        self.calls.append((query, len(texts)))
        return np.ones((len(texts), 4), dtype=np.float32) / 2

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, True)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, False)


async def test_a_query_waits_for_one_small_batch_of_stored_texts_not_the_whole_queue() -> None:
    """With 200 stored texts waiting, a recall's query is embedded after at most one small batch
    of them (two, counting the one already running), and the backlog counts what is waiting."""
    model = SlowModel()
    embedder = BatchingEmbedder(model)
    try:
        stores = asyncio.ensure_future(embedder.embed([f"t{i}" for i in range(200)], query=False))
        await asyncio.sleep(0.01)
        assert 150 <= embedder.backlog() <= 200
        [row] = await embedder.embed(["where?"], query=True)
        assert row is not None and not stores.done()
        passages_before_query = sum(n for query, n in model.calls[:-1] if not query)
        assert model.calls[-1] == (True, 1) and passages_before_query <= 2 * PASSAGE_BATCH
        await stores
        assert embedder.backlog() == 0
        assert all(n <= PASSAGE_BATCH for query, n in model.calls if not query)
    finally:
        await embedder.close()


async def test_texts_of_a_caller_that_gave_up_leave_the_queue_and_the_backlog() -> None:
    """A cancelled embed (its request timed out) costs at most the batch already running."""
    model = SlowModel()
    embedder = BatchingEmbedder(model)
    try:
        stores = asyncio.ensure_future(embedder.embed([f"t{i}" for i in range(200)], query=False))
        await asyncio.sleep(0.01)
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
