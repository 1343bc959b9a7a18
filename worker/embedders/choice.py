"""Which embedder a worker process runs: the one MEMORY_WORKER_EMBEDDER names, made once per
process and shared by everything it serves (single mode's database, or every partition of a
shard). Here, not in worker/app.py, so that single mode and a shard (worker/shards/app.py) both
import it, neither importing the other."""

from __future__ import annotations

from typing import Any

import structlog

from worker.config import Config
from worker.embedders import Embedder, NoEmbedder
from worker.embedders.bus import BusEmbedder
from worker.embedders.hashing import HashingModel
from worker.embedders.local import BatchingEmbedder, LocalModel

log = structlog.get_logger()


def make_embedder(config: Config, nc: Any) -> Embedder:
    if config.embedder == "none":
        return NoEmbedder()
    if config.embedder == "bus":
        return BusEmbedder(nc, timeout=config.embed_timeout)
    return BatchingEmbedder(builtin_model(config.builtin_model))


def builtin_model(name: str) -> LocalModel:
    """The learned model if its wheels are installed, else the hashing stand-in (logged)."""
    try:
        if name == "hash":
            return HashingModel()
        if name == "e5":
            from worker.embedders.e5 import E5Small

            return E5Small()
        from worker.embedders.minilm import MiniLM

        return MiniLM()
    except Exception as error:  # missing wheels, or a damaged model or tokenizer file
        log.error("embedder.builtin_unavailable", model=name, error=str(error), using="hash")
        return HashingModel()


def replaces_vectors(config: Config, embedder: Embedder) -> bool:
    """Whether the backfill may replace vectors of another model with this embedder's: not when
    the configured model was unavailable and the hashing stand-in runs instead (its vectors
    would overwrite the learned model's)."""
    fell_back = config.builtin_model != "hash" and embedder.name == HashingModel.name
    return not fell_back
