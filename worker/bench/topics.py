"""`memory-worker bench --topics`: how well and how cheaply messages are placed in topics
(handlers/topics/, contract section 21), on the interleaved sessions of
tests/fixtures/topic_sessions.jsonl (made by tests/fixtures/make_topic_sessions.py), which the
rules were tuned on, and of the held-out tests/fixtures/topic_sessions_heldout.jsonl (made by
tests/fixtures/make_heldout_sessions.py from other threads, written before a rule was tuned on
it); `--topics-set` names one set instead.

Figures, all in this process (assignment is a pure function; the bus adds nothing to it):
- purity: per message, the share of its topic's messages that come from that topic's
  majority thread; completeness: per message, the share of its thread's messages that sit in
  that thread's majority topic; both averaged over every message;
- resume selection: the share of queries naming a thread for which `resume_topic` picks a
  topic whose majority thread is that thread;
- the CPU time to place one message (thread time: a shared machine's waits are not ours);
by keywords alone, and with the builtin model's vectors (made once per distinct text before
the clock starts: the store makes them, not assignment).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from handlers.topics.assign import Incoming, place, resume_topic
from handlers.topics.profile import TopicProfile

TEST_SET = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "topic_sessions.jsonl"
HELD_OUT = TEST_SET.with_name("topic_sessions_heldout.jsonl")


def load_sessions(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


Vectors = dict[str, tuple[float, ...]]


def replay(
    session: dict[str, Any], vectors: Vectors | None = None
) -> tuple[list[str], dict[str, TopicProfile], list[float]]:
    """Each message's topic, the topics' profiles at the end, and each placement's CPU us;
    with `vectors` (by text), each message has its vector."""
    topics: dict[str, TopicProfile] = {}
    active: str | None = None
    placed: list[str] = []
    costs: list[float] = []
    for message in session["messages"]:
        vector = None if vectors is None else vectors[message["text"]]
        incoming = Incoming(role=message["role"], text=message["text"], vector=vector)
        started = time.thread_time_ns()
        topic_id, profile, _ = place(topics, active, incoming, f"t{len(topics) + 1}")
        costs.append((time.thread_time_ns() - started) / 1000)
        topics[topic_id] = profile
        active = topic_id
        placed.append(topic_id)
    return placed, topics, costs


def majority(pairs: list[tuple[str, str]]) -> dict[str, tuple[str, float]]:
    """For each first element, its most common second element and that one's share."""
    counts: dict[str, Counter[str]] = {}
    for key, value in pairs:
        counts.setdefault(key, Counter())[value] += 1
    return {
        key: (found.most_common(1)[0][0], found.most_common(1)[0][1] / found.total())
        for key, found in counts.items()
    }


def measure_topics(test_set: Path, vectors: Vectors | None = None) -> dict[str, Any]:
    sessions = load_sessions(test_set)
    purity: list[float] = []
    completeness: list[float] = []
    hits = queries = topics_made = threads = 0
    costs: list[float] = []
    for session in sessions:
        placed, profiles, cost = replay(session, vectors)
        costs += cost
        truth = [message["thread"] for message in session["messages"]]
        by_topic = majority(list(zip(placed, truth, strict=True)))
        by_thread = majority(list(zip(truth, placed, strict=True)))
        purity += [by_topic[topic][1] for topic in placed]
        completeness += [by_thread[thread][1] for thread in truth]
        topics_made += len(profiles)
        threads += len(by_thread)
        for query in session["queries"]:
            picked = resume_topic(query["query"], list(profiles.values()))
            queries += 1
            hits += picked is not None and by_topic[picked][0] == query["thread"]
    values = sorted(costs)
    return {
        "test_set": str(test_set),
        "sessions": len(sessions),
        "messages": len(costs),
        "threads": threads,
        "topics": topics_made,
        "purity": round(sum(purity) / len(purity), 4),
        "completeness": round(sum(completeness) / len(completeness), 4),
        "resume_queries": queries,
        "resume_hit_rate": round(hits / max(queries, 1), 4),
        "assign_us": {
            "p50_us": round(values[len(values) // 2], 1),
            "p99_us": round(values[min(len(values) - 1, len(values) * 99 // 100)], 1),
        },
    }


def builtin_vectors(test_set: Path) -> tuple[Vectors, str]:
    """Every distinct message's vector from the builtin model (the hashing stand-in when the
    model's wheels are missing: its name says which)."""
    from worker.embedders.configured import builtin_model

    model = builtin_model("minilm")
    texts = sorted({m["text"] for session in load_sessions(test_set) for m in session["messages"]})
    found = model.embed_passages(texts)
    vectors = {text: tuple(float(x) for x in row) for text, row in zip(texts, found, strict=True)}
    return vectors, type(model).__name__


def measure_all(test_set: Path, embedder: str) -> dict[str, Any]:
    """By keywords alone, and (unless the embedder is `none`) with the builtin model's vectors."""
    results: dict[str, Any] = {"keywords": measure_topics(test_set)}
    if embedder != "none":
        vectors, model = builtin_vectors(test_set)
        results["vectors"] = {**measure_topics(test_set, vectors), "model": model}
    return results


def _lines(name: str, results: dict[str, Any]) -> list[str]:
    return [
        f"{name}: sessions / messages / threads / topics made  {results['sessions']} / "
        f"{results['messages']} / {results['threads']} / {results['topics']}",
        f"{name}: purity / completeness  {results['purity']} / {results['completeness']}",
        f"{name}: resume selection hit rate  {results['resume_hit_rate']} "
        f"({results['resume_queries']} queries)",
        f"{name}: assignment CPU us per message p50 / p99  {results['assign_us']['p50_us']} / "
        f"{results['assign_us']['p99_us']}",
    ]


def topics_table(results: dict[str, Any]) -> str:
    lines = [f"topics test set: {results['keywords']['test_set']}"]
    lines += _lines("keywords", results["keywords"])
    if "vectors" in results:
        lines += _lines(f"with {results['vectors']['model']} vectors", results["vectors"])
    if "held_out" in results:
        lines += ["", topics_table(results["held_out"]).replace("test set:", "held-out set:", 1)]
    return "\n".join(lines)


def run_topics(args: Any) -> int:
    """`bench --topics`: a pure function, measured in this process."""
    sets = [Path(args.topics_set)] if args.topics_set else [TEST_SET, HELD_OUT]
    for test_set in sets:
        if not test_set.is_file():
            print(f"no topics test set at {test_set}: give one with --topics-set", file=sys.stderr)
            return 2
    results = measure_all(sets[0], args.embedder or "builtin")
    if len(sets) > 1:
        results["held_out"] = measure_all(sets[1], args.embedder or "builtin")
    print(json.dumps(results) if args.json else topics_table(results))
    return 0
