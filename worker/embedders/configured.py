"""The embedder the configuration names (MEMORY_WORKER_EMBEDDER, _BUILTIN_MODEL), made once per
process by a single worker (worker/app.py) or a shard (worker/shards/app.py)."""

from __future__ import annotations

from typing import Any

import structlog

from worker.config import Config
from worker.embedders import Embedder, NoEmbedder
from worker.embedders.bus import BusEmbedder
from worker.embedders.hashing import HashingModel
from worker.embedders.local import BatchingEmbedder, LocalModel
from worker.recalls_first import RecallsFirst

log = structlog.get_logger()


def make_embedder(config: Config, nc: Any, gate: RecallsFirst | None = None) -> Embedder:
    """`gate`: the recalls-first gate the builtin model's stored texts yield to."""
    if config.embedder == "none":
        return NoEmbedder()
    if config.embedder == "bus":
        return BusEmbedder(nc, timeout=config.embed_timeout)
    return BatchingEmbedder(builtin_model(config.builtin_model), gate)


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
