"""`memory-worker bench --vector-index 50,200,1000`: the vector index against exact on LoCoMo.

The LoCoMo file (--locomo, by default the dev split) is stored once per run, each run a fresh
worker with the builtin model: one with MEMORY_WORKER_VECTOR_INDEX=exact and one with `codes`
(forced on, however small the conversations) per shortlist size given. For each it reports the
LoCoMo recall@10 and the index's recall@10 against exact: the share of each question's exact top
10 that the index returned too, averaged. A conversation has a few hundred turns, so a
shortlist of 1000 re-scores every memory and must equal exact; small shortlists show how well
the codes pick on real sentence embeddings.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import nats

from worker.bench.client import BenchClient
from worker.bench.locomo import measure_locomo
from worker.bench.scale import top10_recall, wait_for_service
from worker.embedded import EmbeddedServer
from worker.shards.loopback import free_port


async def _run(env: dict[str, str], locomo: Path, top10: list[list[str]]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memory-vector-index-") as scratch:
        server = EmbeddedServer(port=free_port(), store_dir=Path(scratch) / "nats")
        await server.start()
        worker_env = {
            **env,
            "MEMORY_WORKER_NATS_URL": server.url,
            "MEMORY_WORKER_DB_PATH": str(Path(scratch) / "memory.db"),
        }
        worker = subprocess.Popen(
            [sys.executable, "-m", "worker", "run"], env=worker_env, stdin=subprocess.DEVNULL
        )
        nc = await nats.connect(server.url)
        try:
            await wait_for_service(nc)
            client = BenchClient(nc, timeout=60.0)
            return await measure_locomo(client, locomo, embedded=True, top10=top10)
        finally:
            await nc.close()
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
            server.stop()


async def measure_vector_index(locomo: Path, shortlists: list[int]) -> dict[str, Any]:
    base = {
        **os.environ,
        "MEMORY_WORKER_EMBEDDER": "builtin",
        "MEMORY_WORKER_CONSOLIDATE_CRON": "",
        "MEMORY_WORKER_EVICT_CRON": "",
        "MEMORY_WORKER_LOG_LEVEL": "warning",
    }
    exact_top: list[list[str]] = []
    exact = await _run({**base, "MEMORY_WORKER_VECTOR_INDEX": "exact"}, locomo, exact_top)
    results: dict[str, Any] = {
        "questions": exact["questions"],
        "exact_recall@10": exact["recall@10"],
    }
    runs = []
    for shortlist in shortlists:
        top: list[list[str]] = []
        env = {
            **base,
            "MEMORY_WORKER_VECTOR_INDEX": "codes",
            "MEMORY_WORKER_VECTOR_CANDIDATES": str(shortlist),
        }
        found = await _run(env, locomo, top)
        runs.append(
            {
                "candidates": shortlist,
                "recall@10": found["recall@10"],
                "index_recall@10": top10_recall(top, exact_top),
            }
        )
    results["codes"] = runs
    return results


def vector_index_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = [
        ("LoCoMo questions (categories 1-4)", results["questions"]),
        ("exact: LoCoMo recall@10", f"{results['exact_recall@10']:.3f}"),
    ]
    for run in results["codes"]:
        rows.append(
            (
                f"codes, {run['candidates']} candidates: LoCoMo recall@10 / top 10 vs exact",
                f"{run['recall@10']:.3f} / {run['index_recall@10']:.4f}",
            )
        )
    return rows
