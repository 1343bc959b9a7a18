"""The in-process part of `bench --million` (worker/bench/million.py): in a process of its own,
started from the tree the worker under test ran from, the agent's index is loaded (from SQLite,
or opened from its snapshot) and ranked directly, without the bus: what the bus figures are made
of. The script uses only what every recent tree has (MemoryIndex, the ranking functions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = """
import json, statistics, sys, time
from pathlib import Path
import msgspec, numpy as np
from handlers.recall import expand
from handlers.recall.vector_index import chosen
from schema.memory import RecallRequest
from worker.bench.synthetic import centres, near, text_centre
from worker.db import open_db
from worker.readers import Readers
from worker.recall_index.index import MemoryIndex

path, from_sqlite, vectors = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1"
queries = json.loads(sys.stdin.read())
writer = open_db(path)
index = MemoryIndex(
    Readers(path), 10**11, lambda: int(time.time() * 1000),
    cache_dir=None if from_sqlite else Path(f"{path}.index"), codes=vectors,
)
index.attach(writer)
key = ("", "bench-agent")
started = time.perf_counter()
index.snapshot(key)
load_ms = (time.perf_counter() - started) * 1000
centre = centres()

def query_vector(text):
    if not vectors:
        return None
    rng = np.random.default_rng(text_centre(text) * 7919 + len(text))
    return ("bus", near(centre[text_centre(text)], rng))

requests = [
    (msgspec.convert({"agentId": "bench-agent", "query": q}, RecallRequest), query_vector(q))
    for q in queries
]
mode = chosen("auto", "expanded", 1000)
now = int(time.time() * 1000)
timed = []
for at, (req, vector) in enumerate(requests * 2):
    started = time.perf_counter()
    expand.expanded_rows(
        index.snapshot(key).columns, req, now=now, query_vector=vector, keyword_mode="stems",
        vector_index=mode,
    )
    if at >= len(requests):  # the second pass: warm
        timed.append((time.perf_counter() - started) * 1000)
import resource
print(json.dumps({
    "load_ms": round(load_ms, 1),
    "rank_p50_ms": round(statistics.median(timed), 3),
    "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
}))
"""


def in_process(
    db_path: Path, tree: str | None, queries: list[str], *, vectors: bool, from_sqlite: bool
) -> dict[str, Any]:
    """The load (or open) of the agent's index in ms, the warm ranking p50, the peak RSS."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(db_path), str(int(from_sqlite)), str(int(vectors))],
        input=json.dumps(queries[:200]).encode(),
        capture_output=True,
        cwd=tree,
        check=True,
        timeout=1800,
    )
    found: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return found
