"""`memory-worker bench --merge [PATH]`: what consolidation's `mergeThreshold` merges in real
conversation, at several thresholds, with examples to judge by hand.

All in this process, on a scratch file: every LoCoMo turn stored as memory::store stores it (one
agent per conversation, content "speaker: text", the builtin model's vector), then, for each
threshold on a fresh copy, consolidation's merging steps (handlers/merge.py: decide per agent,
apply the groups), without the decay, which changes no merge. Merging is a pure function of the
rows: the bus adds nothing to it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from handlers.merge import apply_merges, count_removed, merge_agents, plan_agent_merges
from handlers.store import write_store
from schema.memory import ConsolidateRequest, StoreRequest
from worker.bench.locomo import turns
from worker.bench.sanitize import find_locomo
from worker.db import migrate, open_db
from worker.embedders import Vector
from worker.embedders.choice import builtin_model
from worker.embedders.local import LocalModel

THRESHOLDS = (0.90, 0.95, 0.98, 0.99)
EXAMPLES = 10
# What a threshold should let through (the same fact reworded) and what it must not (a fact
# restated with a change): their cosines under the model say where a threshold can sit.
PAIRS = (
    ("same", "The deploy key rotates on Fridays", "Deploy keys are rotated every Friday"),
    ("same", "The deploy key rotates on Fridays", "On Fridays the deploy key gets rotated"),
    ("same", "My sister lives in Lisbon", "My sister's home is in Lisbon"),
    ("same", "Alice is allergic to peanuts", "Alice has a peanut allergy"),
    (
        "same",
        "The API rate limit is 100 requests per minute",
        "The API allows 100 requests a minute",
    ),
    ("same", "The meeting moved to 3pm on Tuesday", "Tuesday's meeting is now at 3pm"),
    ("changed", "The deploy key rotates on Fridays", "The deploy key rotates on Mondays"),
    ("changed", "The office is in Lisbon", "The office is in Porto"),
    ("changed", "Alice is allergic to peanuts", "Bob is allergic to peanuts"),
    ("changed", "Nate: Bye Joanna!", "Joanna: Bye Nate!"),
)
NOW = 1_800_000_000_000


class Stored(NamedTuple):
    model: str
    content: dict[str, str]  # by memory id
    vector: dict[str, Vector]


def fill(path: Path, locomo: Path, model: LocalModel) -> Stored:
    """The scratch file with every turn stored; what the examples show."""
    samples = json.loads(locomo.read_text(encoding="utf-8"))
    name = getattr(model, "name", "builtin")
    conn = open_db(path, synchronous="normal")
    migrate(conn)
    stored = Stored(name, {}, {})
    for number, sample in enumerate(samples):
        agent = f"locomo-{sample.get('sample_id', number)}"
        found = turns(sample)
        vectors = model.embed_passages([content for _, content, _ in found])
        with conn:
            for (_, content, timestamp), vector in zip(found, vectors, strict=True):
                request = StoreRequest(agent_id=agent, content=content, timestamp=timestamp)
                reply = write_store(conn, request, now=NOW, embedding=(name, vector))
                if reply.id is not None and reply.stored:
                    stored.content[reply.id], stored.vector[reply.id] = content, vector
    conn.close()
    return stored


def merge_at(source: Path, scratch: Path, threshold: float, stored: Stored) -> Any:
    """Merging at one threshold on a copy of the filled file: counts, times, examples."""
    shutil.copyfile(source, scratch)
    conn = open_db(scratch, synchronous="normal")
    try:
        request = ConsolidateRequest(merge_threshold=threshold)
        started = time.perf_counter()
        groups = [
            group
            for agent in merge_agents(conn, request)
            for group in plan_agent_merges(conn, agent, threshold)
        ]
        decided = time.perf_counter()
        pairs = [(g.survivor.memory_id, m.memory_id) for g in groups for m in g.merged]
        with conn:
            removed = count_removed(apply_merges(conn, groups))
        applied = time.perf_counter()
    finally:
        conn.close()
    chosen = random.Random(17).sample(pairs, min(EXAMPLES, len(pairs)))
    return {
        "threshold": threshold,
        "groups": len(groups),
        "merged": removed,
        "largest_group": max((len(g.merged) + 1 for g in groups), default=0),
        "decide_ms": round((decided - started) * 1000, 1),
        "apply_ms": round((applied - decided) * 1000, 1),
        "examples": [
            {
                "cosine": round(float(stored.vector[pair[0]] @ stored.vector[pair[1]]), 4),
                "kept": stored.content[pair[0]],
                "merged": stored.content[pair[1]],
            }
            for pair in chosen
        ],
    }


def measure_merge(locomo: Path, thresholds: tuple[float, ...] = THRESHOLDS) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memory-bench-merge-") as scratch:
        filled = Path(scratch) / "filled.db"
        model = builtin_model(os.environ.get("MEMORY_WORKER_BUILTIN_MODEL", "minilm"))
        stored = fill(filled, locomo, model)
        runs = [
            merge_at(filled, Path(scratch) / "run.db", threshold, stored)
            for threshold in thresholds
        ]
    return {
        "locomo": str(locomo),
        "model": stored.model,
        "memories": len(stored.content),
        "runs": runs,
        "pairs": pair_cosines(model),
    }


def pair_cosines(model: LocalModel) -> list[dict[str, Any]]:
    found = []
    for kind, first, second in PAIRS:
        a, b = model.embed_passages([first, second])
        found.append({"kind": kind, "cosine": round(float(a @ b), 4), "a": first, "b": second})
    return found


def run_merge(args: Any) -> int:
    locomo = find_locomo(args.merge or args.locomo)
    if locomo is None:
        print("no LoCoMo file found: give one with --merge PATH", file=sys.stderr)
        return 2
    results = measure_merge(locomo)
    print(json.dumps(results) if args.json else merge_table(results))
    return 0


def merge_table(results: dict[str, Any]) -> str:
    lines = [
        f"consolidate mergeThreshold on LoCoMo: {results['locomo']}",
        f"{results['memories']} memories (one per turn), vectors of {results['model']}",
        "threshold  groups  memories merged  largest group  decide ms  apply ms",
    ]
    for run in results["runs"]:
        share = run["merged"] / max(1, results["memories"])
        lines.append(
            f"{run['threshold']:<9}  {run['groups']:>6}  {run['merged']:>6} ({share:.1%})"
            f"  {run['largest_group']:>13}  {run['decide_ms']:>9}  {run['apply_ms']:>8}"
        )
    lines.append("made-up pairs: the same fact reworded, and a fact changed")
    lines.extend(
        f"  {p['kind']:<7} {p['cosine']}: {p['a']!r} / {p['b']!r}" for p in results["pairs"]
    )
    for run in results["runs"]:
        lines.append(f"examples at {run['threshold']} (cosine: kept <- merged):")
        lines.extend(f"  {e['cosine']}: {e['kept']!r} <- {e['merged']!r}" for e in run["examples"])
    return "\n".join(lines)
