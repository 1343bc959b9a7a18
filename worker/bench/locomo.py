"""Retrieval quality on a LoCoMo-format file: one agent per conversation, one memory per turn.

The metric (docs/recall.md): for each question of categories 1-4, the share of its evidence
turns among the k memories memory::recall returns. The figures
(overall, per category, per conversation and per half) are worker/bench/quality.py's.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from worker.bench.client import BenchClient
from worker.bench.quality import Answer, summary

CATEGORIES = (1, 2, 3, 4)
DATE_FORMAT = "%I:%M %p on %d %B, %Y"


def session_time_ms(text: str) -> int:
    """'1:56 pm on 8 May, 2023' as ms since the epoch (UTC)."""
    moment = datetime.strptime(text.strip().upper().replace(" ON ", " on "), DATE_FORMAT)
    return int(moment.timestamp() * 1000)


def turns(sample: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(dia_id, content, timestamp) of every turn, in order; turns within a session 1 s apart."""
    conversation = sample["conversation"]
    found = []
    for key in sorted(
        (k for k in conversation if re.fullmatch(r"session_\d+", k)),
        key=lambda k: int(k.split("_")[1]),
    ):
        start = session_time_ms(conversation[f"{key}_date_time"])
        for offset, turn in enumerate(conversation[key]):
            content = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                content += f" [image: {turn['blip_caption']}]"
            found.append((turn["dia_id"], content, start + 1000 * offset))
    return found


def evidence_ids(raw: list[str]) -> list[str]:
    """Evidence ids, splitting the few malformed ones ('D8:6; D9:17') and skipping junk."""
    ids = []
    for item in raw:
        for part in item.split(";"):
            part = part.strip()
            if re.fullmatch(r"D\d+:\d+", part):
                ids.append(part)
    return ids


async def measure_locomo(
    client: BenchClient,
    path: Path,
    *,
    embedded: bool,
    concurrency: int = 32,
    top10: list[list[str]] | None = None,
) -> dict[str, Any]:
    """With `embedded`, questions wait until every turn has its vector, so that the figures are
    the model's and not the backfill's progress. `top10` gets each question's returned turns
    (dia ids, in rank order), for comparing two rankings of the same questions."""
    samples = json.loads(path.read_text(encoding="utf-8"))
    answers: list[Answer] = []
    stored_count, store_seconds = 0, 0.0
    for number, sample in enumerate(samples):
        conversation = str(sample.get("sample_id", number))
        agent = f"locomo-{conversation}"
        started = time.perf_counter()
        stored, _, seconds = await client.many(
            "memory::store",
            [{"agentId": agent, "content": c, "timestamp": t} for _, c, t in turns(sample)],
            concurrency=concurrency,
        )
        if embedded:
            await client.wait_for_vectors()
            seconds = time.perf_counter() - started
        stored_count, store_seconds = stored_count + len(stored), store_seconds + seconds
        memory_of = {
            dia: reply["id"] for (dia, _, _), reply in zip(turns(sample), stored, strict=True)
        }
        questions = [q for q in sample["qa"] if q.get("category") in CATEGORIES]
        replies = await client.recall_many(
            [{"agentId": agent, "query": q["question"], "limit": 10} for q in questions],
            concurrency=concurrency,
        )
        for question, reply in zip(questions, replies, strict=True):
            wanted = {memory_of[e] for e in evidence_ids(question["evidence"]) if e in memory_of}
            if not wanted:
                continue
            returned = [m["id"] for m in reply["memories"]]
            if top10 is not None:
                turn_of = {memory: dia for dia, memory in memory_of.items()}
                top10.append([turn_of[memory] for memory in returned[:10]])
            shares = [len(wanted & set(returned[:k])) / len(wanted) for k in (5, 10)]
            answers.append(Answer(conversation, question["category"], *shares))
    return {
        # Real conversation turns are shorter than the synthetic memories: a learned model's
        # store rate on them (vectors included) is the one users with chat-sized memories see.
        "stores_per_second": round(stored_count / max(store_seconds, 1e-9)),
        **summary(answers, CATEGORIES),
    }
